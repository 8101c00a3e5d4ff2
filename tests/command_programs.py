"""Random programs of table commands run in this process (no Spark): the log property tests (checksum
files, log compaction) run one and then check every version the program left against a full replay."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.commands.write import append_arrow

#: one step's argument per command
ARGUMENTS = {
    "append": st.lists(st.integers(0, 40), min_size=1, max_size=8),
    "delete": st.integers(0, 40),
    "update": st.integers(0, 40),
    "upsert": st.lists(st.integers(0, 60), min_size=1, max_size=6, unique=True),
    "optimize": st.just(None),
    "properties": st.sampled_from(["2", "10"]),  # delta.checkpointInterval: "2" checkpoints between the steps
    "idempotent": st.integers(1, 3),
    "restore": st.integers(0, 3),
}


def steps(*commands: str):
    """A strategy of ``(command, argument)`` steps over ``commands``."""
    return st.one_of(*(st.tuples(st.just(c), ARGUMENTS[c]) for c in commands))


def rows(ids) -> pa.Table:
    """Rows of the programs' tables (``id BIGINT, p INT``)."""
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([i % 3 for i in ids], pa.int32())})


def run(t, root: str, program) -> None:
    """Each step of ``program`` on the table ``t`` (a DeltaTable without Spark) at ``root``."""
    for kind, arg in program:
        if kind == "append":
            append_arrow(root, rows(arg))
        elif kind == "delete":
            t.delete(f"id < {arg}")
        elif kind == "update":
            t.update({"id": "id + 100"}, f"id = {arg}")
        elif kind == "upsert":
            t.upsert(rows(arg), ["id"])
        elif kind == "optimize":
            t.optimize()
        elif kind == "properties":
            t.set_properties({"delta.checkpointInterval": arg})
        elif kind == "idempotent":
            append_arrow(root, rows([arg]), app_id="job", app_version=arg)
        else:  # restore
            t.restore(version=min(arg, t.version()))
