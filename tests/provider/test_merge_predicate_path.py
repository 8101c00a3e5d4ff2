"""The path of a MERGE's ON condition from the operator to the data plane (issue 43: "the files a MERGE
predicate visits from operator to plane"), measured on a real run: ``DeltaMergeOperator`` with
``execution="local"`` (in the worker, no Spark) under :func:`sys.setprofile`.

Counted: the distinct source files of the provider and the apps with a frame, entered between the
operator's ``execute`` and the plane's ``merge``, that holds the ON condition: the string itself (or
a string quoting it), the expression values parsed from it (followed by identity: a value of the
engine's expression model returned by a frame that held the condition), or a container holding one
of those (a parameters dict or dataclass, two levels down). The plane's ``merge`` is the end of the
path and counts. A hop that only passes the condition on (a wrapper, a rename, a second check)
shows up here as a file; the assertion keeps the path from growing back.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq

import airflow_delta_provider
import airflow_delta_provider_apps
from airflow_delta_provider.operators.delta import DeltaMergeOperator
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.create_table import create_table
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.reader import read_snapshot_table

# where our two packages are loaded from (the source tree, or site-packages when installed), and
# the name each is shown by (its folder in the repository)
ROOTS = {
    os.path.dirname(os.path.abspath(airflow_delta_provider.__file__)): "airflow_delta_provider",
    os.path.dirname(os.path.abspath(airflow_delta_provider_apps.__file__)): "spark_apps",
}
OURS = tuple(root + os.sep for root in ROOTS)
EXPRESSIONS = "airflow_delta_provider_apps.engine.expr"
ON = "target.id = source.id AND target.v IS NOT NULL"
MOST_FILES = 13  # measured after the path was shortened (20 before: see the commit)


class PathOfCondition:
    """A profile function recording the frames that hold ``ON`` (see the module docstring)."""

    def __init__(self):
        self.derived: dict[int, object] = {}  # id -> value parsed from the condition (kept alive)
        self.frames: list[tuple[str, str]] = []
        self.started = self.ended = False

    def holds(self, value, depth: int = 2) -> bool:
        if isinstance(value, str):
            return ON in value
        if id(value) in self.derived:
            return True
        if depth == 0:
            return False
        if isinstance(value, dict):
            items = list(value.values())[:64]
        elif isinstance(value, (list, tuple)):
            items = list(value)[:64]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
        else:
            return False
        return any(self.holds(v, depth - 1) for v in items)

    def frame_holds(self, frame) -> bool:
        return any(self.holds(v) for v in list(frame.f_locals.values()))

    def __call__(self, frame, event, arg):
        if self.ended:
            return
        code = frame.f_code
        if event == "call":
            if not self.started and code.co_filename.endswith(os.path.join("operators", "delta.py")):
                self.started = code.co_name == "execute"
            if not self.started or not code.co_filename.startswith(OURS):
                return
            if code.co_filename.endswith(os.path.join("engine", "plane.py")) and code.co_name == "merge":
                self.frames.append((code.co_filename, code.co_name))
                self.ended = True
            elif self.frame_holds(frame):
                self.frames.append((code.co_filename, code.co_name))
        elif event == "return" and self.started and code.co_filename.startswith(OURS):
            if type(arg).__module__.startswith(EXPRESSIONS) and self.frame_holds(frame):
                self.derived[id(arg)] = arg

    def files(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for path, name in self.frames:
            root = next(r for r in ROOTS if path.startswith(r + os.sep))
            names = out.setdefault(os.path.join(ROOTS[root], os.path.relpath(path, root)), [])
            if name not in names:
                names.append(name)
        return out


def test_the_on_condition_visits_few_files_from_the_operator_to_the_plane(tmp_path):
    root = str(tmp_path / "t")
    create_table(root, schema="id BIGINT, v STRING")
    append_arrow(root, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    (tmp_path / "src").mkdir()
    source = {"id": [2, 3, 4], "v": ["B", "skip", "D"]}
    pq.write_table(pa.table(source), tmp_path / "src" / "part-0.parquet")
    op = DeltaMergeOperator(
        task_id="m",
        table_uri=root,
        source=str(tmp_path / "src"),
        predicate=ON,
        clauses=[
            {"when": "matched", "then": "update_all", "condition": "source.v <> 'skip'"},
            {"when": "not_matched", "then": "insert_all"},
        ],
        execution="local",
    )
    path = PathOfCondition()
    before = sys.getprofile()
    sys.setprofile(path)
    threading.setprofile(path)
    try:
        done = op.execute({})
    finally:
        sys.setprofile(before)
        threading.setprofile(None)

    # the MERGE itself, against plain Python: matched rows updated unless the clause says no, new ones in
    expected = {1: "a", 2: "b", 3: "c"}
    for key, v in zip(source["id"], source["v"]):
        if key not in expected or v != "skip":
            expected[key] = v
    rows = read_snapshot_table(DeltaTable.for_path(None, root).snapshot()).to_pylist()
    assert {r["id"]: r["v"] for r in rows} == expected
    assert (done["transport"], done["metrics"]["numTargetRowsUpdated"], done["metrics"]["numTargetRowsInserted"]) == (
        "local",
        1,
        1,
    )

    files = path.files()
    print(f"\nthe ON condition's path: {len(files)} files")
    for name, functions in files.items():
        print(f"  {name}: {', '.join(functions)}")
    assert path.ended, "the run never reached the plane's merge"
    assert next(iter(files)) == os.path.join("airflow_delta_provider", "operators", "delta.py")
    assert list(files)[-1] == os.path.join("spark_apps", "engine", "plane.py")
    assert len(files) <= MOST_FILES, files
