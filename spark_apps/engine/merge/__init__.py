"""MERGE INTO, by concern (docs/design.md "MERGE's two strategies"); the command that runs it is
:mod:`..commands.merge`.

* :mod:`.clauses` - the clause rules (kinds, actions, order); imports nothing, so the operations
  registry reads them at DAG parse time;
* :mod:`.plan` - the clauses bound to the schemas, the order they fire in, ON's key equalities and the
  candidate predicate, the job a data plane runs and its outcome;
* :mod:`.source` - the source: its size limit to travel beside every file, its Arrow form, one row per
  key (an upsert's ``dedupe_by``), its keys checked unique;
* :mod:`.by_file` - a small source beside every candidate file (pure pyarrow, in a thread or a task);
* :mod:`.by_hash` - a large source held as Arrow, joined by hash with the candidate files' keys in
  this process (Acero), then only the touched files rewritten;
* :mod:`.by_join` - a large source joined with the candidate files: the shared part (the join is the
  plane's: :mod:`..spark.merge`).

This is the package's surface: modules outside it import these names from here, never a submodule
(tests/test_layering.py). The table below names each submodule's ``__all__`` (the layering test holds
it equal to them, read from their sources); names load on first use, so the clause rules import
without pyarrow.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "clauses": (
        "CLAUSES",
        "KINDS",
        "MATCHED",
        "NEEDS",
        "NOT_MATCHED",
        "NOT_MATCHED_BY_SOURCE",
        "allowed",
        "clause_problem",
        "order_problem",
    ),
    "plan": (
        "MAX_PRUNING_VALUES",
        "BoundClause",
        "MergeClause",
        "MergeJob",
        "MergeOutcome",
        "MergePlan",
        "bind_plan",
        "candidate_predicate",
        "duplicate_match_error",
        "evolved_schema",
        "first_firing",
        "key_equalities",
        "source_columns",
        "upsert_condition",
    ),
    "source": (
        "MAX_SOURCE_BYTES",
        "deduplicated_arrow",
        "duplicate_keys_error",
        "first_duplicate_key",
        "fixed_width",
        "prefixed",
        "row_width",
        "source_row_limit",
    ),
    "by_file": (
        "MergeFileOutcome",
        "MergeFilesSpec",
        "PreparedMerge",
        "TouchStreak",
        "execute_by_file",
        "inserted_rows",
        "likely_touched",
        "merge_by_file",
        "merge_file",
        "merge_files",
        "merged_outcome",
        "rewrite_file",
    ),
    "by_hash": ("HASH_JOIN_ROWS", "STRATEGY", "joins_by_hash", "merge_by_hash"),
    "by_join": ("merge_by_join",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    # not cached here: a setting a test changes on its module (e.g. source.MAX_SOURCE_BYTES) is seen
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
