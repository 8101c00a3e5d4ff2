"""Reading parquet and JSON checkpoints (classic, multi-part, V2 with sidecars) into the collected state.

Parquet checkpoints are read with ``pyarrow.parquet``, only the ``add``/``remove`` sub-columns kept,
plus ``add.stats_parsed`` when present (typed stats: replay keeps them as the files' ``stats_parsed``
column for data skipping; when the checkpoint has no JSON ``stats`` the strings are also rebuilt
from it, a slow path), never ``partitionValues_parsed``; non-file actions (a handful of rows) become
dataclasses. A checkpoint alone is already reconciled: no dedup. Checkpoint columns
are never filtered when read: a chunk keeps a mask of its file-action rows, applied last. Sidecar
paths resolve through :func:`airflow_delta_provider_apps.engine.paths.resolve_log_path` (never outside the table).
"""

import pyarrow as pa
import pyarrow.parquet as pq

from ..actions import (
    action_from_json,
)
from ..errors import LogCorruptedError, StorageError
from ..storage import Storage
from .collect import Collected, add_struct_rows, strip_nones
from .commit_read import collect_json
from .file_actions import FILE_SCHEMA, NON_FILE_COLUMNS, REMOVE_SCHEMA, WIRE
from .listing import SIDECAR_DIR_NAME, Checkpoint


class CheckpointReadError(LogCorruptedError):
    """A checkpoint (or one of its parts/sidecars) is missing or unreadable.

    The snapshot loader reacts by falling back to an older checkpoint (or to the JSON commits)
    when the log still allows it.
    """


def _unreadable(path: str, e: Exception) -> CheckpointReadError:
    """The error for a checkpoint file (or sidecar) pyarrow cannot read as parquet."""
    return CheckpointReadError(
        f"Checkpoint file '{path}' is not readable parquet",
        str(e),
        "delete the broken checkpoint (and fix _last_checkpoint); the JSON commits rebuild the state",
    )


def _read_parquet(storage: Storage, path: str, *, only_files: bool = False, no_files: bool = False) -> pa.Table:
    """Read the action columns we need from one checkpoint/sidecar parquet file."""
    try:
        fh = storage.open_input_file(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise StorageError(f"Cannot open '{path}'", str(e), "check the storage and retry") from None
    with fh:
        try:
            pf = pq.ParquetFile(fh)
            schema = pf.schema_arrow
        except (pa.ArrowInvalid, OSError) as e:
            raise _unreadable(path, e) from None
        empty = empty_columns(pf.metadata)
        cols: list[str] = []
        for kind, fschema in () if no_files else (("add", FILE_SCHEMA), ("remove", REMOVE_SCHEMA)):
            idx = schema.get_field_index(kind)
            if idx < 0 or f"{kind}.path" in empty:  # no row has a path: no file action to read
                continue
            t = schema.field(idx).type
            if not pa.types.is_struct(t):
                continue
            present = {f.name for f in t} - {n.split(".", 1)[1] for n in empty if n.startswith(f"{kind}.")}
            cols += [f"{kind}.{WIRE[n]}" for n in fschema.names if WIRE[n] in present]
            if kind == "add" and "stats_parsed" in present:
                cols.append("add.stats_parsed")  # typed stats for skipping (kept beside the JSON)
        if not only_files:
            cols += [c for c in NON_FILE_COLUMNS if schema.get_field_index(c) >= 0 and c not in empty]
        if not cols:
            return pa.table({})
        try:
            return pf.read(columns=cols, use_threads=True)
        except (pa.ArrowInvalid, OSError) as e:
            raise _unreadable(path, e) from None


def empty_columns(md: pq.FileMetaData) -> set[str]:
    """The columns (``txn``) and their fields (``remove.path``, ``add.deletionVector``) that hold no
    value in any row group, by the file's own statistics: a checkpoint keeps one column per action
    type, null in the rows of every other type, and a field no action sets (deletion vectors, row
    ids) is null throughout. Reading them would only allocate nulls (over a quarter of a 100k-file
    checkpoint's Arrow memory). A leaf in a map or list never counts as empty (its statistics do not
    tell an empty map from a null one), nor does a column chunk without a null count."""
    repeated = {i for i in range(md.num_columns) if md.schema.column(i).max_repetition_level > 0}
    leaves: set[str] = set()
    valued: set[str] = set()
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        for i in range(group.num_columns):
            chunk = group.column(i)
            parts = chunk.path_in_schema.split(".")
            names = {parts[0], ".".join(parts[:2])}
            leaves |= names
            st = chunk.statistics
            if i in repeated or st is None or not st.has_null_count or st.null_count != chunk.num_values:
                valued |= names
    return leaves - valued


def _collect_parquet_table(t: pa.Table, version: int, coll: Collected, *, files_only: bool = False) -> list[dict]:
    """Add the file rows of a checkpoint table to ``coll``; return its non-file actions as dicts."""
    n = t.num_rows
    base = coll.next_order
    for kind in ("add", "remove"):
        if kind in t.column_names:
            add_struct_rows(t.column(kind), kind, coll, False, None, in_checkpoint=True)
    coll.next_order = base + n
    out: list[dict] = []
    if files_only:
        return out
    for c in NON_FILE_COLUMNS:
        if c not in t.column_names:
            continue
        col = t.column(c)
        if pa.types.is_null(col.type):
            continue
        rows = col.filter(col.is_valid())
        for r in rows.to_pylist(maps_as_pydicts="lossy"):
            out.append({c: strip_nones(r)})
    return out


def _sidecar_path(storage: Storage, log_dir: str, path: str) -> str:
    from ..paths import resolve_log_path

    table_root = log_dir.rstrip("/").rsplit("/", 1)[0]
    return resolve_log_path(table_root, path, kind="sidecar", base=storage.join(log_dir, SIDECAR_DIR_NAME))


def read_checkpoint(
    storage: Storage, log_dir: str, cp: Checkpoint, coll: Collected, *, include_files: bool = True
) -> None:
    """Collect every action of ``cp`` (all parts, sidecars) into ``coll`` (before any commit)."""
    non_file: list[dict] = []
    name = cp.files[0].name
    try:
        if cp.format == "json":
            data = storage.read_bytes(cp.files[0].path)
            collect_json([(cp.version, data)], coll, where=name, in_checkpoint=True, include_files=include_files)
            # the non-file actions were parsed into coll.actions; pull sidecars out of them
            sidecars = [a for (_, _, a) in coll.actions if isinstance(a, dict) and "sidecar" in a]
            coll.actions = [x for x in coll.actions if not (isinstance(x[2], dict) and "sidecar" in x[2])]
        else:
            for f in cp.files:
                t = _read_parquet(storage, f.path, no_files=not include_files)
                non_file += _collect_parquet_table(t, cp.version, coll)
            sidecars = [a for a in non_file if "sidecar" in a]
        for sc in sidecars if include_files else []:
            p = (sc["sidecar"] or {}).get("path")
            if not p:
                raise CheckpointReadError(
                    f"A sidecar action in checkpoint {name} has no path",
                    None,
                    "delete the broken checkpoint (and _last_checkpoint); the JSON commits rebuild the state",
                )
            t = _read_parquet(storage, _sidecar_path(storage, log_dir, p), only_files=True)
            _collect_parquet_table(t, cp.version, coll, files_only=True)
        actions = [
            action_from_json(obj) for obj in non_file if "sidecar" not in obj and "checkpointMetadata" not in obj
        ]
    except FileNotFoundError as e:
        raise CheckpointReadError(
            f"Checkpoint {cp.version} of the table is incomplete",
            f"file '{e.filename or e}' referenced by it is missing",
            "delete the broken checkpoint (and _last_checkpoint) or restore the missing file",
        ) from None
    except CheckpointReadError:
        raise
    except LogCorruptedError as e:
        raise CheckpointReadError(f"Checkpoint {name}: {e.problem}", e.cause, e.fix) from None
    for a in actions:
        coll.actions.append((-1, cp.version, a))
