"""MERGE by join (docs/design.md "MERGE's two strategies"), the part every plane shares: which source
columns are checked unique in the plane's one pass over the source (an upsert's keys, or ON's keys of
an upsert written as clauses), whether no target row can then match twice, and the candidate files
from the source's key values. The join itself is the plane's (:mod:`..spark.merge`)."""

from __future__ import annotations

from collections.abc import Callable

from .plan import MAX_PRUNING_VALUES, MergeJob, MergeOutcome, source_columns

__all__ = ["merge_by_join"]


def merge_by_join(job: MergeJob, key_values: Callable[..., tuple], join: Callable[..., MergeOutcome]) -> MergeOutcome:
    """MERGE ``job`` as a join of the whole source with the candidate files.

    :param key_values: ``key_values(max_values, unique=, refuse=)`` -> ``(materialised source, rows, key
        values, distinct)``: one pass over the source; with ``unique`` ``(columns, names)`` a key held
        twice is refused (``refuse``) or reported (``distinct`` False)
    :param join: ``join(materialised source, candidates, rows, unique_matches)`` -> the outcome
    """
    plan = job.plan
    names, columns = source_columns(plan.source_schema, list(job.unique_keys))
    asked = [] if columns or not plan.upsert_shaped else _equated_source_columns(job.keys, plan.source_alias)
    if asked:  # an upsert by clauses: are its ON keys unique? (then it joins as key_columns does)
        names, columns = source_columns(plan.source_schema, asked)
    materialised, num_source_rows, values, distinct = key_values(
        MAX_PRUNING_VALUES, unique=(columns, names) if columns else None, refuse=not asked
    )
    if asked and not distinct:
        columns = []
    # whether no target row can match two source rows
    unique_matches = bool(columns) and _covers(job.keys, names, plan.source_alias)
    candidates = job.select(num_source_rows, values, "join")
    return join(materialised, candidates, num_source_rows, unique_matches)


def _equated_source_columns(keys: list, source_alias: str) -> list[str]:
    """The top-level source columns ON's ``target.k = source.c`` equalities (``=``) name; empty when a
    key is anything else (a ``<=>`` or an expression), which a unique check of them would not cover."""
    from ..expr import nodes as n

    out = []
    for _t, s, op in keys:
        if op != "=" or not isinstance(s, n.Column) or s.relation != source_alias or len(s.path) != 1:
            return []
        out.append(s.path[0])
    return list(dict.fromkeys(out))


def _covers(keys: list, names: list[str], source_alias: str) -> bool:
    """Whether ON's ``target.k = source.c`` equalities (``=``: a NULL never matches) name every one
    of the source columns ``names``, whose non-NULL values are unique: then two source rows matching
    one target row would share all of them, and no target row can match twice."""
    from ..expr import nodes as n

    equal = {s.path for _t, s, op in keys if op == "=" and isinstance(s, n.Column) and s.relation == source_alias}
    return all((name,) in equal for name in names)


# --------------------------------------------------------------------------------------------------
# the command
