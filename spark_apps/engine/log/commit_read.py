"""Reading JSON commits into the collected state, vectorised.

JSON commits are copied into one buffer; line boundaries are found with numpy and file-action lines
recognised by their exact prefix (``{"add":`` / ``{"remove":``, vectorised). The few other lines are
``json.loads``-ed in Python (``commitInfo`` and ``cdc`` are parsed so that a torn line is refused,
then dropped; only the last ``commitInfo`` is kept) and overwritten with spaces, so ONE
``pyarrow.json`` call over the whole buffer yields exactly one row per file action, in line order.
The explicit schema leaves ``partitionValues``/``tags`` to inference as structs (pyarrow.json cannot
build maps); they become ``map<string,string>``. If arrow cannot parse the lines (bad JSON,
conflicting types of unknown fields) a per-line Python fallback parses them or names the broken commit.

:func:`read_commit` reads ONE commit the same way into Arrow tables of its adds and removes plus its
non-file actions as objects (the conflict checker's view of a winning commit).
"""

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from ..actions import (
    CommitInfo,
    Metadata,
    action_from_json,
    load_action_line,
)
from ..errors import LogCorruptedError
from ..storage import LocalStorage, Storage
from ..threads import ThreadPool
from .collect import Collected, add_struct_rows
from .file_actions import (
    FILE_SCHEMA,
    MAP_FIELDS,
    REMOVE_SCHEMA,
    STRING_MAP,
    WIRE,
    empty_files,
    empty_tombstones,
    normalize_file_actions,
    partition_keys_of,
)
from .listing import LogFile

# explicit JSON schema for commit file-action lines (maps left out: inferred as structs)
_JSON_ADD = pa.struct([(WIRE[f.name], f.type) for f in FILE_SCHEMA if f.type != STRING_MAP])
_JSON_REMOVE = pa.struct([(WIRE[f.name], f.type) for f in REMOVE_SCHEMA if f.type != STRING_MAP])
_JSON_FILE_SCHEMA = pa.schema([("add", _JSON_ADD), ("remove", _JSON_REMOVE)])


def _json_file_schema(partition_keys: list[str]) -> pa.Schema:
    """The explicit JSON schema, with the known partition keys declared as strings.

    Declaring them matters: pyarrow.json infers ISO-looking strings ("2021-01-01") as timestamps.
    Keys not declared here are still inferred (and checked afterwards, see ``_lossy_inference``).
    """
    if not partition_keys:
        return _JSON_FILE_SCHEMA
    pv = ("partitionValues", pa.struct([(k, pa.string()) for k in partition_keys]))
    return pa.schema([("add", pa.struct(list(_JSON_ADD) + [pv])), ("remove", pa.struct(list(_JSON_REMOVE) + [pv]))])


def _lossy_inference(t: pa.Table) -> bool:
    """True if a map-like field was inferred with a type whose string form differs from the JSON text
    (timestamps/dates from ISO-looking strings, floats, nested values): then re-parse per line."""
    for kind in ("add", "remove"):
        if kind not in t.column_names:
            continue
        st = t.schema.field(kind).type
        for name in MAP_FIELDS:
            i = st.get_field_index(name)
            if i < 0 or not pa.types.is_struct(st.field(i).type):
                continue
            for f in st.field(i).type:
                ft = f.type
                if not (
                    pa.types.is_string(ft) or pa.types.is_null(ft) or pa.types.is_integer(ft) or pa.types.is_boolean(ft)
                ):
                    return True
    return False


def read_all_commits(storage: Storage, commits: list[LogFile]) -> list[bytes]:
    """Read the commit files; in parallel threads for remote storage (latency-bound)."""
    if len(commits) <= 8 or isinstance(storage, LocalStorage):
        return [storage.read_bytes(c.path) for c in commits]
    with ThreadPool(max_workers=16) as ex:
        return list(ex.map(lambda c: storage.read_bytes(c.path), commits))


_ADD_PREFIX = np.frombuffer(b'{"add":', dtype=np.uint8)
_REMOVE_PREFIX = np.frombuffer(b'{"remove":', dtype=np.uint8)
_COMMIT_INFO_PREFIX = b'{"commitInfo":'
_CDC_PREFIX = b'{"cdc":'
_WS = b" \t\r\n"


def _has_prefix(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Vectorised ``line.startswith(prefix)`` for every line ``buf[starts[i]:ends[i]]``."""
    ok = (ends - starts) >= len(prefix)
    last = len(buf) - 1
    for j, byte in enumerate(prefix.tolist()):
        ok &= buf[np.minimum(starts + j, last)] == byte
    return ok


def _blank(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Overwrite the given line ranges with spaces (in place, vectorised)."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return
    rel = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    buf[np.repeat(starts, lengths) + rel] = 32


def collect_json(
    datas: list[tuple[int, bytes]],
    coll: Collected,
    *,
    where: str | None = None,
    in_checkpoint: bool = False,
    include_files: bool = True,
    partition_keys: list[str] | tuple[str, ...] = (),
) -> None:
    """Parse NDJSON commits ``[(version, bytes)]`` (in version order) into ``coll``.

    Lines are found with numpy; file-action lines are recognised by their exact prefix
    (``{"add":`` / ``{"remove":``, vectorised). Every other line is handled in Python (a handful per
    commit) and then blanked out, so one ``pyarrow.json`` call over the whole buffer yields exactly
    one row per file action, in line order.

    :param partition_keys: partition keys known to the caller (besides those of the metaData actions
        collected so far), declared as strings to the JSON reader.
    """
    sizes = []
    chunks = []
    for _, d in datas:
        if b"\r" in d:
            d = d.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if d and not d.endswith(b"\n"):
            d = d + b"\n"
        chunks.append(d)
        sizes.append(len(d))
    total = sum(sizes)
    if total == 0:
        return
    buf = np.empty(total, dtype=np.uint8)
    pos = 0
    for d in chunks:
        buf[pos : pos + len(d)] = np.frombuffer(d, dtype=np.uint8)
        pos += len(d)
    del chunks
    ends = np.flatnonzero(buf == 10)  # every line ends with a newline
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    n_lines = len(ends)
    file_starts = np.cumsum([0] + sizes[:-1])
    line_versions = np.array([v for v, _ in datas], dtype=np.int64)[
        np.searchsorted(file_starts, starts, side="right") - 1
    ]
    base = coll.next_order
    coll.next_order = base + n_lines

    is_file = _has_prefix(buf, starts, ends, _ADD_PREFIX) | _has_prefix(buf, starts, ends, _REMOVE_PREFIX)
    other = np.flatnonzero(~is_file & (ends > starts))
    keep_extra: list[int] = []
    blank: list[int] = []
    raw = memoryview(buf)
    for i in other.tolist():
        text = bytes(raw[starts[i] : ends[i]])
        v = int(line_versions[i])
        if text.startswith(_COMMIT_INFO_PREFIX) or text.startswith(_CDC_PREFIX):
            # not replayed, but a torn or malformed line means a damaged commit: refuse it
            obj = load_action_line(text, f"{_source(v, where)} has a line that is")
            if text.startswith(_CDC_PREFIX):
                try:
                    action_from_json(obj)
                except LogCorruptedError as e:
                    raise LogCorruptedError(f"{_source(v, where)}: {e.problem}", e.cause, e.fix) from None
            else:
                coll.last_commit_info_line = (v, text)
            blank.append(i)
            continue
        if not text.strip(_WS):
            continue  # blank line: the JSON reader skips it
        blank.append(i)
        obj = load_action_line(text, f"{_source(v, where)} has a line that is")
        if not isinstance(obj, dict):
            raise _wrong_shape(v, where, text, "a line that is not a JSON object")
        if "add" in obj or "remove" in obj:  # unusual formatting of a file action: let arrow parse it
            blank.pop()
            keep_extra.append(i)
            continue
        if "commitInfo" in obj:
            coll.last_commit_info_line = (v, text)
            continue
        if in_checkpoint and "sidecar" in obj:
            coll.actions.append((base + i, v, obj))
            continue
        if "checkpointMetadata" in obj or "sidecar" in obj:
            continue
        try:
            a = action_from_json(obj)
        except LogCorruptedError as e:
            raise LogCorruptedError(f"{_source(v, where)}: {e.problem}", e.cause, e.fix) from None
        if a is not None:
            coll.actions.append((base + i, v, a))
    if blank:
        b = np.array(blank, dtype=np.int64)
        _blank(buf, starts[b], ends[b])
    file_lines = np.flatnonzero(is_file)
    if keep_extra:
        file_lines = np.sort(np.concatenate([file_lines, np.array(keep_extra, dtype=np.int64)]))
    if len(file_lines) == 0 or not include_files:
        return
    orders = file_lines.astype(np.int64) + base
    doc = pa.py_buffer(buf)
    keys: list[str] = list(partition_keys)
    for _, _, a in coll.actions:  # every metaData seen so far (checkpoint + these commits)
        if isinstance(a, Metadata):
            keys += [k for k in partition_keys_of(a) if k not in keys]
    try:
        t = pajson.read_json(
            pa.BufferReader(doc),
            read_options=pajson.ReadOptions(use_threads=True, block_size=_json_block_size(total)),
            parse_options=pajson.ParseOptions(
                explicit_schema=_json_file_schema(keys), unexpected_field_behavior="infer"
            ),
        )
        if t.num_rows != len(file_lines):
            raise pa.ArrowInvalid("row count does not match the file-action lines")
        if _lossy_inference(t):
            raise pa.ArrowInvalid("partitionValues/tags inferred with a non-string type")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        texts = [bytes(raw[starts[i] : ends[i]]).decode("utf-8", "replace") for i in file_lines.tolist()]
        t = _parse_file_lines_slow(texts, line_versions[file_lines], where)
    _check_partition_keys(t, coll, orders, raw, starts, ends, file_lines, line_versions, where)
    for kind in ("add", "remove"):
        if kind in t.column_names:
            _check_paths(t.column(kind), kind, raw, starts, ends, file_lines, line_versions, where)
            add_struct_rows(t.column(kind), kind, coll, True, orders, in_checkpoint=in_checkpoint)


def _check_partition_keys(
    t: pa.Table, coll: Collected, orders, raw, starts, ends, file_lines, versions, where: str | None
) -> None:
    """An ``add`` must name every partition column of the metaData in effect at its line (a NULL value
    is a key with a null value). The JSON reader turns an absent key into NULL too, so only the adds
    holding a NULL partition value are re-read exactly, to tell the two apart."""
    if "add" not in t.column_names:
        return
    metas = sorted((order, partition_keys_of(a)) for order, _, a in coll.actions if isinstance(a, Metadata))
    if not metas or not any(keys for _, keys in metas):
        return
    add = t.column("add").combine_chunks()
    if add.type.get_field_index("partitionValues") < 0:
        return
    pv = pc.struct_field(add, "partitionValues")
    if not pa.types.is_struct(pv.type):
        return
    suspect = None
    for key in {k for _, keys in metas for k in keys}:
        if pv.type.get_field_index(key) >= 0:
            null = pc.and_(pc.is_valid(add), pc.is_null(pc.struct_field(pv, key)))
        else:  # no add of this batch names the key at all
            null = pc.is_valid(add)
        suspect = null if suspect is None else pc.or_(suspect, null)
    if suspect is None or not pc.any(suspect).as_py():
        return
    meta_orders = np.array([o for o, _ in metas], dtype=np.int64)
    for row in pc.indices_nonzero(suspect).to_pylist():  # few rows: NULL partition values only
        at = int(np.searchsorted(meta_orders, int(orders[row]), side="right")) - 1
        keys = metas[at][1] if at >= 0 else []
        i = int(file_lines[row])
        obj = json.loads(bytes(raw[starts[i] : ends[i]]))
        given = (obj.get("add") or {}).get("partitionValues") or {}
        missing = [k for k in keys if k not in given]
        if missing:
            raise LogCorruptedError(
                f"{_source(int(versions[i]), where)} adds '{(obj.get('add') or {}).get('path')}' without a "
                f"value for partition column(s) {', '.join(missing)}",
                f"its partitionValues name only {sorted(given) or 'nothing'}",
                "repair the log: every add names every partition column (a null value as null)",
            )


def _check_paths(col, kind: str, raw, starts, ends, file_lines, versions, where: str | None) -> None:
    """Every ``add``/``remove`` of a JSON file names its ``path`` (a file action without one would be
    dropped, and with it the file)."""
    if col.null_count == len(col):
        return
    path = pc.struct_field(col, "path") if col.type.get_field_index("path") >= 0 else pa.nulls(len(col))
    bad = pc.indices_nonzero(pc.and_(pc.is_valid(col), pc.is_null(path)))
    if len(bad):
        i = int(file_lines[bad[0].as_py()])
        raise _wrong_shape(int(versions[i]), where, bytes(raw[starts[i] : ends[i]]), f"an '{kind}' without a 'path'")


def _source(version: int, where: str | None) -> str:
    """The log file a line came from, for errors: ``where`` when the caller named it (a compaction
    or JSON checkpoint file), else the commit file of ``version``."""
    return f"The log file {where}" if where else f"Commit {version} of the table ({version:020d}.json)"


def _wrong_shape(version: int, where: str | None, text, what: str) -> LogCorruptedError:
    """A line that is JSON but no action: the file is damaged (never skipped: it may be an add)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return LogCorruptedError(
        f"{_source(version, where)} has {what}",
        f"the line is {text[:200]!r}; every line of a Delta log file is one action: a JSON object with one "
        "key naming the action, whose value is an object",
        "restore the file from a backup",
    )


def _json_block_size(total: int) -> int:
    """Blocks of ~1/4 of the input (>= 1 MiB) so pyarrow parses in parallel."""
    return int(min(max(1 << 20, total // 4 + 1), (1 << 31) - 1))


def _parse_file_lines_slow(texts: list[str], versions: np.ndarray, where: str | None) -> pa.Table:
    """Fallback when the vectorised parse fails (type conflicts, bad JSON): per line, with errors."""
    adds, removes = [], []
    for text, v in zip(texts, versions.tolist()):
        obj = load_action_line(text, f"{_source(v, where)} has a line that is")
        a = obj.get("add") if isinstance(obj, dict) else None
        r = obj.get("remove") if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or not isinstance(a if "add" in obj else r, dict):
            raise _wrong_shape(v, where, text, "a file action whose value is not a JSON object")
        for target, val, schema in ((adds, a, FILE_SCHEMA), (removes, r, REMOVE_SCHEMA)):
            if isinstance(val, dict):
                row = {}
                for name in schema.names:
                    w = WIRE[name]
                    x = val.get(w)
                    if w in MAP_FIELDS and isinstance(x, dict):
                        x = {
                            str(k): (None if vv is None else vv if isinstance(vv, str) else json.dumps(vv))
                            for k, vv in x.items()
                        }
                    elif w == "stats" and x is not None and not isinstance(x, str):
                        x = json.dumps(x)
                    row[w] = x
                target.append(row)
            else:
                target.append(None)
    add_t = pa.struct([(WIRE[f.name], f.type) for f in FILE_SCHEMA])
    rem_t = pa.struct([(WIRE[f.name], f.type) for f in REMOVE_SCHEMA])
    try:
        return pa.table({"add": pa.array(adds, add_t), "remove": pa.array(removes, rem_t)})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise LogCorruptedError(
            f"A file action in the log ({where or 'commits'}) has fields of the wrong type",
            str(e),
            "repair the log; the table was written by a non-conforming writer",
        ) from None


def commit_info_from_bytes(data: bytes) -> CommitInfo | None:
    """The ``commitInfo`` action of one commit file (first one found), or ``None``.

    Only the line holding ``"commitInfo"`` is parsed (usually the first), so a commit with 100k
    adds costs a substring search, not a full parse.
    """
    pos = data.find(b'"commitInfo"')
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        line = data[start:end]
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("commitInfo"), dict):
            return CommitInfo.from_json(obj["commitInfo"])
        pos = data.find(b'"commitInfo"', end)
    return None


@dataclass(frozen=True)
class CommitActions:
    """One commit file: file actions as Arrow tables, the other actions as objects."""

    #: commitInfo (first, when present), then protocol / metaData / txn / domainMetadata in line order
    actions: list
    #: the commit's adds (FILE_SCHEMA) and removes (REMOVE_SCHEMA), in line order, not reconciled
    adds: pa.Table
    removes: pa.Table


def read_commit(version: int, data: bytes, *, partition_keys: list[str] | None = None) -> CommitActions:
    """Read one commit file with the vectorised reader (a torn or malformed line is a LogCorruptedError
    naming the commit).

    :param partition_keys: the ``partitionValues`` keys in effect (from the metadata the caller read);
        a metaData action in the commit itself takes precedence. They are declared as strings to the
        JSON reader, so every ``partition_values`` map holds exactly these keys with the log's text
        (as in a snapshot's files table, which the predicate model types). ``None``: keys as found.
    """
    coll = Collected()
    collect_json([(version, data)], coll, partition_keys=partition_keys or ())
    actions = [a for _, _, a in coll.actions]
    metas = [a for a in actions if isinstance(a, Metadata)]
    if metas:
        partition_keys = partition_keys_of(metas[-1])
    if coll.last_commit_info_line is not None:
        value = json.loads(coll.last_commit_info_line[1]).get("commitInfo")
        if isinstance(value, dict):
            actions.insert(0, CommitInfo.from_json(value))
    adds = [
        normalize_file_actions(s.rows, FILE_SCHEMA, partition_keys=partition_keys)
        for s in coll.sources
        if s.kind == "add"
    ]
    removes = [
        normalize_file_actions(s.rows, REMOVE_SCHEMA, partition_keys=None) for s in coll.sources if s.kind == "remove"
    ]
    return CommitActions(
        actions=actions,
        adds=pa.concat_tables(adds) if adds else empty_files(),
        removes=pa.concat_tables(removes) if removes else empty_tombstones(),
    )
