"""The transaction identity as one value (issue 43): ``TxnIdentity`` is checked once, when made; the
registry reads it from a run's parameters; DeltaTable's methods take it as ``identity=`` or as the
three keywords, folded at one place (``commit_identity.takes_identity``). Real commits, read back
from the log."""

from __future__ import annotations

import inspect

import pyarrow as pa
import pytest

from airflow_delta_provider_apps import operations as ops
from airflow_delta_provider_apps.engine import DeltaTable
from airflow_delta_provider_apps.engine.commands.write import append_arrow
from airflow_delta_provider_apps.engine.commit_identity import TxnIdentity
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError
from airflow_delta_provider_apps.engine.reader import read_snapshot_table


def test_identity_is_checked_once_when_made():
    assert TxnIdentity("job", "7") == TxnIdentity("job", 7)  # a rendered template's text
    with pytest.raises(InvalidArgumentError, match="needs both an application id and a version"):
        TxnIdentity("job")
    with pytest.raises(InvalidArgumentError, match="needs both an application id and a version"):
        TxnIdentity(app_version=3)
    with pytest.raises(InvalidArgumentError, match="is not an integer"):
        TxnIdentity("job", "seven")
    # the registry reads it from a run's parameters; an operation that commits nothing has none
    params = {"app_id": "job", "app_version": "3", "user_metadata": "m", "predicate": "id = 1"}
    assert ops.get("delete").identity(params) == TxnIdentity("job", 3, "m")
    assert ops.get("describe").identity(params) == TxnIdentity()
    assert TxnIdentity("job", 3, "m").options() == {"app_id": "job", "app_version": 3, "user_metadata": "m"}


def test_deltatable_takes_the_identity_or_its_three_keywords(tmp_path):
    root = str(tmp_path / "t")
    t = DeltaTable.create(None, root, schema="id BIGINT, v STRING")
    append_arrow(root, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), app_id="load", app_version=1)
    assert {"identity", "app_id", "app_version", "user_metadata"} <= set(inspect.signature(t.delete).parameters)

    first = t.delete("id = 1", identity=TxnIdentity("job", 1, "by value"))
    again = t.delete("id = 2", app_id="job", app_version=1)  # the same identity by keywords: skipped
    assert (first["committed"], again["skipped"], again["version"]) == (True, True, first["version"])
    with pytest.raises(InvalidArgumentError, match="Both identity= and app_id were given"):
        t.delete("id = 2", identity=TxnIdentity("job", 2), app_id="other")
    updated = t.update({"v": "upper(v)"}, "id = 3", user_metadata="by keyword")
    assert t.version() == updated["version"] == first["version"] + 1  # the refused delete wrote nothing

    rows = read_snapshot_table(t.snapshot()).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [(2, "b"), (3, "C")]
    history = t.history()
    assert [h.get("userMetadata") for h in history[:2]] == ["by keyword", "by value"]
    assert t.snapshot().set_transactions["job"].version == 1
    assert t.snapshot().set_transactions["load"].version == 1
