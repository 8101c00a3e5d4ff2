"""The predicate and expression model: Spark SQL text parsed once into one typed tree.

* :mod:`.nodes`: the tree; :mod:`.parse`: text -> tree bound to a table schema;
* :mod:`.evaluate`: exact vectorised evaluation with pyarrow (partition values, data batches);
* :mod:`.skipping`: the data-skipping rewrite over per-file min/max/nullCount stats;
* :mod:`.sql`: rendering back to Spark SQL (commitInfo, the Spark data plane).
"""

from .evaluate import evaluate, true_mask
from .nodes import Column, Expr, Literal, and_all, conjuncts
from .parse import bind_assignments, parse_expression, parse_predicate
from .sql import to_sql

__all__ = [
    "Column",
    "Expr",
    "Literal",
    "and_all",
    "bind_assignments",
    "conjuncts",
    "evaluate",
    "parse_expression",
    "parse_predicate",
    "to_sql",
    "true_mask",
]
