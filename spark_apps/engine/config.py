"""Table properties (``metaData.configuration``): Delta's names and defaults, and the one typed view of them.

Rules:

* :class:`TableProperties` is the only reader of ``metaData.configuration``: built from a
  :class:`~airflow_delta_provider_apps.engine.actions.Metadata` (or ``None``, or a plain configuration dict), it
  gives each property the engine acts on as a typed field. An absent property gives the reference
  implementation's default (``DeltaConfigs.scala``); a malformed one raises
  :class:`~airflow_delta_provider_apps.engine.errors.InvalidArgumentError` naming the property.
* Each field is parsed when first read and then cached, so a malformed property fails only the
  operation that uses it: a bad ``delta.targetFileSize`` must not make the table unreadable.
  :meth:`TableProperties.validate` parses them all (CREATE TABLE does, before anything is written).
* Property keys are matched case-insensitively and boolean values too (``"TRUE"``), as delta-spark does.
  A boolean set by CREATE TABLE or SET TBLPROPERTIES with anything around it (``"TRUE "``) is refused
  (:func:`parse_bool_property`), as delta-spark's ``toBoolean`` refuses it; one already in a log
  (another writer's) is read trimmed. :func:`check_stats_columns` checks
  ``delta.dataSkippingStatsColumns`` against the schema when it is set.
* Durations are Spark ``CalendarInterval`` strings: ``"interval 7 days"``, ``"30 days"``,
  ``"interval 1 week 2 hours"``. Months and years are refused (their length in ms is not fixed,
  Delta refuses them too), and so are negative durations (as Delta does) and ones longer than 100
  years (they overflowed the time arithmetic). :func:`parse_interval_ms` returns milliseconds.

Fields (property, default): ``checkpoint_interval`` (``delta.checkpointInterval``, 10),
``log_retention_ms`` (``delta.logRetentionDuration``, 30 days), ``enable_expired_log_cleanup``
(true), ``deleted_file_retention_ms`` (``delta.deletedFileRetentionDuration``, 1 week),
``set_transaction_retention_ms`` (unset = txns never expire), ``isolation_level`` (unset; the
commit then uses Serializable), ``append_only`` (false), ``write_stats_as_json`` (true),
``write_stats_as_struct`` (false here: the spec's default; delta-spark defaults to true - set it on
the table to get ``stats_parsed``/``partitionValues_parsed``), ``column_mapping_mode`` ("none"),
``target_file_size`` (unset), ``data_skipping_num_indexed_cols`` (32),
``data_skipping_stats_columns`` (unset), ``enable_in_commit_timestamps`` (false) with its
enablement version and timestamp (unset), ``enable_deletion_vectors`` (false),
``enable_change_data_feed`` (false), ``checkpoint_policy`` ("classic"); :attr:`TableProperties.raw`
holds every property as stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgumentError, InvalidSchemaError
from .values import MAX_DURATION_MS

if TYPE_CHECKING:
    from .isolation import IsolationLevel

MS_PER_SECOND = 1000
MS_PER_MINUTE = 60 * MS_PER_SECOND
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
MS_PER_WEEK = 7 * MS_PER_DAY

_UNITS_MS: dict[str, float] = {
    "week": MS_PER_WEEK,
    "weeks": MS_PER_WEEK,
    "w": MS_PER_WEEK,
    "day": MS_PER_DAY,
    "days": MS_PER_DAY,
    "d": MS_PER_DAY,
    "hour": MS_PER_HOUR,
    "hours": MS_PER_HOUR,
    "h": MS_PER_HOUR,
    "minute": MS_PER_MINUTE,
    "minutes": MS_PER_MINUTE,
    "min": MS_PER_MINUTE,
    "mins": MS_PER_MINUTE,
    "second": MS_PER_SECOND,
    "seconds": MS_PER_SECOND,
    "sec": MS_PER_SECOND,
    "secs": MS_PER_SECOND,
    "s": MS_PER_SECOND,
    "millisecond": 1,
    "milliseconds": 1,
    "ms": 1,
    "microsecond": 0.001,
    "microseconds": 0.001,
    "us": 0.001,
}
_PAIR = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-zA-Z]+)")

CHECKPOINT_INTERVAL = "delta.checkpointInterval"
LOG_RETENTION = "delta.logRetentionDuration"
ENABLE_EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
SET_TRANSACTION_RETENTION = "delta.setTransactionRetentionDuration"
ISOLATION_LEVEL = "delta.isolationLevel"
APPEND_ONLY = "delta.appendOnly"
WRITE_STATS_AS_JSON = "delta.checkpoint.writeStatsAsJson"
WRITE_STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
TARGET_FILE_SIZE = "delta.targetFileSize"
DATA_SKIPPING_NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
DATA_SKIPPING_STATS_COLUMNS = "delta.dataSkippingStatsColumns"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
ENABLE_DELETION_VECTORS = "delta.enableDeletionVectors"
ENABLE_CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
CHECKPOINT_POLICY = "delta.checkpointPolicy"
CONSTRAINT_PREFIX = "delta.constraints."
FEATURE_PREFIX = "delta.feature."

DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_LOG_RETENTION_MS = 30 * MS_PER_DAY
DEFAULT_DELETED_FILE_RETENTION_MS = MS_PER_WEEK
DEFAULT_NUM_INDEXED_COLS = 32  # delta.dataSkippingNumIndexedCols
COLUMN_MAPPING_MODES = ("none", "name", "id")
CHECKPOINT_POLICIES = ("classic", "v2")
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"  # column metadata, read only to infer the mode

# Every delta.* table property Delta defines (DeltaConfigs.scala), by the kind of value it takes;
# CREATE TABLE refuses other delta.* names and checks values of the kinds it knows.
BOOL_PROPERTIES = frozenset(
    {
        APPEND_ONLY,
        ENABLE_EXPIRED_LOG_CLEANUP,
        WRITE_STATS_AS_JSON,
        WRITE_STATS_AS_STRUCT,
        ENABLE_CHANGE_DATA_FEED,
        ENABLE_DELETION_VECTORS,
        ENABLE_IN_COMMIT_TIMESTAMPS,
        "delta.enableRowTracking",
        "delta.enableTypeWidening",
        "delta.randomizeFilePrefixes",
        "delta.autoOptimize.optimizeWrite",
        "delta.autoOptimize.autoCompact",
        "delta.compatibility.symlinkFormatManifest.enabled",
        "delta.enableIcebergCompatV1",
        "delta.enableIcebergCompatV2",
        "delta.tuneFileSizesForRewrites",
        "delta.rowTrackingSuspended",
        "delta.enableVariantShredding",
        "delta.checkpoint.partSize.enabled",
    }
)
INTERVAL_PROPERTIES = frozenset(
    {
        LOG_RETENTION,
        DELETED_FILE_RETENTION,
        SET_TRANSACTION_RETENTION,
        "delta.checkpointRetentionDuration",
        "delta.sampleRetentionDuration",
    }
)
POSITIVE_INT_PROPERTIES = frozenset({CHECKPOINT_INTERVAL, "delta.randomPrefixLength", "delta.checkpoint.partSize"})
INT_PROPERTIES = frozenset({DATA_SKIPPING_NUM_INDEXED_COLS, "delta.minReaderVersion", "delta.minWriterVersion"})
OTHER_PROPERTIES = frozenset(
    {
        ISOLATION_LEVEL,
        COLUMN_MAPPING_MODE,
        "delta.columnMapping.maxColumnId",
        DATA_SKIPPING_STATS_COLUMNS,
        CHECKPOINT_POLICY,
        TARGET_FILE_SIZE,
        "delta.universalFormat.enabledFormats",
        "delta.parquet.compression.codec",
        IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION,
        IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP,
        "delta.rowTracking.materializedRowIdColumnName",
        "delta.rowTracking.materializedRowCommitVersionColumnName",
        "delta.clusteringColumns",
    }
)
PREFIX_PROPERTIES = (CONSTRAINT_PREFIX, FEATURE_PREFIX)
# Properties the engine alone sets (delta-spark refuses them from users: maxColumnId is not
# user-configurable, the materialized row tracking column names are no user property and a commit
# keeps the table's own): property -> why another value breaks the table.
SYSTEM_PROPERTIES = {
    "delta.columnMapping.maxColumnId": "it is the highest column id the table gave out; another value would "
    "give a new column an id an existing column holds, or skip ids",
    "delta.rowTracking.materializedRowIdColumnName": "it names the hidden data file column that holds each "
    "row's stable row id; another name (or none) would change the stable row id of every rewritten row",
    "delta.rowTracking.materializedRowCommitVersionColumnName": "it names the hidden data file column that "
    "holds each row's commit version; another name (or none) would change the row commit version of every "
    "rewritten row",
}
KNOWN_DELTA_PROPERTIES = (
    BOOL_PROPERTIES | INTERVAL_PROPERTIES | POSITIVE_INT_PROPERTIES | INT_PROPERTIES | OTHER_PROPERTIES
)


def parse_interval_ms(text: str, *, name: str = "interval") -> int:
    """Milliseconds of a Spark interval string (``"interval 7 days"``, ``"1 week"``, ``"2 hours 30 minutes"``).

    :param text: the interval string
    :param name: the property name, for the error message
    :raises InvalidArgumentError: empty, unknown unit, months/years, trailing garbage, or a total
        that is negative or longer than 100 years (:data:`values.MAX_DURATION_MS`: a longer one
        overflowed the time arithmetic of the retentions)
    """
    s = str(text).strip().lower()
    if s.startswith("interval"):
        s = s[len("interval") :].strip()
    pairs = list(_PAIR.finditer(s))
    rest = _PAIR.sub("", s).strip()
    bad = None
    if not pairs or rest:
        bad = "it is not a list of '<number> <unit>' pairs"
    else:
        for m in pairs:
            unit = m.group(2)
            if unit in ("month", "months", "year", "years", "mon", "mons"):
                bad = f"months and years have no fixed length (found '{m.group(0)}')"
                break
            if unit not in _UNITS_MS:
                bad = f"unknown unit '{unit}'"
                break
    if bad:
        raise InvalidArgumentError(
            f"Cannot parse {name} value '{text}'",
            bad,
            "write it like 'interval 7 days' or 'interval 1 week 12 hours' (units: weeks, days, hours, "
            "minutes, seconds, milliseconds)",
        )
    total = sum(float(m.group(1)) * _UNITS_MS[m.group(2)] for m in pairs)
    if not 0 <= total <= MAX_DURATION_MS:  # also inf: a number of 309+ digits
        raise InvalidArgumentError(
            f"Cannot use {name} value '{text}'",
            "a duration cannot be negative"
            if total < 0
            else "it is longer than 100 years, the longest duration the engine accepts (a longer one "
            "overflows the time arithmetic of the retentions)",
            "write a duration from 0 up to 100 years, e.g. 'interval 30 days' or 'interval 3650 days'",
        )
    return int(total)


_SIZE_UNITS = {"b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3}
_SIZE_UNITS.update({"t": 1024**4, "tb": 1024**4})


def parse_size_bytes(text: Any) -> int | None:
    """Bytes of a size such as ``"134217728"``, ``"128mb"``, ``"1g"`` (Spark's byte strings), else ``None``."""
    s = str(text).strip().lower().replace(" ", "")
    for unit in sorted(_SIZE_UNITS, key=len, reverse=True):
        if s.endswith(unit) and s[: -len(unit)].replace(".", "", 1).isdigit():
            return int(float(s[: -len(unit)]) * _SIZE_UNITS[unit])
    return int(s) if s.isdigit() else None


def parse_stats_columns(value: str | Sequence[str] | Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """``"a, b.c, `x.y`.z"`` -> ``[("a",), ("b", "c"), ("x.y", "z")]`` (``delta.dataSkippingStatsColumns``).

    Spark multipart identifiers, read by sqlglot's Spark dialect through
    :func:`schema.parse_column_paths`, the one place that knows the quoting rules. A list may mix
    such strings and ready-made paths.

    :raises InvalidArgumentError: a name that does not parse
    """
    if not isinstance(value, str):
        out = []
        for v in value:
            out.extend(parse_stats_columns(v) if isinstance(v, str) else [tuple(v)])
        return out
    from .schema import parse_column_paths  # lazy: sqlglot is needed only when the property is set

    try:
        return parse_column_paths(value, f"{DATA_SKIPPING_STATS_COLUMNS} '{value}'")
    except InvalidSchemaError as e:  # a property value, not a schema: the caller's argument
        raise InvalidArgumentError(e.problem, e.cause, e.fix) from None


def parse_bool_property(key: str, value: Any) -> bool:
    """A boolean property's value as delta-spark reads it (Scala's ``toBoolean``): ``true`` or
    ``false`` in any case, nothing around them (``'TRUE '`` is refused, as Delta refuses it).

    :raises InvalidArgumentError: any other value, naming the property
    """
    s = str(value)
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    raise InvalidArgumentError(
        f"Table property {key}='{s}' is not a boolean",
        "a boolean property is 'true' or 'false' exactly (any case, no spaces or other words), as Delta reads it",
        f"set {key} to 'true' or 'false'",
    )


def check_stats_columns(configuration: Mapping[str, Any] | None, schema: Any) -> None:
    """``delta.dataSkippingStatsColumns`` names columns of ``schema`` (a ``StructType``; matched
    case-insensitively, nested fields through structs), as delta-spark checks when the property is
    set: a name that is not a column would silently collect no statistics.

    :raises InvalidArgumentError: naming the first missing column and the columns there are
    """
    paths = TableProperties.of(configuration).data_skipping_stats_columns
    for path in paths or ():
        if len(schema.field_path(path)) < len(path):
            name = ".".join(path)
            raise InvalidArgumentError(
                f"Table property {DATA_SKIPPING_STATS_COLUMNS} names column '{name}', which the table does not have",
                f"the table's columns are {', '.join(schema.names)}",
                f"list existing columns in {DATA_SKIPPING_STATS_COLUMNS} (comma-separated, e.g. 'id, name')",
            )


@dataclass(frozen=True)
class TableProperties:
    """The table's properties (``metaData.configuration``), typed; see the module docstring.

    Build with :meth:`of`. Fields are parsed on first access (then cached), so only the operation
    that needs a malformed property fails, with an :class:`InvalidArgumentError` naming it.

    :param raw: the configuration as stored in the log (keys as written)
    """

    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, source: Any) -> TableProperties:
        """Properties of a Metadata, a plain configuration mapping, ``None`` (no properties), or
        an existing :class:`TableProperties` (returned as is)."""
        if isinstance(source, TableProperties):
            return source
        if source is None:
            return cls({})
        if isinstance(source, Mapping):
            return cls(dict(source))
        return cls(dict(getattr(source, "configuration", None) or {}))

    # ------------------------------------------------------------------ raw access
    @cached_property
    def _by_lower_key(self) -> dict[str, Any]:
        return {str(k).lower(): v for k, v in self.raw.items()}

    def get(self, key: str) -> str | None:
        """The raw value of ``key`` (matched case-insensitively, as delta-spark does), or ``None``."""
        v = self.raw.get(key)
        if v is None:
            v = self._by_lower_key.get(key.lower())
        return None if v is None else str(v)

    def keys_with_prefix(self, prefix: str) -> list[str]:
        """Stored keys starting with ``prefix`` (case-insensitive), sorted: ``delta.constraints.*`` etc."""
        low = prefix.lower()
        return sorted(str(k) for k in self.raw if str(k).lower().startswith(low))

    def validate(self) -> TableProperties:
        """Parse every typed field now; raises the first malformed property's error."""
        for name in _TYPED_FIELDS:
            getattr(self, name)
        return self

    # ------------------------------------------------------------------ typed parsing helpers
    def _bool(self, key: str, default: bool) -> bool:
        v = self.get(key)
        if v is None:
            return default
        # a value in the log is read leniently (trimmed): another writer's table stays usable;
        # what we write is checked strictly (parse_bool_property)
        s = v.strip().lower()
        if s in ("true", "false"):
            return s == "true"
        return parse_bool_property(key, v)

    def _duration(self, key: str, default: int | None) -> int | None:
        v = self.get(key)
        return default if v is None else parse_interval_ms(v, name=key)

    def _long(self, key: str) -> int | None:
        v = self.get(key)
        if v is None:
            return None
        try:
            return int(v.strip())
        except ValueError:
            raise InvalidArgumentError(
                f"Table property {key}='{v}' is not an integer", None, f"set {key} to a whole number, or remove it"
            ) from None

    # ------------------------------------------------------------------ log and checkpoints
    @cached_property
    def checkpoint_interval(self) -> int:
        """``delta.checkpointInterval``: write a checkpoint every N commits (default 10)."""
        v = self.get(CHECKPOINT_INTERVAL)
        if v is None:
            return DEFAULT_CHECKPOINT_INTERVAL
        try:
            n = int(v)
        except ValueError:
            n = 0
        if n <= 0:
            raise InvalidArgumentError(
                f"Table property {CHECKPOINT_INTERVAL}='{v}' is not a positive integer",
                "it is the number of commits between checkpoints, so a whole number of 1 or more",
                f"set {CHECKPOINT_INTERVAL} to a positive integer such as 10",
            )
        return n

    @cached_property
    def checkpoint_policy(self) -> str:
        """``delta.checkpointPolicy``: "classic" (default) or "v2"."""
        v = self.get(CHECKPOINT_POLICY)
        if v is None:
            return "classic"
        s = v.strip().lower()
        if s not in CHECKPOINT_POLICIES:
            raise InvalidArgumentError(
                f"Table property {CHECKPOINT_POLICY}='{v}' is not a checkpoint policy",
                f"Delta defines only {' and '.join(repr(p) for p in CHECKPOINT_POLICIES)} "
                "(classic: one parquet checkpoint; v2: a checkpoint manifest with sidecar files)",
                f"set {CHECKPOINT_POLICY} to 'classic' or 'v2'",
            )
        return s

    @cached_property
    def write_stats_as_json(self) -> bool:
        """``delta.checkpoint.writeStatsAsJson`` (default true)."""
        return self._bool(WRITE_STATS_AS_JSON, True)

    @cached_property
    def write_stats_as_struct(self) -> bool:
        """``delta.checkpoint.writeStatsAsStruct`` (default false, the spec's default)."""
        return self._bool(WRITE_STATS_AS_STRUCT, False)

    @cached_property
    def log_retention_ms(self) -> int:
        """``delta.logRetentionDuration`` in ms (default 30 days)."""
        return self._duration(LOG_RETENTION, DEFAULT_LOG_RETENTION_MS)  # type: ignore[return-value]

    @cached_property
    def enable_expired_log_cleanup(self) -> bool:
        """``delta.enableExpiredLogCleanup`` (default true)."""
        return self._bool(ENABLE_EXPIRED_LOG_CLEANUP, True)

    @cached_property
    def deleted_file_retention_ms(self) -> int:
        """``delta.deletedFileRetentionDuration`` in ms (default 1 week): tombstone expiry."""
        return self._duration(DELETED_FILE_RETENTION, DEFAULT_DELETED_FILE_RETENTION_MS)  # type: ignore[return-value]

    @cached_property
    def set_transaction_retention_ms(self) -> int | None:
        """``delta.setTransactionRetentionDuration`` in ms, or ``None`` (txns never expire)."""
        return self._duration(SET_TRANSACTION_RETENTION, None)

    # ------------------------------------------------------------------ commits
    @cached_property
    def isolation_level(self) -> IsolationLevel | None:
        """``delta.isolationLevel`` (Serializable or WriteSerializable), or ``None`` when unset."""
        from .isolation import VALID_TABLE_LEVELS, IsolationLevel

        raw = self.get(ISOLATION_LEVEL)
        if raw is None or not raw.strip():
            return None
        try:
            level = IsolationLevel.parse(raw)
        except InvalidArgumentError:
            level = None
        if level not in VALID_TABLE_LEVELS:
            raise InvalidArgumentError(
                f"Table property {ISOLATION_LEVEL}='{raw}' is not allowed",
                "a table can only be configured as Serializable or WriteSerializable",
                f"set {ISOLATION_LEVEL} to Serializable or WriteSerializable",
            )
        return level

    @cached_property
    def append_only(self) -> bool:
        """``delta.appendOnly`` (default false)."""
        return self._bool(APPEND_ONLY, False)

    @cached_property
    def enable_type_widening(self) -> bool:
        """``delta.enableTypeWidening`` (default false)."""
        return self._bool("delta.enableTypeWidening", False)

    @cached_property
    def enable_row_tracking(self) -> bool:
        """``delta.enableRowTracking`` (default false)."""
        return self._bool("delta.enableRowTracking", False)

    @cached_property
    def row_tracking_suspended(self) -> bool:
        """``delta.rowTrackingSuspended`` (default false)."""
        return self._bool("delta.rowTrackingSuspended", False)

    @cached_property
    def enable_in_commit_timestamps(self) -> bool:
        """``delta.enableInCommitTimestamps`` (default false)."""
        return self._bool(ENABLE_IN_COMMIT_TIMESTAMPS, False)

    @cached_property
    def in_commit_timestamp_enablement_version(self) -> int | None:
        """``delta.inCommitTimestampEnablementVersion``: first version with in-commit timestamps (unset: all)."""
        return self._long(IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION)

    @cached_property
    def in_commit_timestamp_enablement_timestamp(self) -> int | None:
        """``delta.inCommitTimestampEnablementTimestamp`` in ms (unset when enabled at creation)."""
        return self._long(IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP)

    # ------------------------------------------------------------------ features
    @cached_property
    def enable_deletion_vectors(self) -> bool:
        """``delta.enableDeletionVectors`` (default false)."""
        return self._bool(ENABLE_DELETION_VECTORS, False)

    @cached_property
    def enable_change_data_feed(self) -> bool:
        """``delta.enableChangeDataFeed`` (default false)."""
        return self._bool(ENABLE_CHANGE_DATA_FEED, False)

    @cached_property
    def column_mapping_mode(self) -> str:
        """``delta.columnMapping.mode``: "none" (default), "name" or "id" (case-insensitive)."""
        v = self.get(COLUMN_MAPPING_MODE)
        if v is None:
            return "none"
        s = v.strip().lower()
        if s not in COLUMN_MAPPING_MODES:
            raise InvalidArgumentError(
                f"Table property {COLUMN_MAPPING_MODE}='{v}' is not a column mapping mode",
                f"Delta defines only {', '.join(repr(m) for m in COLUMN_MAPPING_MODES)} (how data files name columns)",
                f"set {COLUMN_MAPPING_MODE} to 'none', 'name' or 'id'",
            )
        return s

    def column_mapping_mode_for(self, schema: Any) -> str:
        """The mode data files are read with: :attr:`column_mapping_mode` when the property is set;
        else "name" when ``schema`` (a ``StructType``) carries physical names (Spark writes
        physical names in both name and id mode), else "none"."""
        if self.get(COLUMN_MAPPING_MODE) is not None:
            return self.column_mapping_mode
        for _, f in schema.leaf_fields():
            if PHYSICAL_NAME_KEY in f.metadata:
                return "name"
        for f in schema.fields:
            if PHYSICAL_NAME_KEY in f.metadata:
                return "name"
        return "none"

    # ------------------------------------------------------------------ writing data files
    @cached_property
    def target_file_size(self) -> int | None:
        """``delta.targetFileSize`` in bytes (``"134217728"``, ``"128mb"``), or ``None`` when unset."""
        v = self.get(TARGET_FILE_SIZE)
        if v is None:
            return None
        n = parse_size_bytes(v)
        if n is None or n <= 0:
            raise InvalidArgumentError(
                f"Table property {TARGET_FILE_SIZE}='{v}' is not a positive size in bytes",
                "it is the size writes and OPTIMIZE aim data files at: a number of bytes above 0, or one with a "
                "unit (kb, mb, gb)",
                f"set {TARGET_FILE_SIZE} to a number of bytes such as 134217728, or with a unit such as '128mb'",
            )
        return n

    @cached_property
    def data_skipping_num_indexed_cols(self) -> int:
        """``delta.dataSkippingNumIndexedCols``: stats for the first N leaf columns (-1 = all; default 32)."""
        n = self.get(DATA_SKIPPING_NUM_INDEXED_COLS)
        if n is None:
            return DEFAULT_NUM_INDEXED_COLS
        fix = "set it to -1 (all columns), 0 (no column stats) or a positive number"
        try:
            num = int(n.strip())
        except ValueError:
            raise InvalidArgumentError(
                f"Table property {DATA_SKIPPING_NUM_INDEXED_COLS}='{n}' is not an integer", None, fix
            ) from None
        if num < -1:
            raise InvalidArgumentError(
                f"Table property {DATA_SKIPPING_NUM_INDEXED_COLS}='{n}' is out of range", "it must be >= -1", fix
            )
        return num

    @cached_property
    def data_skipping_stats_columns(self) -> list[tuple[str, ...]] | None:
        """``delta.dataSkippingStatsColumns`` as column paths (wins over the count when set), or ``None``."""
        v = self.get(DATA_SKIPPING_STATS_COLUMNS)
        return None if v is None else parse_stats_columns(v)


# the fields :meth:`TableProperties.validate` parses
_TYPED_FIELDS = tuple(
    name
    for name, value in vars(TableProperties).items()
    if isinstance(value, cached_property) and not name.startswith("_")
)
