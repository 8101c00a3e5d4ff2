"""Vectorised (pyarrow) log replay: checkpoint + JSON commits -> table state.

Replay rules (PROTOCOL.md "Action Reconciliation"; Delta's ``InMemoryLogReplay``):

1. Actions are applied in log order: the checkpoint first (its rows are already reconciled), then
   every JSON commit ``checkpoint+1 .. version`` in version order, lines in file order.
2. ``protocol`` and ``metaData``: the latest one wins (full replace). Both must exist at the end,
   otherwise :class:`LogCorruptedError`.
3. ``txn``: the latest action per ``appId`` wins (its version need not grow).
4. ``domainMetadata``: the latest action per ``domain`` wins; ``removed=true`` drops the domain from
   the snapshot.
5. File actions: the logical file key is ``(path, deletionVector.uniqueId)`` (``uniqueId`` =
   ``storageType + pathOrInlineDv [+ "@" + offset]``; ``(path, NULL)`` without a DV). The newest
   action per key wins; a winning ``add`` is a live file, a winning ``remove`` is a tombstone.
   So an ``add`` after a ``remove`` of the same key is live again, and a re-``add`` of a live key
   replaces its stats/metadata. ``path`` is compared exactly as written (URI-encoded).
6. ``commitInfo``, ``cdc``, ``checkpointMetadata``/``sidecar`` (outside checkpoints) and unknown
   actions do not take part in the state; the ``commitInfo`` of the last commit is kept for
   :attr:`ReplayResult.commit_info`.
7. Checkpoint + later commits: a checkpoint (all its parts, sidecars and inline rows together) is
   already reconciled, i.e. holds at most one action per file key (the protocol requires it; it is
   trusted, not re-checked), and every commit after it is newer. So rule 5 reduces to: among the
   commits' own actions the newest per key wins; a checkpoint row survives iff no later commit
   names its key ``(path, dv uniqueId)`` (whatever that commit's action: add, remove, re-add).
   A commit action on the same path with a different DV names another key and leaves the row.

Algorithm (no Python object per file): the checkpoint is read by :mod:`.checkpoint_read`, the JSON
commits by :mod:`.commit_read`, both into one :class:`~.collect.Collected` of Arrow tables in the
forms of :mod:`.file_actions`. Reconciliation (rules 5 and 7) then does no work proportional to the
checkpoint beyond one hash probe: every commit file action has a global order number (line index).
The commits' keys (``path``, or ``path + NUL + dvUniqueId`` when any source has a DV) are
hash-encoded once (``dictionary_encode``); ``np.maximum.at`` gives the newest order per key and marks
the winning commit rows. The dictionary is the set of keys named by commits: one ``is_in`` of the
checkpoint paths against it finds the superseded checkpoint rows. A checkpoint without later commits
is taken as is; a JSON-only log has no checkpoint rows, so the group step covers every row.
Partition values of JSON adds are rebuilt with exactly the table's partition keys (physical names
under column mapping); checkpoint maps are kept as written. A parquet checkpoint's typed
``add.stats_parsed`` is kept as the files' extra ``stats_parsed`` column (null for files added by
later commits) so data skipping need not parse those files' JSON stats.
"""

import json
import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..actions import (
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
)
from ..buffers import S_EMPTY, S_NUL, np_bools, np_ints, pa_bools, pa_ints
from ..errors import LogCorruptedError, StorageError
from ..storage import Storage
from .checkpoint_read import read_checkpoint
from .collect import Collected, FileSource
from .commit_read import collect_json, read_all_commits
from .file_actions import (
    FILE_SCHEMA,
    REMOVE_SCHEMA,
    dv_unique_ids,
    empty_files,
    empty_tombstones,
    normalize_file_actions,
    partition_keys_of,
    stats_only_parsed,
    struct_child,
)
from .listing import COMPACTED_RE, Checkpoint, LogFile, commit_file_name

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# result


@dataclass
class ReplayResult:
    """State after replay. ``files``/``tombstones`` follow :data:`FILE_SCHEMA`/:data:`REMOVE_SCHEMA`."""

    protocol: Protocol | None = None
    metadata: Metadata | None = None
    files: pa.Table = field(default_factory=empty_files)
    tombstones: pa.Table = field(default_factory=empty_tombstones)
    set_transactions: dict[str, SetTransaction] = field(default_factory=dict)
    domain_metadata: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_info: CommitInfo | None = None
    #: version whose commit carried the winning protocol / metaData (checkpoint version if from it)
    protocol_version: int | None = None
    metadata_version: int | None = None


# ---------------------------------------------------------------------------------------------
# the replay


def replay(
    storage: Storage,
    log_dir: str,
    checkpoint: Checkpoint | None,
    commits: list[LogFile] | tuple[LogFile, ...],
    *,
    include_files: bool = True,
) -> ReplayResult:
    """Reconstruct the state from ``checkpoint`` (optional) + ``commits`` (contiguous, in order).

    See the module docstring for the rules. Raises :class:`LogCorruptedError` when protocol or
    metaData is missing at the end.

    :param include_files: ``False`` replays only the non-file actions (protocol, metaData, txn,
        domainMetadata, commitInfo): no file-action parsing, no sidecars; ``files``/``tombstones``
        stay empty. Much cheaper for metadata-only questions.
    """
    coll = Collected()
    if checkpoint is not None:
        read_checkpoint(storage, log_dir, checkpoint, coll, include_files=include_files)
    n_cp_actions = len(coll.actions)
    if commits:
        try:
            datas = read_all_commits(storage, list(commits))
        except FileNotFoundError as e:
            raise StorageError(
                "A commit file disappeared while the snapshot was being read",
                f"'{e.filename or (e.args[0] if e.args else e)}' was listed but is gone (log cleanup running?)",
                "retry; if it persists, the log is damaged and must be restored",
            ) from None
        _collect_commits(storage, log_dir, list(commits), datas, coll, include_files)
    res = ReplayResult()
    # non-file actions, in log order (checkpoint ones first, then by line order)
    cp_actions = coll.actions[:n_cp_actions]
    json_actions = sorted(coll.actions[n_cp_actions:], key=lambda x: x[0])
    for _, v, a in cp_actions + json_actions:
        if isinstance(a, Protocol):
            res.protocol, res.protocol_version = a, v
        elif isinstance(a, Metadata):
            res.metadata, res.metadata_version = a, v
        elif isinstance(a, SetTransaction):
            res.set_transactions[a.app_id] = a
        elif isinstance(a, DomainMetadata):
            if a.removed:
                res.domain_metadata.pop(a.domain, None)
            else:
                res.domain_metadata[a.domain] = a
    if coll.last_commit_info_line is not None and commits and coll.last_commit_info_line[0] == commits[-1].version:
        try:
            res.commit_info = CommitInfo.from_json(json.loads(coll.last_commit_info_line[1])["commitInfo"])
        except (ValueError, KeyError, TypeError):
            res.commit_info = None
    last_v = commits[-1].version if commits else (checkpoint.version if checkpoint else None)
    if res.protocol is None or res.metadata is None:
        missing = "protocol" if res.protocol is None else "metaData"
        raise LogCorruptedError(
            f"The table's log has no '{missing}' action (state at version {last_v})",
            f"no checkpoint or commit up to version {last_v} contains a {missing} action",
            "restore the log from a backup; every Delta table needs protocol and metaData (version 0 has them)",
        )
    res.files, res.tombstones = _reconcile_files(coll.sources, partition_keys_of(res.metadata))
    return res


#: damaged compaction files already warned of in this process (a long-lived server loads a table often)
_WARNED: dict[str, None] = {}


def _collect_commits(storage: Storage, log_dir: str, commits: list, datas: list, coll, include_files: bool) -> None:
    """The JSON commits and log compaction files of a segment into ``coll``, in log order. Each
    compaction file is parsed on its own: one that cannot be (torn, not JSON, actions of the wrong
    shape) is an optimisation lost, not a damaged table, so its commits are read in its place (they
    must still be there; else its own error stands) and a warning names the skipped file."""
    run: list[tuple[int, bytes]] = []
    for c, data in zip(commits, datas):
        m = COMPACTED_RE.match(c.name)
        if m is None:
            run.append((c.version, data))
            continue
        if run:
            collect_json(run, coll, include_files=include_files)
            run = []
        mark = (len(coll.actions), len(coll.sources), coll.next_order, coll.last_commit_info_line)
        try:
            if not data:  # a torn write (ours writes a newline at least): reading the commits is always right
                raise LogCorruptedError(
                    f"The log file {c.name} is empty",
                    "its write did not finish",
                    "restore the commits it covers, or it, from a backup",
                )
            collect_json([(c.version, _in_log_order(data))], coll, where=c.name, include_files=include_files)
            continue
        except LogCorruptedError as e:
            damaged = e
        del coll.actions[mark[0] :], coll.sources[mark[1] :]  # undo what it collected before failing
        coll.next_order, coll.last_commit_info_line = mark[2], mark[3]
        covered = range(int(m.group(1)), int(m.group(2)) + 1)
        try:
            run = [(v, storage.read_bytes(storage.join(log_dir, commit_file_name(v)))) for v in covered]
        except FileNotFoundError:
            raise damaged from None
        if c.path not in _WARNED:  # once per file and process: every later load reads the commits alike
            if len(_WARNED) >= 1024:  # bounded in a long-lived server: forget the oldest
                _WARNED.pop(next(iter(_WARNED)))
            _WARNED[c.path] = None
            log.warning(
                "Skipped the damaged log compaction file %s (%s: %s); reading commits %d..%d in its place",
                c.path,
                damaged.problem,
                damaged.cause,
                covered.start,
                covered.stop - 1,
            )
    if run:
        collect_json(run, coll, include_files=include_files)


def _in_log_order(data: bytes) -> bytes:
    """A log compaction file's lines for a replay in which the last action of a key wins. The
    protocol has one action per key in it (any order then replays alike); Databricks writes the
    commits newest first without reconciling them, so the first action of a key is the newest: read
    backwards, it is the last."""
    return b"\n".join(reversed(data.splitlines()))


#: a selection of rows that forms at most this many runs is taken as zero-copy slices
_MAX_SLICE_RUNS = 256


def _select_rows(t: pa.Table, keep: np.ndarray) -> pa.Table:
    """Rows of ``t`` where ``keep``: zero-copy slices of the kept runs when they are few, else a filter."""
    m = np.concatenate(([False], keep, [False]))
    edges = np.flatnonzero(m[1:] != m[:-1])
    starts, ends = edges[0::2], edges[1::2]
    if len(starts) == 1 and starts[0] == 0 and ends[0] == len(keep):
        return t
    if len(starts) == 0:
        return t.slice(0, 0)
    if len(starts) <= _MAX_SLICE_RUNS:
        return pa.concat_tables([t.slice(int(s), int(e - s)) for s, e in zip(starts, ends)])
    return t.filter(pa_bools(keep))


def _path_of(rows: pa.Array) -> pa.Array:
    p = struct_child(rows, "path")
    return p.cast(pa.string()) if p.type != pa.string() else p


def _has_dv(s: FileSource) -> bool:
    dv = struct_child(s.rows, "deletionVector")
    return dv is not None and not pa.types.is_null(dv.type) and dv.null_count < len(dv)


def _file_keys(rows: pa.Array, with_dv: bool) -> pa.Array:
    """The logical file key per row: ``path``, or ``path + NUL + dvUniqueId`` (``""`` without DV)
    when the log has deletion vectors (NUL never occurs in a URI path)."""
    path = _path_of(rows)
    if not with_dv:
        return path
    dv_id = pc.fill_null(dv_unique_ids(struct_child(rows, "deletionVector"), len(rows)), S_EMPTY)
    return pc.binary_join_element_wise(path, dv_id, S_NUL)


def _encode(keys: list[pa.Array]) -> tuple[pa.Array, np.ndarray]:
    """Hash-encode the keys of several arrays: (distinct keys, int code per row, all arrays in turn)."""
    enc = pc.dictionary_encode(pa.chunked_array(keys, pa.string()))
    dictionary = enc.chunks[-1].dictionary
    if any(len(c.dictionary) != len(dictionary) for c in enc.chunks):  # chunks share one dictionary
        enc = pa.chunked_array([pc.dictionary_encode(pa.concat_arrays(keys))])
        dictionary = enc.chunks[0].dictionary
    codes = [np_ints(c.indices) for c in enc.chunks]
    return dictionary, codes[0] if len(codes) == 1 else np.concatenate(codes)


def _reconcile_files(sources: list[FileSource], partition_keys: list[str]) -> tuple[pa.Table, pa.Table]:
    """Live files and tombstones from the collected sources (rule 5; see "Algorithm" above)."""
    if not sources:
        return empty_files(), empty_tombstones()
    commit_sources = [s for s in sources if not s.in_checkpoint]
    winner_masks: dict[int, np.ndarray] = {}  # commit source -> its rows that win their key
    keep_of: dict[int, np.ndarray | None] = {}  # checkpoint source -> its rows no commit supersedes
    if commit_sources:
        with_dv = any(_has_dv(s) for s in sources)
        keys = [_file_keys(s.rows, with_dv) for s in commit_sources]
        named, codes = _encode(keys)
        orders = np.concatenate([s.order for s in commit_sources])
        newest = np.full(len(named), -1, dtype=np.int64)
        np.maximum.at(newest, codes, orders)  # newest commit action per key
        wins = orders == newest[codes]
        for s, w in zip(commit_sources, np.split(wins, np.cumsum([len(k) for k in keys])[:-1])):
            winner_masks[id(s)] = w
        # a checkpoint row is superseded iff a later commit names its key
        cp_sources = [s for s in sources if s.in_checkpoint]
        named_paths = named
        if cp_sources and with_dv:
            named_paths = pc.unique(pa.chunked_array([_path_of(s.rows) for s in commit_sources], pa.string()))
        for s in cp_sources:
            hit = np_bools(pc.is_in(_path_of(s.rows), value_set=named_paths))
            if hit.any() and with_dv:  # same path: compare the full keys of just those rows
                idx = np.flatnonzero(hit)
                sub = s.rows.take(pa_ints(idx))
                hit[idx[~np_bools(pc.is_in(_file_keys(sub, True), value_set=named))]] = False
            if not hit.any():
                keep_of[id(s)] = s.keep
            else:
                keep_of[id(s)] = ~hit if s.keep is None else s.keep & ~hit
    adds, removes = [], []
    parsed_types = {_parsed_type(s) for s in sources if s.kind == "add"} - {None}
    parsed_type = parsed_types.pop() if len(parsed_types) == 1 else None  # differing types: not kept
    for s in sources:
        rows, keep = s.rows, None
        if s.in_checkpoint:
            keep = keep_of.get(id(s), s.keep)
            if keep is not None and stats_only_parsed(rows):
                rows, keep = rows.filter(pa_bools(keep)), None  # slow stats rebuild: only for kept rows
        else:
            w = winner_masks[id(s)]
            if not w.all():
                rows = rows.filter(pa_bools(w))
        if s.kind == "add":
            t = normalize_file_actions(rows, FILE_SCHEMA, partition_keys=partition_keys if s.from_json else None)
            if parsed_type is not None:
                from ..stats import STATS_PARSED  # (only for checkpoints with typed stats: not at import)

                parsed = struct_child(rows, "stats_parsed") if _parsed_type(s) == parsed_type else None
                t = t.append_column(STATS_PARSED, parsed if parsed is not None else pa.nulls(len(rows), parsed_type))
        else:
            t = normalize_file_actions(rows, REMOVE_SCHEMA, partition_keys=None)
        (adds if s.kind == "add" else removes).append(t if keep is None else _select_rows(t, keep))
    files = pa.concat_tables(adds) if adds else empty_files()
    tombs = pa.concat_tables(removes) if removes else empty_tombstones()
    return files, tombs


def _parsed_type(s: FileSource) -> pa.DataType | None:
    """The type of a checkpoint source's typed ``stats_parsed``; None when it has none."""
    if not s.in_checkpoint or s.from_json:
        return None
    parsed = struct_child(s.rows, "stats_parsed")
    return parsed.type if parsed is not None and pa.types.is_struct(parsed.type) else None
