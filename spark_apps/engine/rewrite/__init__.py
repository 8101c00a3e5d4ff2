"""The file rewriters: every way a command writes a data file again, in pure pyarrow (in a Spark task
or in this process), behind one surface.

* :mod:`.files` - DELETE and UPDATE (and ``replace_where``'s overwrite): each candidate file probed,
  and rewritten without the deleted rows or with the updated values when a row matches;
* :mod:`.compact` - OPTIMIZE's bins: files read and written again with the same rows, a bin being
  a unit of the same loop (:func:`.files.run_units` here, one Spark job's tasks in Spark);
* :mod:`.common` - what they share: a file's outcome, the run observers, the bytes of a set of
  files (:func:`files_bytes`, which decide where a run goes); the Arrow helpers are :mod:`..arrays`'s.

Spark runs them through :mod:`..spark.rewrite`; MERGE's file-by-file
rewrite is :mod:`..merge.by_file` (on the same helpers).
"""

from .common import (
    LIKELY_MATCHES,
    FileOutcome,
    RewriteRecord,
    discard,
    files_bytes,
    notify,
    record_outcomes,
)
from .compact import Compactor, CompactSpec, compact_bin, compact_files
from .files import Bound, RewriteSpec, likely_touched, rewrite_file, rewrite_files, run_units

__all__ = [
    "LIKELY_MATCHES",
    "FileOutcome",
    "RewriteRecord",
    "RewriteSpec",
    "Bound",
    "CompactSpec",
    "Compactor",
    "compact_bin",
    "compact_files",
    "discard",
    "files_bytes",
    "likely_touched",
    "notify",
    "record_outcomes",
    "rewrite_file",
    "rewrite_files",
    "run_units",
]
