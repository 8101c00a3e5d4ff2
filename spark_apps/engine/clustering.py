"""Liquid clustering (PROTOCOL.md "Clustered Table"): the clustering columns and which files are
clustered for them.

* A table is clustered when its protocol has the ``clustering`` writer feature (with
  ``domainMetadata``). Its clustering columns live in the ``delta.clustering`` domain as
  ``{"clusteringColumns": [["col"], ["a", "b"]]}``: each column a list of name parts, physical
  names under column mapping (delta-spark's form; a flat ``["col"]`` is read too). An empty list
  means no clustering columns (``cluster_by(None)``).
* Clustering columns are data columns (no partitioned table is clustered) of types with min/max
  statistics, and the table collects statistics for them (``delta.dataSkippingNumIndexedCols`` /
  ``delta.dataSkippingStatsColumns``): the protocol asks for those stats, and skipping needs them.
* A file OPTIMIZE clustered carries ``clusteringProvider: "liquid"`` and delta-spark's ZCube tags:
  ``ZCUBE_ID`` (the OPTIMIZE run's cube), ``ZCUBE_ZORDER_BY`` (the clustering columns' logical
  names, JSON) and ``ZCUBE_ZORDER_CURVE`` (``zorder``: our curve). The same tags delta-spark
  writes, so each engine sees the other's clustered files as clustered. A file is clustered for the
  current columns when its provider is ``liquid`` and its ``ZCUBE_ZORDER_BY`` names them; changing
  the columns makes every older file unclustered for the new ones.
"""

from __future__ import annotations

import json
import re
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .actions import DomainMetadata
from .errors import InvalidArgumentError

__all__ = [
    "DOMAIN",
    "PROVIDER",
    "MAX_COLUMNS",
    "is_clustered",
    "domain_paths",
    "clustering_columns",
    "resolve_columns",
    "domain_action",
    "check_stats_cover",
    "check_schema_keeps_columns",
    "cube_tags",
    "cube_of",
    "column_parts",
]

DOMAIN = "delta.clustering"
#: ``add.clusteringProvider`` of the files OPTIMIZE clusters (the protocol's example, delta-spark's name)
PROVIDER = "liquid"
#: at most this many clustering columns (delta-spark's default limit)
MAX_COLUMNS = 4
ZCUBE_ID = "ZCUBE_ID"
ZCUBE_ZORDER_BY = "ZCUBE_ZORDER_BY"
ZCUBE_ZORDER_CURVE = "ZCUBE_ZORDER_CURVE"
CURVE = "zorder"


def is_clustered(protocol) -> bool:
    """The table's protocol has the ``clustering`` writer feature."""
    return protocol is not None and "clustering" in set(protocol.writer_features or ())


def domain_paths(domain_metadata: dict | None) -> list[tuple[str, ...]] | None:
    """The physical name paths of the ``delta.clustering`` domain (None: no such domain)."""
    d = (domain_metadata or {}).get(DOMAIN)
    if d is None or d.removed:
        return None
    try:
        cols = json.loads(d.configuration or "{}").get("clusteringColumns") or []
    except (ValueError, AttributeError):
        cols = None
    if not isinstance(cols, list) or not all(isinstance(c, (str, list)) for c in cols):
        from .errors import LogCorruptedError

        raise LogCorruptedError(
            f"The table's '{DOMAIN}' domain is not valid",
            f'its configuration is {d.configuration!r}; expected {{"clusteringColumns": [["col"], ...]}}',
            "set the clustering columns again (cluster_by), or repair the table with the engine that wrote it",
        )
    return [(c,) if isinstance(c, str) else tuple(str(p) for p in c) for c in cols]


def _quote(part: str) -> str:
    return part if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) else "`" + part.replace("`", "``") + "`"


def _logical(schema, path: tuple[str, ...]) -> str | None:
    """The logical (display) name of a physical path, dotted and quoted as Spark names columns."""
    st, parts = schema, []
    for p in path:
        f = next((x for x in getattr(st, "fields", ()) if x.physical_name.lower() == p.lower()), None)
        if f is None:
            return None
        parts.append(f.name)
        st = f.type
    return ".".join(_quote(p) for p in parts)


def clustering_columns(snapshot) -> list[str] | None:
    """The clustering columns' logical names (dotted for nested ones), or None when the table is not
    clustered or has no clustering domain."""
    if not is_clustered(snapshot.protocol):
        return None
    paths = domain_paths(getattr(snapshot, "domain_metadata", None))
    if paths is None:
        return None
    out = []
    for p in paths:
        name = _logical(snapshot.schema, p)
        if name is None:
            from .errors import LogCorruptedError

            raise LogCorruptedError(
                f"The clustering column '{'.'.join(p)}' is not in the table's schema",
                f"the '{DOMAIN}' domain names it; the columns are {', '.join(snapshot.schema.names)}",
                "set the clustering columns again (cluster_by)",
            )
        out.append(name)
    return out


def column_parts(name: str) -> list[str]:
    """``a.b`` -> ``[a, b]``; backquoted parts keep their dots (```a.b`.c`` -> ``[a.b, c]``)."""
    parts, cur, quoted, i = [], "", False, 0
    while i < len(name):
        ch = name[i]
        if ch == "`":
            if quoted and name[i + 1 : i + 2] == "`":
                cur += "`"
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    parts.append(cur)
    return [p.strip() for p in parts]


def resolve_columns(schema, columns, *, partition_columns=(), configuration=None) -> list[tuple[str, tuple]]:
    """``(logical name, physical path)`` of each clustering column, checked: it exists (nested
    through structs with ``a.b``), once, is not a partition column, has a type with min/max
    statistics, and the table collects statistics for it; at most :data:`MAX_COLUMNS`.

    :raises InvalidArgumentError: naming the column, before anything is written
    """
    from .stats import MINMAX_TYPES, type_name

    if isinstance(columns, str):
        columns = [columns]
    if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) and c.strip() for c in columns):
        raise InvalidArgumentError(
            f"cluster_by must be column names, got {columns!r}",
            f"it is a {type(columns).__name__}, or holds something other than non-empty strings",
            "pass a column name or a list of them, e.g. ['id', 'ts']",
        )
    if partition_columns and columns:
        raise InvalidArgumentError(
            "A table cannot be both partitioned and clustered",
            f"it is partitioned by {', '.join(partition_columns)} (the protocol forbids clustering a partitioned table)",
            "pass either partition_by or cluster_by, not both",
        )
    if len(columns) > MAX_COLUMNS:
        raise InvalidArgumentError(
            f"Too many clustering columns: {len(columns)}",
            f"a table clusters by at most {MAX_COLUMNS} columns (as in Delta)",
            "cluster by the columns queries filter on most",
        )
    out: list[tuple[str, tuple]] = []
    for col in columns:
        parts = column_parts(col)
        fields = schema.field_path(parts)
        if len(fields) < len(parts):
            raise InvalidArgumentError(
                f"Clustering column '{col}' is not in the schema",
                f"the schema has columns {', '.join(schema.names)}",
                "cluster by existing columns (nested ones as parent.child)",
            )
        f, names, path = fields[-1], [x.name for x in fields], [x.physical_name for x in fields]
        if type_name(f.type) not in MINMAX_TYPES:
            raise InvalidArgumentError(
                f"Cannot cluster by column '{col}' of type {f.type.simple_string()}",
                "clustering needs min/max statistics, which Delta keeps for numbers, strings, dates and timestamps",
                "cluster by columns of those types",
            )
        logical = ".".join(_quote(n) for n in names)
        if any(p == tuple(path) for _, p in out):
            raise InvalidArgumentError(
                f"Clustering column '{logical}' is listed twice",
                f"the columns given are {', '.join(repr(str(c)) for c in columns)}, and names match "
                "case-insensitively (as Delta resolves them); a table clusters by each column once",
                f"list '{logical}' once",
            )
        out.append((logical, tuple(path)))
    check_stats_cover(schema, configuration, out)
    return out


def check_stats_cover(schema, configuration, resolved: list[tuple[str, tuple]]) -> None:
    """Every clustering column is among the columns the table collects statistics for."""
    from .config import TableProperties
    from .stats import StatsCollector, stats_config_from_properties

    if not resolved:
        return
    cfg = stats_config_from_properties(configuration)
    mapped = TableProperties.of(configuration).column_mapping_mode != "none"
    leaves = {tuple(k.lower() for k in p) for p in StatsCollector(schema, **cfg).leaf_paths}
    for logical, path in resolved:
        key = path if mapped else tuple(column_parts(logical))
        if tuple(k.lower() for k in key) not in leaves:
            raise InvalidArgumentError(
                f"Clustering column '{logical}' has no statistics in this table",
                "the protocol requires statistics for clustering columns, and the table collects them only for "
                "the first delta.dataSkippingNumIndexedCols columns or those in delta.dataSkippingStatsColumns",
                f"add '{logical}' to delta.dataSkippingStatsColumns, or raise delta.dataSkippingNumIndexedCols",
            )


def check_schema_keeps_columns(snapshot, metadata, actions) -> None:
    """A commit's new metadata still has every clustering column (the domain this commit writes, else
    the snapshot's): a schema change (overwrite, RESTORE) may not drop one.

    :raises InvalidCommitError: naming the column; nothing is written
    """
    from .errors import InvalidCommitError
    from .schema import parse_schema

    written = next((a for a in actions if isinstance(a, DomainMetadata) and a.domain == DOMAIN), None)
    domains = {DOMAIN: written} if written is not None else getattr(snapshot, "domain_metadata", None)
    paths = domain_paths(domains)
    if not paths:
        return
    schema = parse_schema(metadata.schema_string)
    for p in paths:
        if _logical(schema, p) is None:
            raise InvalidCommitError(
                f"This commit would drop the clustering column '{'.'.join(p)}'",
                f"the table is clustered by it (the '{DOMAIN}' domain) and the new schema lacks it",
                "change the clustering columns first (cluster_by), then change the schema",
            )


def domain_action(resolved: list[tuple[str, tuple]]) -> DomainMetadata:
    """The ``delta.clustering`` domain for these columns (physical paths; empty: no clustering)."""
    cfg = {"clusteringColumns": [list(p) for _, p in resolved]}
    return DomainMetadata(domain=DOMAIN, configuration=json.dumps(cfg, separators=(",", ":")), removed=False)


def cube_tags(columns: list[str]) -> dict:
    """The tags of the files one clustering OPTIMIZE writes: a new ZCube for ``columns``."""
    return {
        ZCUBE_ID: str(uuid.uuid4()),
        ZCUBE_ZORDER_BY: json.dumps(list(columns), separators=(",", ":")),
        ZCUBE_ZORDER_CURVE: CURVE,
    }


def cube_of(files: pa.Table, columns: list[str]) -> tuple[list, np.ndarray]:
    """Per file: its ZCube id when it is clustered for ``columns`` (provider ``liquid``, tags naming
    them), else None; and whether another clustering implementation clustered it (the protocol: not
    ours to recluster)."""
    n = files.num_rows
    if n == 0:
        return [], np.zeros(0, dtype=bool)
    provider = (
        files.column("clustering_provider").to_pylist() if "clustering_provider" in files.column_names else [None] * n
    )
    if "tags" in files.column_names:
        tags = files.column("tags")
        ids = pc.map_lookup(tags, pa.scalar(ZCUBE_ID), "first").to_pylist()
        by = pc.map_lookup(tags, pa.scalar(ZCUBE_ZORDER_BY), "first").to_pylist()
    else:
        ids, by = [None] * n, [None] * n
    want = list(columns)
    cubes, foreign = [], np.zeros(n, dtype=bool)
    for i in range(n):
        if provider[i] is not None and provider[i] != PROVIDER:
            foreign[i] = True
            cubes.append(None)
            continue
        try:
            cols = json.loads(by[i]) if by[i] else None
        except ValueError:
            cols = None
        cubes.append(ids[i] if provider[i] == PROVIDER and ids[i] and cols == want else None)
    return cubes, foreign
