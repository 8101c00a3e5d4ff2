"""Hostile logs: a table whose newest commit names a data file outside the table root (issue: hostile logs).

Layout of one case (everything under one folder ``case``, which the tests watch as a whole)::

    case/secret.parquet    a real parquet file with a recognisable row (a read must never return it)
    case/victim.parquet    a real parquet file a mutation must never read, rewrite, copy or delete
    case/t/                the table root: a prepared table (copied) plus one hand-written commit
                           whose ``add`` names an outside file in one of the :data:`SPELLINGS`

Only pyarrow and the standard library here (imported by module name from tests/; no fixtures).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq

SECRET_ID, VICTIM_IDS = 666, (777, 778)
SECRET_VALUE, VICTIM_VALUE = "SECRET-ROW", "VICTIM-ROW"
OUTSIDE_IDS = frozenset({SECRET_ID, *VICTIM_IDS})
OUTSIDE_VALUES = frozenset({SECRET_VALUE, VICTIM_VALUE})
FAKE_NUM_RECORDS = 1_000_000  # the hostile add's stats: a DELETE that counts them reports this many rows

TABLE_DIR = "t"
OUTSIDE_FILES = {"secret": "secret.parquet", "victim": "victim.parquet"}

# How the hostile ``add.path`` names the outside file ``{f}`` (``{case}``: the case folder, absolute;
# ``{part}``: a folder inside the table, ``p=a`` or ``dt=1``). ``bare``: the table's parent folder.
SPELLINGS = {
    "dotdot": "../{f}",
    "encoded": "%2E%2E/{f}",
    "absolute": "{case}/{f}",
    "file-uri": "file://{case}/{f}",
    "nested": "{part}/../../{f}",
    "bare": "..",
}


def outside_table(kind: str) -> pa.Table:
    """The rows of the secret (one row) or the victim (two rows) file: columns id, value, p."""
    if kind == "secret":
        ids, values = [SECRET_ID], [SECRET_VALUE]
    else:
        ids, values = list(VICTIM_IDS), [VICTIM_VALUE, VICTIM_VALUE + "-2"]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "value": pa.array(values, pa.string()),
            "p": pa.array(["a"] * len(ids), pa.string()),
        }
    )


def write_outside_files(case: str) -> None:
    for kind, name in OUTSIDE_FILES.items():
        pq.write_table(outside_table(kind), os.path.join(case, name))


def hostile_path(spelling: str, case: str, target: str, partitioned: bool) -> str:
    """The ``add.path`` of ``spelling`` naming the outside file ``target`` (``secret`` / ``victim``)."""
    return SPELLINGS[spelling].format(f=OUTSIDE_FILES[target], case=case, part="p=a" if partitioned else "dt=1")


def latest_version(root: str) -> int:
    log = os.path.join(root, "_delta_log")
    return max(int(n[:20]) for n in os.listdir(log) if re.fullmatch(r"\d{20}\.json", n))


def append_hostile_commit(root: str, path: str, *, size: int, partitioned: bool) -> int:
    """Append a hand-written commit whose one ``add`` names ``path`` (exactly as given); returns its version.

    Its stats claim :data:`FAKE_NUM_RECORDS` rows and no min/max, so data skipping keeps it as a
    candidate of any data predicate."""
    version = latest_version(root) + 1
    actions = [
        {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE", "operationParameters": {}}},
        {
            "add": {
                "path": path,
                "partitionValues": {"p": "a"} if partitioned else {},
                "size": size,
                "modificationTime": 1_700_000_000_000,
                "dataChange": True,
                "stats": json.dumps({"numRecords": FAKE_NUM_RECORDS}),
            }
        },
    ]
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "x") as f:
        for a in actions:
            f.write(json.dumps(a) + "\n")
    return version


def tree_state(folder: str) -> dict[str, tuple]:
    """Every file and folder under ``folder`` (relative path -> (kind, size, mtime_ns, sha1 of the bytes))."""
    out: dict[str, tuple] = {}
    for d, dirs, files in os.walk(folder):
        for name in dirs:
            out[os.path.relpath(os.path.join(d, name), folder) + "/"] = ("dir",)
        for name in files:
            full = os.path.join(d, name)
            st = os.stat(full)
            with open(full, "rb") as fh:
                digest = hashlib.sha1(fh.read()).hexdigest()
            out[os.path.relpath(full, folder)] = ("file", st.st_size, st.st_mtime_ns, digest)
    return out


def tree_changes(before: dict, after: dict) -> list[str]:
    """What differs between two :func:`tree_state` results, one line per path."""
    out = [f"new: {p}" for p in sorted(set(after) - set(before))]
    out += [f"gone: {p}" for p in sorted(set(before) - set(after))]
    out += [f"changed: {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return out
