"""Protocol / table-feature gate: may this engine read or write a table?

Rules (PROTOCOL.md "Protocol Evolution", "Table Features"):

* Reading needs support for every feature in ``readerFeatures`` (reader version 3) or for what
  the legacy reader version implies (2 = columnMapping). Reader versions above 3 are refused.
  A reader feature that is listed but provably inactive may be ignored: ``columnMapping`` with
  ``delta.columnMapping.mode`` absent or ``none``.
* Writing needs support for every feature in ``writerFeatures`` (writer version 7) or for the
  features the legacy writer version implies (cumulative: 2 appendOnly+invariants, 3
  checkConstraints, 4 changeDataFeed+generatedColumns, 5 columnMapping, 6 identityColumns), and
  the table must be readable. Writer versions above 7 are refused. Features we do not enforce are
  accepted only while they are not *used*:

  ==================  =======================================================================
  appendOnly          always (the transaction refuses removes when ``delta.appendOnly=true``)
  invariants          no column (nested ones included) carries ``delta.invariants`` metadata
  checkConstraints    always (the writer checks every row: :mod:`.constraints`)
  changeDataFeed      always (DELETE, UPDATE and MERGE write change data files when
                      ``delta.enableChangeDataFeed`` is true)
  generatedColumns    always (the writer computes and checks them: :mod:`.constraints`)
  identityColumns     always (the writer assigns the values, the commit the high water mark:
                      :mod:`.identity`)
  columnMapping       always (the writer writes physical names and ids: :mod:`.column_mapping`)
  deletionVectors     always (DELETE marks rows in deletion vectors when ``delta.enableDeletionVectors``
                      is true; every rewrite applies a file's deletion vector)
  inCommitTimestamp   always (every commit carries a monotonic ``inCommitTimestamp`` when
                      ``delta.enableInCommitTimestamps`` is true: :mod:`.txn.transaction`)
  v2Checkpoint        always (checkpoints carry V2 content; UUID-named with sidecars when
                      ``delta.checkpointPolicy=v2``: :mod:`.log.checkpoint`)
  typeWidening        always (widened columns are read in the new type; ``change_column_type``)
  clustering          always (with ``domainMetadata``; the columns in the ``delta.clustering``
                      domain, OPTIMIZE clusters: :mod:`.clustering`)
  rowTracking         always (commits assign row ids and the high water mark; rewrites keep stable
                      ids in the materialized columns: :mod:`.row_tracking`)
  checkpointProtection always (log cleanup keeps the checkpoints before
                      ``delta.requireCheckpointProtectionBeforeVersion`` unless it truncates over
                      protocols it supports; a checkpoint is written only at a version whose
                      protocol passes this gate: :mod:`.log.cleanup`, :mod:`.log.checkpoint`)
  timestampNtz, domainMetadata, vacuumProtocolCheck: always (VACUUM and log cleanup run this gate
                      before they delete, VACUUM again at its ``VACUUM START`` version)
  allowColumnDefaults always (rows that leave a column out get its ``CURRENT_DEFAULT``:
                      :mod:`.defaults`); a schema with a default needs the feature
  collations,         always (collation metadata is kept; data skipping uses no binary min/max
  collations-preview  of a collated column: :mod:`.schema.collations`); a schema with a
                      non-binary collation needs one of them
  variantType,        always (variant columns are read and written in the Parquet Variant
  variantType-preview encoding, carried unchanged by DML, MERGE and OPTIMIZE, with a nullCount
                      and no min/max: :mod:`.variant`); a schema with a variant column needs one
  variantShredding,   always (shredded values are read back into the binary form; we write
  -preview            unshredded, which the protocol allows)
  ==================  =======================================================================

  Every other writer feature (icebergCompat*, catalogManaged, unknown or preview
  names such as ``liquid``) is refused with :class:`UnsupportedFeatureError` naming it.

* New tables: ``(1, 2)``; a ``timestamp_ntz`` column anywhere in the schema needs the
  ``timestampNtz`` reader-writer feature, i.e. ``(3, 7)`` with readerFeatures ``[timestampNtz]``
  and writerFeatures ``[timestampNtz, appendOnly, invariants]`` (a table-features protocol must
  list the legacy features its (1,2) equivalent implied). A ``variant`` column anywhere needs
  ``variantType`` the same way (as delta-spark 4 enables it). ``delta.feature.<name>=supported``
  properties add allowed features the same way.

``SUPPORTED_READER_FEATURES`` is the one set reader-side work extends (e.g. reader.py adds
``deletionVectors`` / ``columnMapping`` when it implements them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from .actions import Metadata, Protocol
from .config import (
    CONSTRAINT_PREFIX,
    FEATURE_PREFIX,
    TableProperties,
)
from .errors import UnsupportedFeatureError

#: reader features this engine implements. Extend (``.add``) when a reader capability lands.
SUPPORTED_READER_FEATURES: set[str] = {
    "v2Checkpoint",
    "timestampNtz",
    "vacuumProtocolCheck",
    "deletionVectors",
    "columnMapping",
    "typeWidening",
    "variantType",
    "variantType-preview",
    "variantShredding",
    "variantShredding-preview",
}

#: writer features that may appear in a table we write to (subject to the "not used" rules above)
ALLOWED_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "columnMapping",
        "timestampNtz",
        "domainMetadata",
        "vacuumProtocolCheck",
        "deletionVectors",
        "inCommitTimestamp",
        "v2Checkpoint",
        "typeWidening",
        "clustering",
        "rowTracking",
        "checkpointProtection",
        "allowColumnDefaults",
        "collations",
        "collations-preview",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
    }
)

#: the features that let a table hold variant columns (PROTOCOL.md "Variant Data Type")
VARIANT_FEATURES: tuple[str, ...] = ("variantType", "variantType-preview")

#: reader-writer features (must be listed in both lists)
READER_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
        "catalogManaged",
        "catalogOwned-preview",
    }
)

#: features implied by legacy writer versions (cumulative)
LEGACY_WRITER_FEATURES: dict[int, tuple[str, ...]] = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

_ALIASES = {"timestampNTZ": "timestampNtz", "columnInvariants": "invariants"}


def canonical_feature(name: str) -> str:
    """Canonical spelling of a feature name (old spec spellings like ``timestampNTZ`` mapped)."""
    return _ALIASES.get(name, name)


def legacy_writer_features(min_writer_version: int) -> list[str]:
    """Features a legacy writer version (< 7) implies."""
    out: list[str] = []
    for v in sorted(LEGACY_WRITER_FEATURES):
        if v <= min_writer_version:
            out += LEGACY_WRITER_FEATURES[v]
    return out


# ---------------------------------------------------------------------------------------------
# schema inspection


def _schema_dict(metadata: Metadata | dict | None) -> dict:
    if metadata is None:
        return {"type": "struct", "fields": []}
    if isinstance(metadata, dict):
        return metadata
    try:
        return json.loads(metadata.schema_string)
    except (ValueError, TypeError):
        return {"type": "struct", "fields": []}


def _model(schema_json: object):
    """The schema model of a schema JSON (an empty struct when it cannot be read: the snapshot
    reports a broken schema with its own error)."""
    from .errors import DeltaError
    from .schema import StructType

    try:
        return StructType.from_json(schema_json) if isinstance(schema_json, dict) else StructType(())
    except (DeltaError, KeyError, TypeError, ValueError):
        return StructType(())


def _iter_types(schema_json: object) -> Iterator[object]:
    """The JSON form of every type in a schema, nested ones included (through the one schema walker)."""
    from .schema.types import walk

    for _, t, _ in walk(_model(schema_json)):
        yield t.to_json()


def _iter_fields(schema_json: object) -> Iterator[dict]:
    """Every struct field (nested in structs, arrays, maps too), as its JSON."""
    from .schema.types import walk

    for _, _, f in walk(_model(schema_json)):
        if f is not None:
            yield f.to_json()


def schema_has_timestamp_ntz(schema_json: dict) -> bool:
    """True if a ``timestamp_ntz`` column exists anywhere (nested included)."""
    return any(t == "timestamp_ntz" for t in _iter_types(schema_json))


def variant_columns(schema_json: dict) -> list[str]:
    """The dotted paths of the ``variant`` types anywhere in a schema (nested ones included)."""
    from .schema.types import VARIANT, walk

    return [".".join(p) for p, t, _ in walk(_model(schema_json)) if t == VARIANT]


def _columns_with_metadata(schema_json: dict, key: str, *, prefix: bool = False) -> list[str]:
    out = []
    for f in _iter_fields(schema_json):
        md = f.get("metadata") or {}
        if (prefix and any(k.startswith(key) for k in md)) or (not prefix and key in md):
            out.append(str(f.get("name")))
    return out


def _usage(feature: str, metadata: Metadata | None) -> str | None:
    """Why ``feature`` is in use by this table (a reason string), or ``None`` when it is not."""
    schema = _schema_dict(metadata)
    if feature == "invariants":
        cols = _columns_with_metadata(schema, "delta.invariants")
        return f"column(s) {cols} carry delta.invariants" if cols else None
    return None


# ---------------------------------------------------------------------------------------------
# checks


def _features(values: Iterable[str] | None) -> list[str]:
    return [canonical_feature(str(f)) for f in (values or [])]


def unsupported_reader_features(protocol: Protocol, metadata: Metadata | None = None) -> list[str]:
    """Reader features of ``protocol`` this engine cannot honour (empty list = readable)."""
    rv = protocol.min_reader_version
    if rv <= 1:
        return []
    if rv == 2:
        if "columnMapping" in SUPPORTED_READER_FEATURES:
            return []
        if metadata is not None and TableProperties.of(metadata).column_mapping_mode == "none":
            return []
        return ["columnMapping"]
    out = []
    for f in _features(protocol.reader_features):
        if f in SUPPORTED_READER_FEATURES:
            continue
        if f == "columnMapping" and metadata is not None and TableProperties.of(metadata).column_mapping_mode == "none":
            continue
        out.append(f)
    return out


def check_read_supported(protocol: Protocol, metadata: Metadata | None = None) -> None:
    """Raise :class:`UnsupportedFeatureError` if this engine cannot read a table with ``protocol``.

    :param metadata: when given, a legacy reader version 2 / a listed ``columnMapping`` feature is
        accepted if column mapping is not actually used (``delta.columnMapping.mode`` none).
    """
    rv = protocol.min_reader_version
    if rv > MAX_READER_VERSION:
        raise UnsupportedFeatureError(
            f"Cannot read the table: it requires reader version {rv}",
            f"this engine implements reader versions up to {MAX_READER_VERSION}",
            "read the table with a newer Delta engine (e.g. Spark with a current delta-spark)",
        )
    bad = unsupported_reader_features(protocol, metadata)
    if bad:
        legacy = " (implied by legacy reader version 2)" if rv == 2 else ""
        raise UnsupportedFeatureError(
            f"Cannot read the table: reader feature '{bad[0]}'{legacy} is not supported",
            f"the table's protocol requires reader features {bad} and this engine supports "
            f"{sorted(SUPPORTED_READER_FEATURES)}",
            f"read the table with an engine that supports '{bad[0]}' (e.g. Spark with delta-spark), "
            "or remove the feature from the table there if the table allows it",
        )


def check_write_supported(protocol: Protocol, metadata: Metadata | None = None) -> None:
    """Raise :class:`UnsupportedFeatureError` if this engine must not write to the table.

    Checks readability first (a writer must understand the table), then every writer feature
    (explicit list for writer version 7, implied ones for legacy versions) against the rules in
    the module docstring.
    """
    check_read_supported(protocol, metadata)
    wv = protocol.min_writer_version
    if wv > MAX_WRITER_VERSION:
        raise UnsupportedFeatureError(
            f"Cannot write to the table: it requires writer version {wv}",
            f"this engine implements writer versions up to {MAX_WRITER_VERSION}",
            "write to the table with a newer Delta engine (e.g. Spark with a current delta-spark)",
        )
    if wv >= 7:
        features = _features(protocol.writer_features)
        legacy = ""
    else:
        features = legacy_writer_features(wv)
        legacy = f" (implied by legacy writer version {wv})"
    for f in features:
        if f not in ALLOWED_WRITER_FEATURES:
            raise UnsupportedFeatureError(
                f"Cannot write to the table: writer feature '{f}'{legacy} is not supported",
                f"this engine does not implement '{f}' and writing without honouring it would break the table"
                if f in _KNOWN_FEATURES
                else f"'{f}' is not a feature this engine knows (a preview or vendor-specific name)",
                f"write with an engine that supports '{f}' (e.g. Spark with delta-spark), or drop the "
                "feature from the table there (ALTER TABLE ... DROP FEATURE) if it is no longer needed",
            )
        why = _usage(f, metadata)
        if why is not None:
            raise UnsupportedFeatureError(
                f"Cannot write to the table: writer feature '{f}'{legacy} is in use and not enforced here",
                why,
                f"write with an engine that enforces '{f}' (e.g. Spark with delta-spark), or remove "
                f"its use from the table ({_REMOVE_HINT.get(f, 'see the Delta documentation')})",
            )
    _check_schema_features(features, metadata)


def _check_schema_features(features: list[str], metadata: Metadata | None) -> None:
    """A schema that uses column defaults or collations needs their feature in the protocol
    (PROTOCOL.md "Default Columns", the collations RFC): checked on every commit's protocol and metadata."""
    from .defaults import FEATURE
    from .schema.collations import COLLATION_FEATURES, collated_columns
    from .schema.types import DEFAULT_KEY

    if metadata is None:
        return
    schema = _schema_dict(metadata)
    with_default = _columns_with_metadata(schema, DEFAULT_KEY)
    if with_default and FEATURE not in features:
        raise UnsupportedFeatureError(
            f"Cannot write column DEFAULTs ({', '.join(with_default)}) to a table without the '{FEATURE}' feature",
            f"a column's {DEFAULT_KEY} needs the '{FEATURE}' writer feature in the table's protocol",
            f"set the table property delta.feature.{FEATURE}=supported (set_properties, or create the table "
            "with it), then write again",
        )
    collated = collated_columns(_model(schema))
    if collated and not any(f in features for f in COLLATION_FEATURES):
        raise UnsupportedFeatureError(
            f"Cannot write collated string columns ({', '.join(collated)}) to a table without the 'collations' feature",
            "a non-binary collation in a column's __COLLATIONS metadata needs the 'collations' (or "
            "'collations-preview') writer feature",
            "set the table property delta.feature.collations=supported, or remove the collation "
            "metadata from the columns",
        )
    variants = variant_columns(schema)
    if variants and not any(f in features for f in VARIANT_FEATURES):
        raise UnsupportedFeatureError(
            f"Cannot write variant columns ({', '.join(variants)}) to a table without the 'variantType' feature",
            "a variant column needs the 'variantType' reader-writer feature in the table's protocol",
            "set the table property delta.feature.variantType=supported (set_properties), then write again",
        )


def writes_deletion_vectors(protocol: Protocol, metadata: Metadata | None) -> bool:
    """Whether DML marks deleted rows in deletion vectors: the table enables them
    (``delta.enableDeletionVectors``) and its protocol has the ``deletionVectors`` feature."""
    return (
        metadata is not None
        and TableProperties.of(metadata).enable_deletion_vectors
        and "deletionVectors" in set(protocol.writer_features or ())
    )


def in_commit_timestamps_active(protocol: Protocol | None, metadata: Metadata | None) -> bool:
    """Whether commits carry ``inCommitTimestamp``: the protocol lists the ``inCommitTimestamp``
    writer feature and ``delta.enableInCommitTimestamps`` is true (PROTOCOL.md "In-Commit Timestamps")."""
    return (
        protocol is not None
        and metadata is not None
        and protocol.min_writer_version >= 7
        and "inCommitTimestamp" in _features(protocol.writer_features)
        and TableProperties.of(metadata).enable_in_commit_timestamps
    )


def writes_change_data(metadata: Metadata | None) -> bool:
    """Whether commands write the change data feed's files (``delta.enableChangeDataFeed=true``)."""
    return metadata is not None and TableProperties.of(metadata).enable_change_data_feed


# aliases matching docs/design.md
check_can_read = check_read_supported
check_can_write = check_write_supported

_KNOWN_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
        "deletionVectors",
        "rowTracking",
        "timestampNtz",
        "domainMetadata",
        "v2Checkpoint",
        "icebergCompatV1",
        "icebergCompatV2",
        "clustering",
        "typeWidening",
        "variantType",
        "variantShredding",
        "inCommitTimestamp",
        "vacuumProtocolCheck",
        "catalogManaged",
        "allowColumnDefaults",
        "collations",
        "collations-preview",
    }
)

_REMOVE_HINT = {
    "invariants": "drop the delta.invariants column metadata",
    "checkConstraints": "ALTER TABLE ... DROP CONSTRAINT",
    "changeDataFeed": "set delta.enableChangeDataFeed=false",
    "generatedColumns": "recreate the table without generated columns",
    "identityColumns": "recreate the table without identity columns",
    "columnMapping": "recreate the table with delta.columnMapping.mode=none",
}

_NEW_TABLE_REFUSED_PROPERTIES = {
    "delta.enableIcebergCompatV1": ("true", "icebergCompatV1"),
    "delta.enableIcebergCompatV2": ("true", "icebergCompatV2"),
}


def requested_features(configuration: dict | None) -> list[str]:
    """The table features these table properties ask for (``delta.feature.<name>=supported``,
    ``delta.enableDeletionVectors=true``, ``delta.enableChangeDataFeed=true``,
    ``delta.enableInCommitTimestamps=true``, ``delta.checkpointPolicy=v2``), in order.

    :raises UnsupportedFeatureError: a property asks for a feature this engine cannot write.
    """
    props = TableProperties.of(configuration)
    for key, (value, feature) in _NEW_TABLE_REFUSED_PROPERTIES.items():
        given = props.get(key)
        if given is not None and given.strip().lower() == value:
            raise UnsupportedFeatureError(
                f"Cannot set {key}={given}",
                f"that enables the '{feature}' feature, which this engine does not implement",
                f"remove the property, or use an engine that supports '{feature}'",
            )
    requested = ["checkConstraints"] if props.keys_with_prefix(CONSTRAINT_PREFIX) else []
    for k in props.keys_with_prefix(FEATURE_PREFIX):
        if str(props.get(k)).lower() in ("supported", "enabled"):
            f = canonical_feature(k[len(FEATURE_PREFIX) :])
            if f not in ALLOWED_WRITER_FEATURES:
                raise UnsupportedFeatureError(
                    f"Cannot add the feature '{f}'",
                    f"'{f}' is not a feature this engine can write",
                    f"remove the property {k}",
                )
            requested.append(f)
    if props.enable_deletion_vectors and "deletionVectors" not in requested:
        requested.append("deletionVectors")
    if props.enable_change_data_feed and "changeDataFeed" not in requested:
        requested.append("changeDataFeed")
    if props.column_mapping_mode != "none" and "columnMapping" not in requested:
        requested.append("columnMapping")
    if props.enable_in_commit_timestamps and "inCommitTimestamp" not in requested:
        requested.append("inCommitTimestamp")
    if props.enable_type_widening and "typeWidening" not in requested:
        requested.append("typeWidening")
    if props.checkpoint_policy == "v2" and "v2Checkpoint" not in requested:
        requested.append("v2Checkpoint")
    if props.enable_row_tracking and "rowTracking" not in requested:
        if props.row_tracking_suspended:
            raise UnsupportedFeatureError(
                "Cannot enable row tracking while it is suspended",
                "delta.enableRowTracking=true and delta.rowTrackingSuspended=true are both set",
                "set delta.rowTrackingSuspended=false (or remove it) to enable row tracking",
            )
        requested.append("rowTracking")
    if "rowTracking" in requested and "domainMetadata" not in requested:  # its high water mark is a domain
        requested.insert(requested.index("rowTracking"), "domainMetadata")
    if "clustering" in requested and "domainMetadata" not in requested:  # the protocol requires it
        requested.insert(requested.index("clustering"), "domainMetadata")
    for f in ("collations", "collations-preview"):  # the collations RFC requires domainMetadata
        if f in requested and "domainMetadata" not in requested:
            requested.insert(requested.index(f), "domainMetadata")
    return requested


def upgraded_protocol(protocol: Protocol, wanted: Iterable[str]) -> Protocol:
    """``protocol`` with the features ``wanted`` added (a table never downgrades): itself when it has
    them all; else a table-features protocol (writer 7; reader 3 when a reader-writer feature is
    needed) listing the features its legacy versions implied, then the new ones."""
    rv, wv = protocol.min_reader_version, protocol.min_writer_version
    writer = _features(protocol.writer_features) if wv >= 7 else legacy_writer_features(wv)
    reader = _features(protocol.reader_features) if rv >= 3 else (["columnMapping"] if rv == 2 else [])
    new = [f for f in dict.fromkeys(wanted) if f not in writer]
    if not new:
        return protocol
    writer = writer + new
    reader = reader + [f for f in new if f in READER_WRITER_FEATURES and f not in reader]
    if reader or rv >= 3:
        return Protocol(min_reader_version=3, min_writer_version=7, reader_features=reader, writer_features=writer)
    return Protocol(min_reader_version=rv, min_writer_version=7, writer_features=writer)


def protocol_for_new_table(schema_json: dict, configuration: dict | None = None) -> Protocol:
    """The minimal protocol for a new table with this schema and these properties.

    :raises UnsupportedFeatureError: the properties ask for a feature this engine cannot write.
    """
    asked = requested_features(configuration)
    requested = [f for f in asked if f != "deletionVectors"]
    schema = schema_json if isinstance(schema_json, dict) else json.loads(schema_json)
    if _columns_with_metadata(schema, "delta.generationExpression"):
        requested.append("generatedColumns")
    if _columns_with_metadata(schema, "delta.identity.", prefix=True):
        requested.append("identityColumns")
    for f in ("invariants",):
        why = _usage(f, Metadata(id="x", schema_string=json.dumps(schema)))
        if why:
            raise UnsupportedFeatureError(
                f"Cannot create the table: '{f}' is not supported for writing",
                why,
                "remove that column metadata, or create the table with Spark + delta-spark",
            )
    if "deletionVectors" in asked:
        requested.append("deletionVectors")
    if schema_has_timestamp_ntz(schema) and "timestampNtz" not in requested:
        requested.append("timestampNtz")
    if variant_columns(schema) and not any(f in requested for f in VARIANT_FEATURES):
        requested.append("variantType")
    _new_table_schema_features(schema, requested)
    # features a (1,2) table has anyway need no table-features protocol
    extra = [f for f in requested if f not in ("appendOnly", "invariants")]
    if not extra:
        return Protocol(min_reader_version=1, min_writer_version=2)
    writer = ["appendOnly", "invariants"]
    for f in requested:
        if f not in writer:
            writer.append(f)
    # list order: the added features first (Spark lists the triggering feature first)
    writer = [f for f in writer if f not in ("appendOnly", "invariants")] + ["appendOnly", "invariants"]
    reader = [f for f in writer if f in READER_WRITER_FEATURES]
    if reader:
        return Protocol(min_reader_version=3, min_writer_version=7, reader_features=reader, writer_features=writer)
    return Protocol(min_reader_version=1, min_writer_version=7, writer_features=writer)


def _new_table_schema_features(schema: dict, requested: list[str]) -> None:
    """The features a new table's schema needs, added to ``requested`` (in place). A DEFAULT needs
    ``allowColumnDefaults`` asked for explicitly, as delta-spark's CREATE TABLE does
    (WRONG_COLUMN_DEFAULTS_FOR_DELTA_FEATURE_NOT_ENABLED); a collated string gets ``collations``
    and the ``domainMetadata`` it requires, as delta kernel enables them from the schema."""
    from .defaults import FEATURE
    from .schema.collations import COLLATION_FEATURES, collated_columns
    from .schema.types import DEFAULT_KEY

    with_default = _columns_with_metadata(schema, DEFAULT_KEY)
    if with_default and FEATURE not in requested:
        raise UnsupportedFeatureError(
            f"Cannot create the table: column(s) {', '.join(with_default)} have a DEFAULT but the "
            f"'{FEATURE}' feature is not enabled",
            "Delta writes defaults only on tables that enable the feature explicitly (as delta-spark's "
            "CREATE TABLE requires)",
            f"add the table property delta.feature.{FEATURE}=supported to the CREATE",
        )
    if collated_columns(_model(schema)) and not any(f in requested for f in COLLATION_FEATURES):
        requested += [f for f in ("domainMetadata", "collations") if f not in requested]


def protocol_for_schema(protocol: Protocol, metadata: Metadata) -> Protocol:
    """``protocol``, upgraded with the features ``metadata``'s schema turns on by itself (a ``variant``
    column: ``variantType``, as delta-spark enables it when schema evolution adds one); ``protocol``
    itself when it has them."""
    if variant_columns(_schema_dict(metadata)) and not protocol_features(protocol) & set(VARIANT_FEATURES):
        return upgraded_protocol(protocol, ["variantType"])
    return protocol


def protocol_features(protocol: Protocol | None) -> set[str]:
    """Every feature ``protocol`` lists or implies (legacy versions included); empty for None."""
    if protocol is None:
        return set()
    rv, wv = protocol.min_reader_version, protocol.min_writer_version
    writer = _features(protocol.writer_features) if wv >= 7 else legacy_writer_features(wv)
    reader = _features(protocol.reader_features) if rv >= 3 else (["columnMapping"] if rv == 2 else [])
    return {*writer, *reader}


# ---------------------------------------------------------------------------------------------
# readers that are not ours

#: What other common readers cannot do with a table whose protocol lists a feature: per feature, per
#: reader, the refused operations (:data:`OUTSIDE_READER_OPERATIONS`). Measured with deltalake 1.6.6
#: and Polars 2.1.0 (``read_delta``/``scan_delta``), and DuckDB 1.5.5's ``delta_scan`` (it refuses
#: variant columns: "Unsupported Arrow type VARIANT"); delta-kernel-rs reads every feature we write
#: (tests/interop/test_reader_support.py keeps this true and prints the docs' readers table). Spark with
#: delta-spark 4.x reads them all.
OUTSIDE_READER_REFUSALS: dict[str, dict[str, tuple[str, ...]]] = {
    "typeWidening": {"deltalake": ("read", "query", "load_cdf", "append"), "Polars": ("read",)},
    "vacuumProtocolCheck": {"deltalake": ("read", "query", "load_cdf", "append"), "Polars": ("read",)},
    "v2Checkpoint": {"deltalake": ("read",), "Polars": ("read",)},
    "deletionVectors": {"deltalake": ("read",)},
    "columnMapping": {"deltalake": ("read", "load_cdf"), "Polars": ("read",)},
    "inCommitTimestamp": {"deltalake": ("append",)},
    "rowTracking": {"deltalake": ("append",)},
    "clustering": {"deltalake": ("append",)},
    "identityColumns": {"deltalake": ("append",)},
    "allowColumnDefaults": {"deltalake": ("append",)},
    "collations": {"deltalake": ("append",)},
    "variantType": {"DuckDB": ("read",)},
}

#: the versions :data:`OUTSIDE_READER_REFUSALS` was measured with (a warning names them: newer ones may read more)
OUTSIDE_READER_VERSIONS: dict[str, str] = {"deltalake": "1.6.6", "Polars": "2.1.0", "DuckDB": "1.5.5"}

#: the operations of :data:`OUTSIDE_READER_REFUSALS`, per reader, as a warning names them
OUTSIDE_READER_OPERATIONS: dict[str, dict[str, str]] = {
    "deltalake": {
        "read": "read it with to_pyarrow_table/to_pyarrow_dataset",
        "query": "query it with QueryBuilder",
        "load_cdf": "read its change feed with load_cdf",
        "append": "append to it with write_deltalake",
    },
    "Polars": {"read": "read it"},
    "DuckDB": {"read": "read it with delta_scan"},
}


def reader_warnings(before: Protocol | None, after: Protocol | None) -> list[dict]:
    """For each feature ``after`` adds to ``before`` (None: a new table) that a common reader refuses
    (:data:`OUTSIDE_READER_REFUSALS`): ``{"feature", "readers", "message"}``, the message naming each
    reader and what it cannot do."""
    added = protocol_features(after) - protocol_features(before)
    out = []
    for feature, refusals in OUTSIDE_READER_REFUSALS.items():
        if feature not in added:
            continue
        said = []
        for reader, operations in refusals.items():
            words = [OUTSIDE_READER_OPERATIONS[reader][o] for o in operations]
            listed = ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]
            said.append(f"{reader} {OUTSIDE_READER_VERSIONS[reader]} cannot {listed}")
        out.append(
            {
                "feature": feature,
                "readers": list(refusals),
                "message": f"feature '{feature}' turned on: {'; '.join(said)}",
            }
        )
    return out
