"""The variant decoder, encoder and shredding reassembly (engine/variant.py), in process.

Independent checks: pyspark's pure-Python ``VariantUtils`` (Spark's own ``parse_json`` encoder and
``to_json``, no JVM) encodes JSON our decoder reads, and decodes what our encoder writes; plain
``json`` is the model of every value.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine import variant as V
from airflow_delta_provider_apps.engine.errors import InvalidArgumentError

VariantUtils = pytest.importorskip("pyspark.sql.variant_utils").VariantUtils

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=25,
)


def _norm(v):
    """Numbers as floats (a JSON 1.5 is a decimal in a variant, 1e-05 a double), containers recursively."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (float, decimal.Decimal)):
        return float(v)
    if isinstance(v, int):
        return v
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return [_norm(x) for x in v]


@settings(max_examples=150, deadline=None)
@given(_json_values)
def test_spark_encoded_json_decodes_to_the_same_value(doc):
    """Spark's parse_json (pyspark's VariantUtils) -> our decode and to_json give the JSON's value."""
    text = json.dumps(doc)
    value, metadata = VariantUtils.parse_json(text)
    assert _norm(V.decode(value, metadata)) == _norm(json.loads(text))
    assert _norm(json.loads(V.to_json(value, metadata))) == _norm(json.loads(text))
    assert json.loads(V.to_json(value, metadata)) == json.loads(VariantUtils.to_json(value, metadata))


@settings(max_examples=150, deadline=None)
@given(_json_values)
def test_our_encoding_decodes_in_spark_and_back(doc):
    """Our encoder -> pyspark's decoder (to_python) and ours give the value back."""
    value, metadata = V.encode(doc)
    assert _norm(VariantUtils.to_python(value, metadata)) == _norm(doc)
    assert _norm(V.decode(value, metadata)) == _norm(doc)


def test_scalars_of_every_type_round_trip_and_print_as_spark():
    cases = [
        (None, "null"),
        (True, "true"),
        (-5, "-5"),
        (70000, "70000"),
        (2**40, "1099511627776"),
        (1e20, "1.0E20"),
        (0.25, "0.25"),
        (decimal.Decimal("-12.340"), "-12.340"),
        (decimal.Decimal("12345678901234567890.5"), "12345678901234567890.5"),
        ("x" * 70, json.dumps("x" * 70)),
        ('é\n"', json.dumps('é\n"', ensure_ascii=False)),
        (b"\x00\x01", '"AAE="'),
        (dt.date(2026, 1, 2), '"2026-01-02"'),
        (dt.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=dt.UTC), '"2026-01-02 03:04:05.6+00:00"'),
        (dt.datetime(2026, 1, 2, 3, 4, 5), '"2026-01-02 03:04:05"'),
    ]
    for v, text in cases:
        value, metadata = V.encode(v)
        assert V.decode(value, metadata) == v
        assert V.to_json(value, metadata) == text
        if not isinstance(v, (bytes, dt.date)):  # pyspark's Python to_json: ASCII escapes, Python's floats
            assert json.loads(VariantUtils.to_json(value, metadata)) == json.loads(text)


def test_java_double_text():
    assert [V.java_double(x) for x in (1.0, 1e7, 1.5e-5, 0.001, 1234567.5, -0.0, 123456789.0)] == [
        "1.0",
        "1.0E7",
        "1.5E-5",
        "0.001",
        "1234567.5",
        "-0.0",
        "1.23456789E8",
    ]
    assert V.java_double(math.inf) == '"Infinity"'


def test_paths_and_lookup():
    value, metadata = VariantUtils.parse_json('{"a": {"b": [10, {"c d": "x"}]}, "z": null}')
    assert V.parse_path("$.a.b[1]['c d']") == ("a", "b", 1, "c d")
    assert V.parse_path('$["a.b"][0]') == ("a.b", 0)
    assert V.parse_path("$") == ()
    for path, want in [
        ("$.a.b[0]", 10),
        ("$.a.b[1]['c d']", "x"),
        ("$.a.b", [10, {"c d": "x"}]),
        ("$", {"a": {"b": [10, {"c d": "x"}]}, "z": None}),
    ]:
        assert V.decode(V.lookup(value, metadata, V.parse_path(path)), metadata) == want
    for missing in ("$.nope", "$.a.b[2]", "$.a.b.c", "$.a[0]"):
        assert V.lookup(value, metadata, V.parse_path(missing)) is None
    assert V.is_null(V.lookup(value, metadata, ("z",)))
    for bad in ("a.b", "$.", "$[x]", "$a", ""):
        with pytest.raises(InvalidArgumentError, match="Invalid variant path") as e:
            V.parse_path(bad)
        assert e.value.fix
    assert V.path_text(("a", "b c", 0, "it's")) == "$.a['b c'][0]['it\\'s']"
    assert V.parse_path(V.path_text(("a", "b c", 0, "it's"))) == ("a", "b c", 0, "it's")


def test_malformed_values_are_refused_by_name():
    with pytest.raises(V.VariantError, match="metadata has version 3"):
        V.decode(b"\x0c\x01", b"\x03\x00\x00")
    with pytest.raises(V.VariantError, match="ends at byte"):
        V.decode(b"\x18\x01", b"\x01\x00\x00")  # an int32 with one byte of payload


def test_natural_types_are_sparks():
    def nat(text):
        return V.natural(*VariantUtils.parse_json(text))

    assert nat("1") == (1, "long")
    assert nat("1.50") == (decimal.Decimal("1.50"), "decimal(3,2)")
    assert nat("1e3") == (1000.0, "double")
    assert nat('"a"') == ("a", "string")
    assert nat("null") == (None, "void")
    assert nat('{"b": 1, "a": [true]}') == ('{"a":[true],"b":1}', "object")


def test_a_shredded_column_is_put_back_together():
    """typed_value columns (an object with a shredded int and string, and an array) beside residual values,
    reassembled into the unshredded binary: the rows read as the JSON they were made from."""
    docs = ['{"a": 1, "b": "x", "rest": [1]}', '{"a": "not an int"}', '"just a string"', None, '{"b": "y"}']
    metadata = [VariantUtils.parse_json(d)[1] if d else None for d in docs]
    field = pa.struct([("value", pa.binary()), ("typed_value", pa.int32())])
    sfield = pa.struct([("value", pa.binary()), ("typed_value", pa.string())])
    typed = pa.struct([pa.field("a", field, nullable=False), pa.field("b", sfield, nullable=False)])

    rows = [
        {
            "metadata": metadata[0],
            "value": _object_with(metadata[0], {"rest": [1]}),
            "typed_value": {"a": {"value": None, "typed_value": 1}, "b": {"value": None, "typed_value": "x"}},
        },
        {
            "metadata": metadata[1],
            "value": None,
            "typed_value": {
                "a": {"value": V.encode("not an int")[0], "typed_value": None},
                "b": {"value": None, "typed_value": None},
            },
        },
        {"metadata": metadata[2], "value": V.encode("just a string")[0], "typed_value": None},
        None,
        {
            "metadata": metadata[4],
            "value": None,
            "typed_value": {"a": {"value": None, "typed_value": None}, "b": {"value": None, "typed_value": "y"}},
        },
    ]
    arr = pa.array(rows, pa.struct([("metadata", pa.binary()), ("value", pa.binary()), ("typed_value", typed)]))
    out = V.unshred(arr).to_pylist()
    assert out[3] is None
    got = [json.loads(V.to_json(r["value"], r["metadata"])) for r in out if r is not None]
    assert got == [json.loads(d) for d in docs if d is not None]
    lists = pa.array(
        [
            {
                "metadata": b"\x01\x00\x00",
                "value": None,
                "typed_value": [{"value": None, "typed_value": 5}, {"value": V.encode("s")[0], "typed_value": None}],
            }
        ],
        pa.struct([("metadata", pa.binary()), ("value", pa.binary()), ("typed_value", pa.list_(field))]),
    )
    r = V.unshred(lists).to_pylist()[0]
    assert V.decode(r["value"], r["metadata"]) == [5, "s"]


def _object_with(metadata: bytes, fields: dict) -> bytes:
    """An object of ``fields`` whose keys are ids into ``metadata`` (a shredded object's residual)."""
    names = V.keys(metadata)
    return V.encode_object([(names.index(k), V.encode(v)[0]) for k, v in fields.items()], names)
