"""SET TBLPROPERTIES, ADD CONSTRAINT and DROP CONSTRAINT: a table's properties changed in one commit,
its protocol upgraded to the features they ask for (after delta-spark's
AlterTableSetPropertiesDeltaCommand, AlterTableAddConstraintDeltaCommand and
AlterTableDropConstraintDeltaCommand).

The properties are checked as CREATE TABLE checks them (known ``delta.*`` keys, values that parse),
a feature this engine cannot write is refused, and the new configuration is the old one with these
keys set. When they ask for a feature the table lacks (``delta.enableDeletionVectors=true`` needs
``deletionVectors``; ``delta.feature.<name>=supported``), the protocol becomes a table-features one
listing what its legacy versions implied plus the new features (never a downgrade). Only the
metadata (and protocol) change: no data file is read or written, and a concurrent commit that
changes the metadata too conflicts, as in Delta.
"""

from __future__ import annotations

import dataclasses
import json

from ..commit_identity import TxnIdentity
from .base import Command
from .result import CommandResult

__all__ = [
    "set_properties",
    "add_constraint",
    "drop_constraint",
    "rename_column",
    "drop_column",
    "change_column_type",
    "set_column_default",
    "cluster_by",
]


def set_properties(snapshot, properties: dict, *, identity: TxnIdentity | None = None, **txn_options) -> CommandResult:
    """Set ``properties`` on the snapshot's table (see the module docstring); the result's
    ``properties`` field holds what was set, ``protocol`` the protocol after the commit.
    ``txn_options``: the transaction's own options (e.g. the ``clock`` of an in-commit timestamp)."""
    from .. import features, row_tracking
    from ..column_mapping import assign, mode_of
    from ..config import DATA_SKIPPING_STATS_COLUMNS, check_stats_columns
    from ..errors import InvalidArgumentError
    from .create_table import stored_configuration, validate_properties

    given = validate_properties(properties)
    configuration = {**(snapshot.metadata.configuration or {}), **given}
    if DATA_SKIPPING_STATS_COLUMNS in given:  # an unrelated change is not refused for an older value
        check_stats_columns(configuration, snapshot.schema)
    _keeps_clustering_stats(snapshot, configuration)
    before, after = mode_of(snapshot.metadata.configuration), mode_of(configuration)
    schema = snapshot.schema
    if before != after:
        if before != "none" or after != "name":
            raise InvalidArgumentError(
                f"Cannot change delta.columnMapping.mode from '{before}' to '{after}'",
                "a table's columns can start being mapped by name; ids or unmapping would need every file rewritten",
                "set delta.columnMapping.mode=name on a table without column mapping, or recreate the table",
            )
        # the files already use the names: they become the physical names
        schema, configuration = assign(schema, configuration, keep_names=True)
    configuration = row_tracking.with_column_names(configuration)
    protocol = features.upgraded_protocol(snapshot.protocol, features.requested_features(configuration))
    configuration = stored_configuration(configuration, protocol)
    params = {"properties": json.dumps(given)}
    cmd = Command(snapshot, "SET TBLPROPERTIES", params, identity=identity, txn_options=txn_options)
    fields = {"properties": given, "protocol": protocol.to_json()}
    if cmd.duplicate:
        return cmd.skipped(None, fields=fields)
    if configuration == (snapshot.metadata.configuration or {}) and protocol == snapshot.protocol:
        return cmd.unchanged(None, fields=fields)
    md = dataclasses.replace(snapshot.metadata, configuration=configuration)
    if schema is not snapshot.schema:
        md = dataclasses.replace(md, schema_string=schema.to_json_string())
    cmd.update_metadata(md)
    if protocol != snapshot.protocol:
        cmd.update_protocol(protocol)
    readds = row_tracking.backfill(snapshot, protocol, md)
    if readds:  # any concurrent add would land without row ids: it conflicts
        cmd.read_rows(None)
    return cmd.commit(readds, None, fields=fields)


def _keeps_clustering_stats(snapshot, configuration: dict) -> None:
    """New properties must keep statistics on the clustering columns (the protocol requires them)."""
    from ..clustering import check_stats_cover, clustering_columns, resolve_columns

    columns = clustering_columns(snapshot)
    if columns:
        resolved = resolve_columns(snapshot.schema, columns, configuration=snapshot.metadata.configuration)
        check_stats_cover(snapshot.schema, configuration, resolved)


def cluster_by(snapshot, columns, *, identity: TxnIdentity | None = None) -> CommandResult:
    """ALTER TABLE CLUSTER BY ``columns`` (``None`` or ``[]``: CLUSTER BY NONE): one commit of the
    ``delta.clustering`` domain (physical names), adding the ``clustering`` and ``domainMetadata``
    features to a table without them. Refused on a partitioned table. No file is read or written:
    the files clustered for other columns become unclustered for these, and the next OPTIMIZE
    clusters them. A concurrent commit to the domain conflicts."""
    from .. import features
    from ..clustering import clustering_columns, domain_action, resolve_columns

    resolved = resolve_columns(
        snapshot.schema,
        list(columns or []),
        partition_columns=snapshot.partition_columns,
        configuration=snapshot.metadata.configuration,
    )
    old = clustering_columns(snapshot)
    new = [c for c, _ in resolved]
    params = {"oldClusteringColumns": ",".join(old or []), "newClusteringColumns": ",".join(new)}
    cmd = Command(snapshot, "CLUSTER BY", params, identity=identity)
    fields = {"clustering_columns": new, "previous_clustering_columns": old or []}
    if cmd.duplicate:
        return cmd.skipped(None, fields=fields)
    if old is not None and old == new:
        return cmd.unchanged(None, fields=fields)
    protocol = features.upgraded_protocol(snapshot.protocol, ["domainMetadata", "clustering"])
    if protocol != snapshot.protocol:
        cmd.update_protocol(protocol)
    return cmd.commit([domain_action(resolved)], None, fields=fields)


def add_constraint(snapshot, name: str, expression: str, *, identity: TxnIdentity | None = None) -> CommandResult:
    """ADD CONSTRAINT ``name`` CHECK (``expression``): refused when the name is taken or when a row
    the table holds does not satisfy it (TRUE; FALSE and NULL both violate, as in Delta), read file by
    file with only the expression's columns; then one commit of the property
    ``delta.constraints.<name>`` and the ``checkConstraints`` feature. Every later write checks it
    (:mod:`..constraints`). The whole table is registered as read: a concurrent write conflicts."""
    from .. import features
    from ..constraints import check_constraint, constraints_of
    from ..errors import ConstraintViolationError, InvalidArgumentError

    key = check_constraint(name, expression, snapshot.schema)
    short = key.split(".")[-1]
    if short in constraints_of(snapshot.metadata.configuration):
        raise InvalidArgumentError(
            f"Constraint '{short}' already exists on table '{snapshot.table_root}'",
            f"it is {constraints_of(snapshot.metadata.configuration)[short]!r}",
            "drop it first (drop_constraint), or choose another name",
        )
    cmd = Command(snapshot, "ADD CONSTRAINT", {"name": short, "expr": expression}, identity=identity)
    fields = {"constraint": short, "expression": expression}
    if cmd.duplicate:
        return cmd.skipped(None, fields=fields)
    cmd.read_rows(None)
    bad, example = _violations(snapshot, expression)
    if bad:
        raise ConstraintViolationError(
            f"{bad} row(s) in table '{snapshot.table_root}' violate the new CHECK constraint ({expression})",
            f"e.g. {example} (Delta's DELTA_NEW_CHECK_CONSTRAINT_VIOLATION); nothing was committed",
            "fix or delete those rows first, or change the condition",
        )
    configuration = {**(snapshot.metadata.configuration or {}), key: expression}
    protocol = features.upgraded_protocol(snapshot.protocol, features.requested_features(configuration))
    cmd.update_metadata(dataclasses.replace(snapshot.metadata, configuration=configuration))
    if protocol != snapshot.protocol:
        cmd.update_protocol(protocol)
    return cmd.commit([], None, fields={**fields, "protocol": protocol.to_json()})


def drop_constraint(
    snapshot, name: str, *, if_exists: bool = False, identity: TxnIdentity | None = None
) -> CommandResult:
    """DROP CONSTRAINT [IF EXISTS] ``name``: one commit without the property (the protocol keeps its
    features; a table never downgrades). A missing name is an error unless ``if_exists``."""
    from ..config import CONSTRAINT_PREFIX
    from ..constraints import constraints_of
    from ..errors import InvalidArgumentError

    short = str(name or "").strip().lower()
    existing = constraints_of(snapshot.metadata.configuration)
    expression = existing.get(short)
    cmd = Command(snapshot, "DROP CONSTRAINT", {"name": short, "expr": expression}, identity=identity)
    fields = {"constraint": short, "expression": expression}
    if cmd.duplicate:
        return cmd.skipped(None, fields=fields)
    if expression is None:
        if if_exists:
            return cmd.unchanged(None, fields=fields)
        raise InvalidArgumentError(
            f"Table '{snapshot.table_root}' has no constraint '{short}'",
            f"its constraints are {sorted(existing) or 'none'}",
            "check the name, or pass if_exists=True",
        )
    configuration = {
        k: v for k, v in (snapshot.metadata.configuration or {}).items() if k.lower() != CONSTRAINT_PREFIX + short
    }
    cmd.update_metadata(dataclasses.replace(snapshot.metadata, configuration=configuration))
    return cmd.commit([], None, fields=fields)


def _violations(snapshot, expression: str) -> tuple[int, dict | None]:
    """Rows of the snapshot where ``expression`` is not TRUE, and the first one's values of the
    columns it names; read one bounded batch at a time, those columns only (every row group: a
    violation may be a NULL, which statistics cannot rule out)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..expr import parse_predicate, true_mask
    from ..reader import iter_data_file_batches

    expr = parse_predicate(expression, snapshot.schema)
    columns = list(dict.fromkeys(p[0] for p in expr.columns()))
    mode = snapshot.properties.column_mapping_mode_for(snapshot.schema)
    bad, example = 0, None
    wanted = [c for c in ("path", "partition_values", "deletion_vector") if c in snapshot.files.column_names]
    for f in snapshot.files.select(wanted).to_pylist():
        path, pv, dv = f["path"], dict(f.get("partition_values") or []), f.get("deletion_vector")
        for batch in iter_data_file_batches(
            snapshot.storage,
            snapshot.table_root,
            path,
            pv,
            snapshot.schema,
            snapshot.partition_columns,
            columns,
            dv,
            column_mapping_mode=mode,
        ):
            if not batch.num_rows:
                continue
            ok = true_mask(expr, batch)
            n = batch.num_rows - int(pc.sum(pc.cast(ok, pa.int64())).as_py() or 0)
            if n and example is None:
                example = batch.filter(pc.invert(ok)).slice(0, 1).to_pylist()[0]
            bad += n
    return bad, example


def rename_column(snapshot, column: str, new_name: str, *, identity: TxnIdentity | None = None) -> CommandResult:
    """RENAME COLUMN (a table with column mapping): the schema's display name changes, nothing else
    (the files keep the physical name); a partition column is renamed in the partition columns too."""
    from ..column_mapping import renamed

    schema, parts = renamed(snapshot.metadata, column, new_name)
    cmd = Command(snapshot, "RENAME COLUMN", {"oldColumnPath": column, "newColumnPath": new_name}, identity=identity)
    if cmd.duplicate:
        return cmd.skipped(None)
    md = dataclasses.replace(snapshot.metadata, schema_string=schema.to_json_string(), partition_columns=parts)
    cmd.update_metadata(md)
    return cmd.commit([], None, fields={"column": column, "new_name": new_name})


def drop_column(snapshot, column: str, *, identity: TxnIdentity | None = None) -> CommandResult:
    """DROP COLUMN (a table with column mapping): the column leaves the schema; its data stays in the
    files, never read again (VACUUM after a rewrite removes it)."""
    from ..clustering import clustering_columns
    from ..column_mapping import dropped
    from ..errors import InvalidArgumentError

    clustered = {c.lower() for c in clustering_columns(snapshot) or []}
    if str(column).lower() in clustered:
        raise InvalidArgumentError(
            f"Cannot drop column '{column}': the table is clustered by it",
            f"its clustering columns are {', '.join(clustering_columns(snapshot))}",
            "change the clustering columns first (cluster_by), then drop the column",
        )
    schema = dropped(snapshot.metadata, column)
    cmd = Command(snapshot, "DROP COLUMNS", {"columns": json.dumps([column])}, identity=identity)
    if cmd.duplicate:
        return cmd.skipped(None)
    cmd.update_metadata(dataclasses.replace(snapshot.metadata, schema_string=schema.to_json_string()))
    return cmd.commit([], None, fields={"column": column})


def _field_path(schema, column: str) -> list:
    """The fields from the top level down to ``column``: a top-level name, else a dotted path through
    structs (``a.b.c``). InvalidArgumentError naming the part that is missing and what is there."""
    from ..errors import InvalidArgumentError
    from ..schema.types import StructType

    top = schema.find(column)
    if top is not None:
        return [top]
    path, struct = [], schema
    for part in str(column).split("."):
        f = struct.find(part) if isinstance(struct, StructType) else None
        if f is None:
            if not path:
                cause = f"the table has no column '{part}'; its columns are {', '.join(schema.names)}"
            elif isinstance(struct, StructType):
                names = ", ".join(x.name for x in struct.fields)
                cause = f"the struct '{'.'.join(x.name for x in path)}' has no field '{part}'; its fields are {names}"
            else:
                cause = f"'{'.'.join(x.name for x in path)}' is {struct.simple_string()}, not a struct with fields"
            raise InvalidArgumentError(
                f"Cannot change the type of column '{column}': no such column",
                cause,
                "check the name; name a field nested in structs by its dotted path (address.zip)",
            )
        path.append(f)
        struct = f.type
    return path


def change_column_type(snapshot, column: str, new_type, *, identity: TxnIdentity | None = None) -> CommandResult:
    """ALTER COLUMN ``column`` TYPE ``new_type`` (type widening; a top-level column, or a field nested in
    structs named by its dotted path ``a.b``): metadata only.
    The schema gets the new type and a ``delta.typeChanges`` entry in the column's metadata, the
    table ``delta.enableTypeWidening=true`` and the ``typeWidening`` reader-writer feature; files
    keep the old type and are read in the new one. Partition columns are refused (the protocol
    allows changing them only where the partition value strings stay valid; we do not)."""
    from .. import features
    from ..errors import InvalidArgumentError
    from ..schema.ddl import parse_type
    from ..schema.types import DataType, StructType
    from ..schema.widening import TYPE_CHANGES_KEY, is_widening

    target = parse_type(new_type) if isinstance(new_type, str) else new_type
    if not isinstance(target, DataType):
        raise InvalidArgumentError(
            f"Cannot change the type of column '{column}' to {new_type!r}",
            "the new type is neither a type name nor a data type",
            "pass a type such as 'BIGINT', 'DOUBLE', 'DECIMAL(12,2)' or 'TIMESTAMP_NTZ'",
        )
    schema = snapshot.schema
    path = _field_path(schema, column)
    fld = path[-1]
    if len(path) == 1 and fld.name.lower() in {p.lower() for p in snapshot.partition_columns}:
        raise InvalidArgumentError(
            f"Cannot change the type of partition column '{fld.name}'",
            "this engine does not widen partition columns (their values live in the log as strings)",
            "recreate the table with the wider partition column type",
        )
    already = fld.type == target  # a rerun of the same change: nothing to do, as delta-spark
    if not already and not is_widening(fld.type, target):
        raise InvalidArgumentError(
            f"Cannot change column '{fld.name}' from {fld.type.to_json()} to {target.to_json()}",
            "only the protocol's type widenings are allowed (byte->short->int->long, float->double, "
            "byte/short/int->double, date->timestamp_ntz, wider decimals, integers to wide enough decimals)",
            "pick a wider type, or rewrite the table (overwrite with overwrite_schema) for other changes",
        )
    changes = [*fld.metadata.get(TYPE_CHANGES_KEY, []), {"fromType": fld.type.to_json(), "toType": target.to_json()}]
    new = dataclasses.replace(fld, type=target, metadata={**fld.metadata, TYPE_CHANGES_KEY: changes})
    for parent in reversed(path[:-1]):  # each enclosing struct takes its changed field
        members = tuple(new if f is path[path.index(parent) + 1] else f for f in parent.type.fields)
        new = dataclasses.replace(parent, type=StructType(members))
    schema = StructType(tuple(new if f is path[0] else f for f in schema.fields))
    name = ".".join(f.name for f in path)
    configuration = {**(snapshot.metadata.configuration or {}), "delta.enableTypeWidening": "true"}
    protocol = features.upgraded_protocol(snapshot.protocol, ["typeWidening"])
    cmd = Command(
        snapshot,
        "CHANGE COLUMN",
        {"columnName": name, "newType": target.to_json()},
        identity=identity,
    )
    fields = {"column": name, "from_type": fld.type.to_json(), "to_type": target.to_json()}
    if cmd.duplicate:
        return cmd.skipped(None, fields=fields)
    if already:
        return cmd.unchanged(None, fields=fields)
    md = dataclasses.replace(snapshot.metadata, schema_string=schema.to_json_string(), configuration=configuration)
    cmd.update_metadata(md)
    if protocol != snapshot.protocol:
        cmd.update_protocol(protocol)
    return cmd.commit([], None, fields=fields)


def set_column_default(
    snapshot, column: str, default: str | None, *, identity: TxnIdentity | None = None
) -> CommandResult:
    """ALTER COLUMN ``column`` SET DEFAULT ``default`` (``None``: DROP DEFAULT), metadata only: rows
    written from now on that leave the column out get the default's value; rows already written keep
    theirs. The way a column added by an evolving write gets a default (PROTOCOL.md "Default Columns":
    never in the command that adds it). Checked before the commit: a top-level column that is not an
    identity or generated one, a constant of its type (:func:`..defaults.check_defaults`), and the
    table's ``allowColumnDefaults`` feature, which delta-spark also asks to be enabled first."""
    from .. import features
    from ..defaults import FEATURE, check_defaults
    from ..errors import InvalidArgumentError, UnsupportedFeatureError
    from ..schema.compat import computed
    from ..schema.types import DEFAULT_KEY, StructType

    fld = snapshot.schema.find(str(column))
    if fld is None:
        raise InvalidArgumentError(
            f"Cannot set the default of column '{column}': no such column",
            f"the table's columns are {', '.join(snapshot.schema.names)}",
            "check the name (a default belongs to a top-level column)",
        )
    if default is not None and computed(fld):
        raise InvalidArgumentError(
            f"Cannot set a default on column '{fld.name}': it is an identity or generated column",
            "the writer assigns or computes its values",
            "set defaults on other columns only",
        )
    if default is not None and FEATURE not in features.protocol_features(snapshot.protocol):
        raise UnsupportedFeatureError(
            f"Cannot set the default of column '{fld.name}': the table does not enable '{FEATURE}'",
            "Delta writes defaults only on tables that enable the feature explicitly (as delta-spark asks)",
            f"set the table property delta.feature.{FEATURE}=supported first (set_properties)",
        )
    metadata = {k: v for k, v in fld.metadata.items() if k != DEFAULT_KEY}
    if default is not None:
        metadata[DEFAULT_KEY] = str(default)
    new = dataclasses.replace(fld, metadata=metadata)
    schema = StructType(tuple(new if f is fld else f for f in snapshot.schema.fields))
    check_defaults(StructType((new,)))  # refused before anything is committed
    fields = {"column": fld.name, "default": default}
    cmd = Command(snapshot, "CHANGE COLUMN", {"column": json.dumps(new.to_json())}, identity=identity)
    if cmd.duplicate:
        return cmd.skipped(None, fields=fields)
    if new.metadata == fld.metadata:
        return cmd.unchanged(None, fields=fields)
    cmd.update_metadata(dataclasses.replace(snapshot.metadata, schema_string=schema.to_json_string()))
    return cmd.commit([], None, fields=fields)
