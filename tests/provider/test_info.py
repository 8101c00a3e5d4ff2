"""Provider metadata: shape (validated against Airflow's own provider_info schema), the installed entry
point, every declared module importable with the classes it should hold, and operator parse-time rules.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from airflow_delta_provider.get_provider_info import get_provider_info


def test_provider_info_validates_against_airflow_schema():
    import airflow
    import jsonschema

    schema_path = os.path.join(os.path.dirname(airflow.__file__), "provider_info.schema.json")
    with open(schema_path) as f:
        schema = json.load(f)
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "airflow-delta-provider"
    assert info["versions"] and info["name"] == "Delta Lake"
    # our own connection types (Spark, then one per catalog); "spark" stays the apache-spark provider's
    types = [c["connection-type"] for c in info["connection-types"]]
    assert types == ["delta_spark", "delta_glue", "delta_hive_metastore"]
    from airflow_delta_provider.hooks.catalog import DeltaGlueHook, DeltaHiveMetastoreHook

    for hook in (DeltaGlueHook, DeltaHiveMetastoreHook):  # each type's hook names it, its form from the info
        entry = next(c for c in info["connection-types"] if c["hook-class-name"].endswith("." + hook.__name__))
        assert entry["connection-type"] == hook.conn_type
        assert hook.get_ui_field_behaviour()["hidden_fields"] == entry["ui-field-behaviour"]["hidden-fields"]


def test_entry_point_is_installed():
    eps = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_delta_provider")]
    assert len(eps) == 1
    assert eps[0].load()() == get_provider_info()


@pytest.mark.parametrize(
    "section,expected",
    [
        ("hooks", {"DeltaHook"}),
        (
            "operators",
            {
                "DeltaCreateTableOperator",
                "DeltaWriteOperator",
                "DeltaCheckpointOperator",
                "DeltaDescribeOperator",
                "DeltaHistoryOperator",
            },
        ),
        ("sensors", {"DeltaTableVersionSensor"}),
        ("triggers", {"DeltaTableVersionTrigger"}),
    ],
)
def test_declared_modules_hold_the_classes(section, expected):
    info = get_provider_info()
    integrations = {i["integration-name"] for i in info["integrations"]}
    found = set()
    for entry in info[section]:
        assert entry["integration-name"] in integrations
        for mod in entry["python-modules"]:
            found |= set(vars(importlib.import_module(mod)))
    assert expected <= found


def test_providers_manager_sees_the_provider():
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    assert "airflow-delta-provider" in pm.providers
    assert pm.providers["airflow-delta-provider"].version == get_provider_info()["versions"][0]
    ours = [t for t in pm.trigger if t.package_name == "airflow-delta-provider"]
    assert [t.trigger_class_name for t in ours] == ["airflow_delta_provider.triggers.delta"]
    # Airflow's connection form for "delta_spark" shows the result folder; the "spark" hook is untouched.
    # Airflow 3.2+ reads the form from the provider info; 3.1 asks the hook, which needs Flask AppBuilder
    # (the UI's; not installed in the test virtualenvs of 3.1)
    declared = get_provider_info()["connection-types"][0]["conn-fields"]
    if hasattr(pm, "_load_ui_metadata") or importlib.util.find_spec("flask_appbuilder"):
        assert {f"extra__delta_spark__{name}" for name in declared} <= set(pm.connection_form_widgets)
    from airflow_delta_provider.hooks.delta import DeltaSparkHook

    assert DeltaSparkHook.get_ui_field_behaviour()["relabeling"] == {"host": "Master"}
    assert pm.hooks["delta_spark"].hook_class_name == "airflow_delta_provider.hooks.delta.DeltaSparkHook"
    assert pm.hooks["spark"].package_name == "apache-airflow-providers-apache-spark"
    # the Providers page links the documentation named in the package metadata
    import tomllib

    urls = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["urls"]
    # (Airflow 3.1 keeps the blank after the comma of "Documentation, <url>"; a browser ignores it)
    assert pm.providers["airflow-delta-provider"].data["documentation-url"].strip() == urls["Documentation"]


def test_the_spark_application_link_survives_dag_serialization():
    """The link Airflow's UI shows is the one serialized with the DAG (its URL is read from XCom)."""
    from airflow.sdk import DAG

    from airflow_delta_provider.operators.delta import DeltaWriteOperator

    try:
        from airflow.serialization.serialized_objects import DagSerialization as Serializer
    except ImportError:  # Airflow 3.1
        from airflow.serialization.serialized_objects import SerializedDAG as Serializer
    with DAG("links") as dag:
        DeltaWriteOperator(task_id="w", table_uri="/lake/t", source="/in/x.parquet")
    task = Serializer.from_dict(Serializer.to_dict(dag)).get_task("w")
    assert [link.name for link in task.operator_extra_links] == ["Spark application", "Delta table"]


def test_airflow_3_1_builds_the_same_connection_form_from_the_hook(monkeypatch):
    """Airflow 3.1 asks the hook for its form fields (wtforms and Flask AppBuilder, the UI's libraries,
    stand-ins here: neither is a dependency); they are the ones the provider info declares for 3.2+."""
    import types

    from airflow_delta_provider.hooks.delta import DeltaSparkHook

    class StringField:
        def __init__(self, label, **kwargs):
            self.label, self.kwargs = label, kwargs

    fake = {
        "wtforms": types.SimpleNamespace(StringField=StringField),
        "wtforms.validators": types.SimpleNamespace(Optional=lambda: "optional"),
        "flask_appbuilder": types.SimpleNamespace(),
        "flask_appbuilder.fieldwidgets": types.SimpleNamespace(BS3TextFieldWidget=lambda: "text"),
    }
    for name, module in fake.items():
        monkeypatch.setitem(sys.modules, name, module)
    widgets = DeltaSparkHook.get_connection_form_widgets()
    declared = get_provider_info()["connection-types"][0]["conn-fields"]
    assert {name: w.label for name, w in widgets.items()} == {name: f["label"] for name, f in declared.items()}
    assert widgets["deploy-mode"].kwargs["default"] == "client"
    assert "cluster deploy mode" in widgets["delta_result_dir"].kwargs["description"]
