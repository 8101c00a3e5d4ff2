"""MERGE's semantics as a plain-Python reference (Delta's rules read row by row), the clause lists and
ON conditions the property tests draw, and the checks they share: used by the Spark MERGE tests and the
in-process (no JVM) ones alike."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import strategies as st

deltalake = pytest.importorskip("deltalake")


# (condition text, Python reading over (target row, source row)); None: always
MATCHED_CONDS = [
    None,
    ("source.v > target.v", lambda t, s: _gt(s["v"], t["v"])),
    ("source.v IS NULL", lambda t, s: s["v"] is None),
]
NOT_MATCHED_CONDS = [None, ("source.v > 0", lambda t, s: _gt(s["v"], 0))]
BY_SOURCE_CONDS = [None, ("target.p = 1", lambda t, s: t["p"] == 1), ("target.v < 0", lambda t, s: _gt(0, t["v"]))]


def _gt(a, b):
    return None if a is None or b is None else a > b


def _add(a, b):
    return None if a is None or b is None else a + b


# (kind, action, assignments for the builder, Python new-row function)
ACTIONS = {
    "matched": [
        ("update", {"v": "source.v"}, lambda t, s: {**t, "v": s["v"]}),
        ("update", {"v": "target.v + 1"}, lambda t, s: {**t, "v": _add(t["v"], 1)}),
        ("update_all", None, lambda t, s: dict(s)),
        ("delete", None, None),
    ],
    "not_matched": [
        ("insert_all", None, lambda t, s: dict(s)),
        (
            "insert",
            {"id": "source.id", "v": "source.v * 10"},
            lambda t, s: {"id": s["id"], "v": None if s["v"] is None else s["v"] * 10, "p": None},
        ),
    ],
    "not_matched_by_source": [
        ("update", {"v": "target.v * 2"}, lambda t, s: {**t, "v": None if t["v"] is None else t["v"] * 2}),
        ("delete", None, None),
    ],
}
CONDS = {"matched": MATCHED_CONDS, "not_matched": NOT_MATCHED_CONDS, "not_matched_by_source": BY_SOURCE_CONDS}

keys = st.one_of(st.none(), st.integers(0, 12))
vals = st.one_of(st.none(), st.integers(-3, 3))
row = st.fixed_dictionaries({"id": keys, "v": vals, "p": st.integers(0, 2)})


@st.composite
def clause_lists(draw):
    out = []
    for kind in ("matched", "not_matched", "not_matched_by_source"):
        n = draw(st.integers(0, 2))
        for k in range(n):
            cond = draw(st.sampled_from(CONDS[kind]))
            if cond is None and k < n - 1:
                cond = CONDS[kind][1]  # only the last of a kind may omit its condition
            out.append((kind, draw(st.sampled_from(ACTIONS[kind])), cond))
    if not out:
        out.append(("not_matched", ACTIONS["not_matched"][0], None))
    return out


# ON conditions: (text, Python reading over (target row, source row))
ONS = [
    ("target.id = source.id", lambda t, s: t["id"] is not None and t["id"] == s["id"]),
    ("target.id <=> source.id", lambda t, s: t["id"] == s["id"]),
    (
        "target.id = source.id AND target.p = source.p",
        lambda t, s: t["id"] is not None and (t["id"], t["p"]) == (s["id"], s["p"]),
    ),
    (
        "target.id = source.id AND source.v >= target.p",
        lambda t, s: t["id"] is not None and t["id"] == s["id"] and _gt(s["v"], t["p"] - 1) is True,
    ),
]

#: a random MERGE program: target rows, source rows, clauses, partitioned or not, the ON condition
PROGRAM = (st.lists(row, max_size=12), st.lists(row, max_size=6), clause_lists(), st.booleans(), st.sampled_from(ONS))


def build_merge(t, source, clauses, on=ONS[0][0]):
    b = t.merge(source, on)
    for kind, (action, assignments, _fn), cond in clauses:
        b = _clause(b, kind, action, assignments, cond[0] if cond else None)
    return b


def _clause(b, kind, action, assignments, c):
    """One builder call per (kind, action)."""
    name = {"update_all": "update_all", "insert_all": "insert_all"}.get(action, action)
    method = getattr(b, f"when_{kind}_{name}")
    return method(assignments, c) if assignments is not None else method(c)


class Duplicate(Exception):
    pass


def reference(target, source, clauses, on=ONS[0][1]):
    """Delta's MERGE semantics, row by row: the rows after, the rows inserted, the rows updated and
    deleted, and the change feed's rows ``(row, _change_type)``."""

    def first(kind, t, s):
        for k, (action, _a, fn), cond in clauses:
            if k == kind and (cond is None or cond[1](t, s) is True):
                return action, fn
        return None

    out, inserted, changed, feed = [], 0, {"u": 0, "d": 0}, []
    matched_clauses = [c for c in clauses if c[0] == "matched"]
    lone_delete = len(matched_clauses) == 1 and matched_clauses[0][1][0] == "delete" and matched_clauses[0][2] is None
    for t in target:
        ms = [s for s in source if on(t, s)]
        if ms:
            fired = [(first("matched", t, s), s) for s in ms]
            fired = [(a, s) for a, s in fired if a is not None]
            if len(fired) > 1 and not lone_delete:
                raise Duplicate
            if not fired:
                out.append(t)
                continue
            (action, fn), s = fired[0]
        else:
            hit = first("not_matched_by_source", t, None)
            if hit is None:
                out.append(t)
                continue
            (action, fn), s = hit, None
        if action == "delete":
            changed["d"] += 1
            feed.append((t, "delete"))
        else:
            changed["u"] += 1
            out.append(fn(t, s))
            feed += [(t, "update_preimage"), (fn(t, s), "update_postimage")]
    for s in source:
        if any(on(t, s) for t in target):
            continue
        hit = first("not_matched", None, s)
        if hit is not None:
            out.append(hit[1](None, s))
            feed.append((hit[1](None, s), "insert"))
            inserted += 1
    return out, inserted, changed, feed


def row_key(r):
    return tuple((v is None, v) for v in (r["id"], r["v"], r["p"]))


def assert_changes(root: str, version: int, feed: list, deltalake_too: bool) -> None:
    """The change feed of ``version`` equals ``feed`` (``(row, _change_type)``), read by us (and by
    deltalake's ``load_cdf``, which does not read deletion vectors)."""
    from airflow_delta_provider_apps.engine import cdf
    from airflow_delta_provider_apps.engine.storage import storage_for

    def canon(rows):
        return sorted(((r["_change_type"], *row_key(r)) for r in rows), key=repr)

    want = canon([{**r, "_change_type": kind} for r, kind in feed])
    storage = storage_for(root)
    plan = cdf.plan_changes(storage, root, version, version)
    ours = [r for b in cdf.iter_changes(storage, plan) for r in b.to_pylist()]
    assert canon(ours) == want
    assert {r["_commit_version"] for r in ours} <= {version}
    if deltalake_too:
        theirs = pa.table(deltalake.DeltaTable(root).load_cdf(starting_version=version, ending_version=version))
        assert canon(theirs.to_pylist()) == want


def file_rows(snapshot) -> dict:
    """{path: numRecords} of the snapshot's live files."""
    import json

    files = snapshot.files.select(["path", "stats"]).to_pylist()
    return {f["path"]: json.loads(f["stats"])["numRecords"] for f in files}
