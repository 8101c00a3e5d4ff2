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
(tests/test_layering.py). The surface is the submodules' ``__all__``, each name stated once, in the
module that defines it. A name loads on first use from the first submodule whose ``__all__`` holds it,
in the order below (each after those it imports), so the clause rules import without pyarrow.
"""

from __future__ import annotations

import importlib

#: the submodules a name is looked up in, each after the ones it imports
_SUBMODULES = ("clauses", "plan", "by_join", "source", "by_file", "by_hash")


def _submodule(module: str):
    return importlib.import_module(f"{__name__}.{module}")


def __getattr__(name: str):
    # not cached here: a setting a test changes on its module (e.g. source.MAX_SOURCE_BYTES) is seen
    if name == "__all__":
        return sorted(n for module in _SUBMODULES for n in _submodule(module).__all__)
    if not name.startswith("_") and name not in _SUBMODULES:  # a submodule the import system loads
        for module in _SUBMODULES:
            loaded = _submodule(module)
            if name in loaded.__all__:
                return getattr(loaded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
