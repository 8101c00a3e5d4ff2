"""features.py: the read/write feature gate and the protocol of new tables."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider_apps.engine import features as F
from airflow_delta_provider_apps.engine.actions import Metadata, Protocol
from airflow_delta_provider_apps.engine.errors import UnsupportedFeatureError


def schema(*fields):
    return {"type": "struct", "fields": list(fields)}


def field(name, type_="long", **metadata):
    return {"name": name, "type": type_, "nullable": True, "metadata": metadata}


def meta(sch=None, conf=None):
    return Metadata(id="t", schema_string=json.dumps(sch or schema(field("id"))), configuration=conf or {})


def p37(reader=(), writer=()):
    return Protocol(3, 7, reader_features=list(reader), writer_features=list(writer))


# ------------------------------------------------------------------------------------ reading


@pytest.mark.parametrize(
    "proto",
    [
        Protocol(1, 1),
        Protocol(1, 2),
        Protocol(1, 7, writer_features=["liquid"]),
        p37(["v2Checkpoint"], ["v2Checkpoint"]),
        p37(["timestampNtz"], ["timestampNtz"]),
        p37(["timestampNTZ"]),
        p37(["vacuumProtocolCheck"]),
        p37(),
    ],
)
def test_readable(proto):
    F.check_read_supported(proto)


def test_unsupported_reader_feature_is_named():
    feature = "catalogManaged"
    with pytest.raises(UnsupportedFeatureError, match="reader feature 'catalogManaged'") as ei:
        F.check_read_supported(p37(["v2Checkpoint", feature], ["v2Checkpoint", feature]))
    assert "engine that supports 'catalogManaged'" in ei.value.fix
    with pytest.raises(UnsupportedFeatureError, match="'blahabl'"):
        F.check_read_supported(p37(["blahabl"]))


def test_reader_version_above_3():
    with pytest.raises(UnsupportedFeatureError, match="reader version 5"):
        F.check_read_supported(Protocol(5, 7))


def test_deletion_vectors_follow_the_supported_set(monkeypatch):
    proto = p37(["deletionVectors"], ["deletionVectors"])
    if "deletionVectors" not in F.SUPPORTED_READER_FEATURES:
        with pytest.raises(UnsupportedFeatureError, match="deletionVectors"):
            F.check_read_supported(proto)
    monkeypatch.setattr(F, "SUPPORTED_READER_FEATURES", F.SUPPORTED_READER_FEATURES | {"deletionVectors"})
    F.check_read_supported(proto)  # extending the one constant is all a reader capability needs


def test_legacy_column_mapping_reader_version_2(monkeypatch):
    monkeypatch.setattr(F, "SUPPORTED_READER_FEATURES", F.SUPPORTED_READER_FEATURES - {"columnMapping"})
    proto = Protocol(2, 5)
    F.check_read_supported(proto, meta(conf={"delta.columnMapping.mode": "none"}))  # upgraded but unused
    with pytest.raises(UnsupportedFeatureError, match="'columnMapping' \\(implied by legacy reader version 2\\)"):
        F.check_read_supported(proto, meta(conf={"delta.columnMapping.mode": "name"}))
    with pytest.raises(UnsupportedFeatureError, match="columnMapping"):
        F.check_read_supported(proto)  # no metadata: must assume it is used
    F.check_read_supported(p37(["columnMapping"], ["columnMapping"]), meta())  # listed, mode none
    monkeypatch.setattr(F, "SUPPORTED_READER_FEATURES", F.SUPPORTED_READER_FEATURES | {"columnMapping"})
    F.check_read_supported(proto, meta(conf={"delta.columnMapping.mode": "id"}))


# ------------------------------------------------------------------------------------ writing


@pytest.mark.parametrize(
    "proto",
    [
        Protocol(1, 2),
        Protocol(1, 3),
        Protocol(1, 4),
        Protocol(1, 6),
        Protocol(1, 7, writer_features=["appendOnly", "invariants", "domainMetadata"]),
        p37(["timestampNtz", "vacuumProtocolCheck"], ["timestampNtz", "vacuumProtocolCheck", "appendOnly"]),
        p37([], ["checkConstraints", "changeDataFeed", "generatedColumns", "identityColumns", "columnMapping"]),
        p37(["v2Checkpoint"], ["v2Checkpoint", "appendOnly", "invariants"]),
        Protocol(1, 7, writer_features=["appendOnly", "invariants", "domainMetadata", "clustering"]),
    ],
)
def test_writable_when_features_unused(proto):
    F.check_write_supported(proto, meta())


@pytest.mark.parametrize(
    "feature",
    [
        "liquid",
        "icebergCompatV2",
        "catalogManaged",
        "someFutureFeature",
    ],
)
def test_refused_writer_features(feature, monkeypatch):
    monkeypatch.setattr(F, "SUPPORTED_READER_FEATURES", F.SUPPORTED_READER_FEATURES | {feature})
    with pytest.raises(UnsupportedFeatureError, match=f"writer feature '{feature}'") as ei:
        F.check_write_supported(Protocol(1, 7, writer_features=["appendOnly", feature]), meta())
    assert ei.value.fix and feature in ei.value.fix


@pytest.mark.parametrize(
    "feature,sch,conf,why",
    [
        (
            "invariants",
            schema(field("x", "integer", **{"delta.invariants": '{"expression":{"expression":"x > 3"}}'})),
            {},
            "delta.invariants",
        ),
        (
            "invariants",
            schema(
                {
                    "name": "s",
                    "type": schema(field("inner", **{"delta.invariants": "{}"})),
                    "nullable": True,
                    "metadata": {},
                }
            ),
            {},
            "inner",
        ),
    ],
)
def test_allowed_features_refused_when_used(feature, sch, conf, why, monkeypatch):
    monkeypatch.setattr(F, "SUPPORTED_READER_FEATURES", F.SUPPORTED_READER_FEATURES | {"columnMapping"})
    proto = p37(["columnMapping"] if feature == "columnMapping" else [], [feature, "appendOnly"])
    with pytest.raises(UnsupportedFeatureError, match=f"'{feature}' is in use") as ei:
        F.check_write_supported(proto, meta(sch, conf))
    assert why in ei.value.cause


def test_legacy_writer_versions_imply_features():
    m = meta(schema(field("i", **{"delta.invariants": "{}"})))
    F.check_write_supported(Protocol(1, 1), m)  # invariants are not part of writer version 1
    with pytest.raises(UnsupportedFeatureError, match="implied by legacy writer version 2"):
        F.check_write_supported(Protocol(1, 2), m)
    F.check_write_supported(Protocol(1, 6), meta(schema(field("i", **{"delta.identity.step": 1}))))  # assigned
    F.check_write_supported(Protocol(1, 4), meta(conf={"delta.enableChangeDataFeed": "true"}))  # CDF is written
    F.check_write_supported(Protocol(1, 3), meta(conf={"delta.constraints.pos": "id > 0"}))  # checked
    assert F.legacy_writer_features(6) == [
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    ]
    assert F.legacy_writer_features(1) == []


def test_writer_version_above_7_and_unreadable():
    with pytest.raises(UnsupportedFeatureError, match="writer version 8"):
        F.check_write_supported(Protocol(1, 8), meta())
    with pytest.raises(UnsupportedFeatureError, match="Cannot read"):
        F.check_write_supported(p37(["catalogManaged"], ["catalogManaged"]), meta())


def test_append_only_is_writable_even_when_enabled():
    F.check_write_supported(Protocol(1, 2), meta(conf={"delta.appendOnly": "true"}))


# ------------------------------------------------------------------------------------ new tables


def test_new_table_default_protocol():
    assert F.protocol_for_new_table(schema(field("id"), field("s", "string"))) == Protocol(1, 2)
    assert F.protocol_for_new_table(schema(field("id")), {"delta.appendOnly": "true"}) == Protocol(1, 2)


@pytest.mark.parametrize(
    "sch",
    [
        schema(field("t", "timestamp_ntz")),
        schema(
            {
                "name": "a",
                "type": {"type": "array", "elementType": "timestamp_ntz", "containsNull": True},
                "nullable": True,
                "metadata": {},
            }
        ),
        schema(
            {
                "name": "m",
                "type": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": schema(field("t", "timestamp_ntz")),
                    "valueContainsNull": True,
                },
                "nullable": True,
                "metadata": {},
            }
        ),
    ],
)
def test_new_table_with_timestamp_ntz(sch):
    assert F.protocol_for_new_table(sch) == Protocol(
        3, 7, reader_features=["timestampNtz"], writer_features=["timestampNtz", "appendOnly", "invariants"]
    )


def test_new_table_feature_properties():
    p = F.protocol_for_new_table(schema(field("id")), {"delta.feature.domainMetadata": "supported"})
    assert p == Protocol(1, 7, writer_features=["domainMetadata", "appendOnly", "invariants"])
    p = F.protocol_for_new_table(schema(field("id")), {"delta.feature.vacuumProtocolCheck": "supported"})
    assert p.min_reader_version == 3 and p.reader_features == ["vacuumProtocolCheck"]
    assert F.protocol_for_new_table(schema(field("id")), {"delta.feature.appendOnly": "supported"}) == Protocol(1, 2)


@pytest.mark.parametrize(
    "conf,name",
    [
        ({"delta.feature.icebergCompatV2": "supported"}, "icebergCompatV2"),
    ],
)
def test_new_table_refuses_features_we_cannot_write(conf, name):
    with pytest.raises(UnsupportedFeatureError) as ei:
        F.protocol_for_new_table(schema(field("id")), conf)
    assert name in str(ei.value)


def test_a_new_table_with_deletion_vectors_has_the_reader_writer_feature():
    p = F.protocol_for_new_table(schema(field("id")), {"delta.enableDeletionVectors": "true"})
    assert p == Protocol(
        3, 7, reader_features=["deletionVectors"], writer_features=["deletionVectors", "appendOnly", "invariants"]
    )
    meta_dv = meta(conf={"delta.enableDeletionVectors": "true"})
    F.check_write_supported(p, meta_dv)
    assert F.writes_deletion_vectors(p, meta_dv)
    assert not F.writes_deletion_vectors(p, meta())  # the feature without the property: copy-on-write
    assert not F.writes_deletion_vectors(Protocol(1, 2), meta_dv)


def test_a_new_table_with_the_change_data_feed_has_the_writer_feature():
    p = F.protocol_for_new_table(schema(field("id")), {"delta.enableChangeDataFeed": "true"})
    assert p == Protocol(1, 7, writer_features=["changeDataFeed", "appendOnly", "invariants"])
    F.check_write_supported(p, meta(conf={"delta.enableChangeDataFeed": "true"}))
    assert F.upgraded_protocol(
        Protocol(1, 2), F.requested_features({"delta.enableChangeDataFeed": "true"})
    ) == Protocol(1, 7, writer_features=["appendOnly", "invariants", "changeDataFeed"])


def test_in_commit_timestamps_ask_for_the_writer_feature():
    on = {"delta.enableInCommitTimestamps": "true"}
    p = F.protocol_for_new_table(schema(field("id")), on)
    assert p == Protocol(1, 7, writer_features=["inCommitTimestamp", "appendOnly", "invariants"])
    F.check_write_supported(p, meta(conf=on))
    assert F.in_commit_timestamps_active(p, meta(conf=on))
    assert not F.in_commit_timestamps_active(p, meta())  # supported, not enabled
    assert not F.in_commit_timestamps_active(Protocol(1, 2), meta(conf=on))  # enabled, not supported
    assert F.upgraded_protocol(Protocol(1, 2), F.requested_features(on)) == Protocol(
        1, 7, writer_features=["appendOnly", "invariants", "inCommitTimestamp"]
    )


def test_new_tables_with_constraints_or_generated_columns_have_the_features():
    p = F.protocol_for_new_table(
        schema(field("g", **{"delta.generationExpression": "1"})), {"delta.constraints.c": "g > 0"}
    )
    assert p == Protocol(1, 7, writer_features=["checkConstraints", "generatedColumns", "appendOnly", "invariants"])
