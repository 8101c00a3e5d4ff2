"""What the file rewriters share: the outcome of one file, the observers of a run, when a run stays
in this process, deleting what a failed run wrote, and marking rows through deletion vectors. The
Arrow helpers they use are :mod:`..arrays`'s."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..writer import WrittenFile

__all__ = [
    "LIKELY_MATCHES",
    "IN_PROCESS_BYTES",
    "files_bytes",
    "FileOutcome",
    "task_schema",
    "to_task_row",
    "from_task_row",
    "RewriteRecord",
    "record_outcomes",
    "notify",
    "discard",
    "as_written",
    "has_deletion_vector",
    "marked_deletion_vector",
]

LIKELY_MATCHES = 3.0
"""Expected matching rows (from a file's stats) from which it is rewritten in one pass: with rows
matching independently, a file expected to hold 3 matches holds none with probability ~5%."""


#: candidate files up to this many bytes in all are rewritten (DELETE, UPDATE), compacted (OPTIMIZE) or
#: merged (MERGE) by threads of the driver (over Spark Connect, the task's own process), even when
#: larger ones go to Spark tasks: a Spark job, and the Python worker a fresh application or Connect
#: session starts for it, costs more than the work (the choice, which ``spark.airflowDelta.fileWork=tasks``
#: overrides: ``spark.plane.SparkPlane.in_driver``)
IN_PROCESS_BYTES = 64 << 20


def files_bytes(files: pa.Table) -> int:
    """The bytes of ``files`` (rows of ``snapshot.files``)."""
    import pyarrow.compute as pc

    total = pc.sum(files.column("size")).as_py() if "size" in files.column_names and files.num_rows else 0
    return int(total or 0)


@dataclass
class FileOutcome:
    """What happened to one candidate file.

    ``probe_ms`` is the time spent finding the matching rows (the probe pass, or the reading and
    evaluating of a one pass), ``rewrite_ms`` the rest (writing, and the second read of a probed
    file). ``read_ms`` / ``eval_ms`` / ``write_ms`` split the same time by kind of work (parquet
    reading and conforming; predicate and ``SET`` evaluation and filtering; parquet writing with
    stats, and deleting what a one pass wrote for nothing). ``reads`` is the passes over the file's
    data (1 or 2), ``one_pass`` the plan taken, ``discarded`` the files a one pass wrote and deleted.
    """

    path: str
    num_rows: int = 0
    num_matched: int = 0
    written: list[WrittenFile] = field(default_factory=list)
    probe_ms: int = 0
    rewrite_ms: int = 0
    read_ms: int = 0
    eval_ms: int = 0
    write_ms: int = 0
    reads: int = 0
    one_pass: bool = False
    discarded: int = 0
    #: DELETE with deletion vectors: the file's new deletion vector (descriptor, wire form), or
    #: ``fully_deleted`` when no live row is left (the file is removed, not re-added)
    deletion_vector: dict | None = None
    fully_deleted: bool = False
    #: the change data feed's files written for this file's changed rows (AddCDCFile in ``add``)
    changes: list[WrittenFile] = field(default_factory=list)

    #: the counts a per-file task reports (:func:`to_task_row`)
    TASK_COUNTS = (
        "num_rows",
        "num_matched",
        "probe_ms",
        "rewrite_ms",
        "read_ms",
        "eval_ms",
        "write_ms",
        "reads",
        "discarded",
    )
    TASK_EXTRA = (("one_pass", pa.bool_()),)

    def task_extra(self) -> dict:
        return {"one_pass": self.one_pass}

    def from_task_extra(self, row: dict) -> None:
        self.one_pass = bool(row["one_pass"])

    @property
    def touched(self) -> bool:
        return self.num_matched > 0

    @property
    def marked(self) -> bool:
        """Its rows were deleted through a deletion vector (or the whole file removed), not rewritten."""
        return self.deletion_vector is not None or self.fully_deleted

    @property
    def num_written_rows(self) -> int:
        return sum(w.num_rows for w in self.written)


# ---------------------------------------------------------------------------------------------
# an outcome as one row of a per-file task's output (the Spark plane ships them back as such)

#: what every outcome reports of its file, before its kind's own counts (``TASK_COUNTS``)
_FILE_FIELDS = [
    ("path", pa.string()),
    ("written", pa.string()),
    ("changes", pa.string()),
    ("dv", pa.string()),
    ("fully_deleted", pa.bool_()),
]


def task_schema(cls) -> pa.Schema:
    """The output row of a per-file task reporting ``cls`` outcomes: the file's fields, then the
    class's ``TASK_COUNTS`` (integers) and ``TASK_EXTRA`` (its own fields, e.g. merge's matches)."""
    return pa.schema([*_FILE_FIELDS, *((c, pa.int64()) for c in cls.TASK_COUNTS), *cls.TASK_EXTRA])


def _files_json(written: list) -> str:
    import json

    return json.dumps([[w.add.to_json(), w.num_rows] for w in written], separators=(",", ":"))


def _files_from_json(text: str | None, action) -> list:
    import json

    return [WrittenFile(action.from_json(a), int(k)) for a, k in json.loads(text or "[]")]


def to_task_row(o) -> dict:
    """Outcome ``o`` as its task's output row (:func:`task_schema` of its class)."""
    import json

    row = {
        "path": o.path,
        "written": _files_json(o.written),
        "changes": _files_json(o.changes),
        "dv": json.dumps(o.deletion_vector) if o.deletion_vector is not None else None,
        "fully_deleted": o.fully_deleted,
    }
    row.update({c: int(getattr(o, c)) for c in type(o).TASK_COUNTS})
    row.update(o.task_extra())
    return row


def from_task_row(cls, row: dict):
    """The outcome (of class ``cls``) a task's output row reports (:func:`to_task_row`)."""
    import json

    from ..actions import AddCDCFile, AddFile

    o = cls(row["path"], **{c: int(row[c] or 0) for c in cls.TASK_COUNTS})
    o.written = _files_from_json(row["written"], AddFile)
    o.changes = _files_from_json(row["changes"], AddCDCFile)
    o.deletion_vector = json.loads(row["dv"]) if row["dv"] else None
    o.fully_deleted = bool(row["fully_deleted"])
    o.from_task_extra(row)
    return o


# ---------------------------------------------------------------------------------------------
# observers (the bench reads the per-file breakdown of a command through this)


class RewriteRecord(list):
    """The outcomes of the rewrites run inside :func:`record_outcomes`, with ``runs`` (rewrite
    calls) and ``wall_ms`` (their summed wall time, from the files listed to the outcomes back:
    thread pool or Spark job included)."""

    def __init__(self):
        super().__init__()
        self.runs = 0
        self.wall_ms = 0


_observers: list[RewriteRecord] = []
_observers_lock = threading.Lock()


@contextlib.contextmanager
def record_outcomes() -> Iterator[RewriteRecord]:
    """Collect the outcomes of every rewrite run (in this process or in Spark tasks) while the
    block is active (the bench reads a command's time split through this)."""
    got = RewriteRecord()
    with _observers_lock:
        _observers.append(got)
    try:
        yield got
    finally:
        with _observers_lock:
            _observers.remove(got)


def notify(outcomes: list[FileOutcome], wall_ms: int = 0) -> None:
    """Hand ``outcomes`` (and the wall time of the run) to the active :func:`record_outcomes` blocks."""
    with _observers_lock:
        for got in _observers:
            got.extend(outcomes)
            got.runs += 1
            got.wall_ms += int(wall_ms)


def discard(storage, table_uri: str, outcomes: list) -> None:
    """Delete the files ``outcomes`` wrote, data and change files (best effort: an undeleted one is an
    orphan VACUUM removes)."""
    from ..paths import data_file_uri

    for o in outcomes:
        for w in [*o.written, *getattr(o, "changes", ())]:
            try:
                storage.delete(data_file_uri(table_uri, w.add.path))
            except Exception:  # cleanup after a failure must not hide that failure
                pass


def as_written(actions: list) -> list:
    """AddFile actions as WrittenFile entries (for :func:`discard`)."""
    return [WrittenFile(a, 0) for a in actions]


def has_deletion_vector(dv) -> bool:
    """Whether ``dv`` (a descriptor, its dict or JSON, or None) names a deletion vector."""
    if isinstance(dv, str):
        import json

        dv = json.loads(dv)
    if dv is None:
        return False
    if isinstance(dv, dict):
        return dv.get("storageType") is not None or dv.get("storage_type") is not None
    return True


def marked_deletion_vector(storage, table_uri: str, old, rows: np.ndarray, physical: int) -> dict | None:
    """``rows`` (physical row indexes of one data file) joined with the file's deletion vector
    ``old`` and stored as a new vector (inline in the log when small, else a file): its descriptor,
    or None when none of the file's ``physical`` rows stays live (the file is then removed whole, no
    vector written)."""
    from ..dv import deleted_row_indexes, deletion_vector

    before = deleted_row_indexes(storage, table_uri, old) if has_deletion_vector(old) else np.empty(0, np.uint64)
    rows = np.union1d(before, np.asarray(rows, dtype=np.uint64))
    if len(rows) >= physical:
        return None
    return deletion_vector(storage, table_uri, rows)
