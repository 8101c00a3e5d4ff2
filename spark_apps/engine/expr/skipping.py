"""Which files can hold a row matching a predicate: partition pruning and min/max data skipping.

Two steps over the snapshot's live files (``snapshot.files``, one row per file), both vectorised:

1. **Partition values, exactly.** The partition columns' values (strings in the log) are typed
   (:func:`airflow_delta_provider_apps.engine.partitions.partition_column_array`) into a one-row-per-file table and the
   conjuncts that reference only partition columns are evaluated on it with the ordinary evaluator
   (:mod:`.evaluate`): a file survives when each is TRUE.
2. **Stats, conservatively.** The rest of the predicate is rewritten into a condition over each
   file's stats (``minValues``, ``maxValues``, ``nullCount``, ``numRecords``: :func:`stats_table`,
   from a checkpoint's typed ``stats_parsed`` where the snapshot has it, else from the stats JSON
   with one pyarrow call) that is false only when no row of the file can make the predicate
   TRUE, as delta-kernel-rs's ``data_skipping`` does. Anything unknown keeps the file: missing stats,
   a column without stats, an expression the rewrite does not understand, a value that will not parse.
   Partition columns take part here too (min = max = the file's value), so ``p = 1 OR x > 5`` prunes.

Rules of the rewrite (``col`` a column, ``v`` a non-NULL literal, NULL-valued literals match nothing):
``col = v``: ``min <= v AND max >= v``; ``col < v``: ``min < v``; ``col <= v``: ``min <= v``;
``col > v``: ``max > v``; ``col >= v``: ``max >= v``; ``col != v``: not (``min = v = max``);
``col IN (...)``: any of the equalities; ``col IS NULL``: ``nullCount > 0``; ``col IS NOT NULL``:
``nullCount < numRecords``; AND / OR combine; NOT is pushed down (De Morgan, negated comparisons).
Bounds are loosened where writers loosen them: a string maximum that ends with a tie-breaker or has
32 or more characters may be a truncated prefix (:func:`_loosen_string_max`); a timestamp maximum
may be truncated to the millisecond (+999 us); float/double maxima do not bound NaN (Spark orders
NaN above every number), so they are not used. ``tightBounds = false`` (files with deletion
vectors) leaves min/max valid bounds but nullCount unreliable, so ``IS NOT NULL`` keeps those files.
A string column with a non-binary collation (``__COLLATIONS``: UTF8_LCASE, UNICODE_CI ...) has no
usable min/max: Spark collects them in the collation's order, not the bytes' (its nullCount is used).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from ..partitions import partition_column_array
from ..schema import StructType
from ..schema.collations import non_binary_collation
from ..stats import STATS_PARSED
from . import nodes as n
from .evaluate import compare, evaluate

__all__ = [
    "SkippingResult",
    "may_match",
    "row_groups_may_match",
    "skip_files",
    "partition_table",
    "is_partition_only",
    "stats_table",
]

STRING_PREFIX_LENGTH = 32  # delta-spark's and delta-rs's default truncation of string stats


@dataclass
class SkippingResult:
    """The files that may match, and the counts before and after skipping (for the metrics)."""

    files: pa.Table
    num_files_before: int
    num_bytes_before: int
    num_files_after: int
    num_bytes_after: int


def is_partition_only(expr: n.Expr, partition_columns: list[str]) -> bool:
    """The predicate references partition columns only (so partition values decide it exactly)."""
    parts = {c.lower() for c in partition_columns}
    return all(len(p) == 1 and p[0].lower() in parts for p in expr.columns())


def _part_key(schema: StructType, name: str) -> tuple[str, object]:
    f = schema.find(name) if hasattr(schema, "find") else None
    f = f or next(x for x in schema.fields if x.name.lower() == name.lower())
    return f.physical_name, f


def partition_table(files: pa.Table, schema: StructType, partition_columns: list[str]) -> pa.Table:
    """One row per file, one typed column per partition column (named as in the table schema)."""
    arrays, names = [], []
    pv = files.column("partition_values")
    for name in partition_columns:
        key, f = _part_key(schema, name)
        strings = pc.map_lookup(pv, key, "first") if files.num_rows else pa.array([], pa.string())
        if isinstance(strings, pa.ChunkedArray):
            strings = strings.combine_chunks()
        arrays.append(partition_column_array(strings, f.type))
        names.append(f.name)
    return pa.table(arrays, names=names) if names else pa.table({"_": pa.nulls(files.num_rows)}).drop(["_"])


def may_match(files: pa.Table, schema: StructType, partition_columns: list[str], predicate: n.Expr) -> pa.Array:
    """One boolean per file: False where no row of the file can make ``predicate`` TRUE.

    ``files`` needs ``partition_values`` (map) and ``stats`` (JSON string) columns: a snapshot's
    files or a winning commit's adds (the conflict checker asks the same question of them).
    """
    count = files.num_rows
    parts = {c.lower() for c in partition_columns}
    part_conjuncts, data_conjuncts = [], []
    for c in n.conjuncts(predicate):
        (part_conjuncts if c.columns() and is_partition_only(c, partition_columns) else data_conjuncts).append(c)
    keep = pa.repeat(pa.scalar(True), count)
    ptable = partition_table(files, schema, partition_columns) if partition_columns else None
    if part_conjuncts:
        keep = pc.fill_null(evaluate(n.and_all(part_conjuncts), ptable), False)
        if isinstance(keep, pa.ChunkedArray):
            keep = keep.combine_chunks()
    for c in [c for c in data_conjuncts if not c.columns()]:  # e.g. 1 = 0: decided once for all files
        if evaluate(c, pa.table({"_": [0]})).to_pylist()[0] is not True:
            keep = pa.repeat(pa.scalar(False), count)
    data_conjuncts = [c for c in data_conjuncts if c.columns()]
    if data_conjuncts and count and pc.any(keep).as_py():
        stats = _Stats(files, schema, partition_columns, parts, ptable)
        may = _can_match(n.and_all(data_conjuncts), stats)
        if may is not None:
            keep = pc.and_(keep, pc.fill_null(may, True))
    return keep


def skip_files(
    files: pa.Table,
    schema: StructType,
    partition_columns: list[str],
    predicate: n.Expr | None,
) -> SkippingResult:
    """Drop the files that cannot hold a row where ``predicate`` is TRUE (see the module rules)."""
    before_files = files.num_rows
    before_bytes = int(pc.sum(files.column("size")).as_py() or 0) if before_files else 0
    if predicate is None or before_files == 0:
        return SkippingResult(files, before_files, before_bytes, before_files, before_bytes)
    kept = files.filter(may_match(files, schema, partition_columns, predicate))
    kept_bytes = int(pc.sum(kept.column("size")).as_py() or 0) if kept.num_rows else 0
    return SkippingResult(kept, before_files, before_bytes, kept.num_rows, kept_bytes)


# --------------------------------------------------------------------------------------------------
# stats


def _json_type(t) -> pa.DataType | None:
    """How a column's bounds appear in the stats JSON (as pyarrow.json reads them)."""
    name = t.name
    if isinstance(t, n.DecimalType) or name in ("double", "float"):
        return pa.float64()
    if name in n.INTEGRAL:
        return pa.int64()
    if name in ("string", "date", "timestamp", "timestamp_ntz"):
        return pa.string()
    if name == "boolean":
        return pa.bool_()
    return None  # binary and others carry no usable stats


def _bound_type(t) -> pa.DataType:
    """The type of a column's bounds in :func:`stats_table` (decimals compare as float64)."""
    return pa.float64() if isinstance(t, n.DecimalType) else t.to_arrow()


def _tree(leaves: dict[tuple[str, ...], object]) -> dict:
    """Nested dicts of the paths, the leaves at their ends (``("s", "a") -> {"s": {"a": leaf}}``)."""
    tree: dict = {}
    for path, leaf in leaves.items():
        node = tree
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = leaf
    return tree


def _nested(paths: dict[tuple[str, ...], pa.DataType]) -> pa.DataType:
    """A struct type holding every path (``("s", "a") -> struct<s: struct<a: T>>``)."""

    def build(d: dict) -> pa.DataType:
        return pa.struct([(k, build(v) if isinstance(v, dict) else v) for k, v in d.items()])

    return build(_tree(paths))


def _nested_array(leaves: dict[tuple[str, ...], pa.Array], count: int) -> pa.Array:
    """The struct array of :func:`_nested` built from one array per path."""

    def build(d: dict) -> pa.Array:
        kids = [build(v) if isinstance(v, dict) else v for v in d.values()]
        return pa.StructArray.from_arrays(kids, names=list(d)) if kids else pa.nulls(count, pa.struct([]))

    return build(_tree(leaves))


def _leaf(struct: pa.Array | None, path: tuple[str, ...]) -> pa.Array | None:
    """The array at ``path`` inside a struct array (a null struct makes its leaves null)."""
    col = struct
    for p in path:
        if col is None or not pa.types.is_struct(col.type) or col.type.get_field_index(p) < 0:
            return None
        col = pc.struct_field(col, [col.type.get_field_index(p)])
    return col


def _typed(arr: pa.Array, t) -> pa.Array:
    """Bounds as written (JSON-parsed values or a checkpoint's typed ``stats_parsed`` leaf) as the
    bound type of ``t``; raises ``pa.ArrowInvalid`` / ``ArrowNotImplementedError`` when they do not
    convert."""
    target = _bound_type(t)
    if arr.type == target:
        return arr
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):  # JSON text
        if t.name == "timestamp":
            try:
                return pc.cast(arr, target)
            except pa.ArrowInvalid:
                return pc.assume_timezone(pc.cast(arr, pa.timestamp("us")), "UTC")
        if t.name == "timestamp_ntz":
            return pc.cast(pc.replace_substring_regex(arr, r"(Z|[+-]\d\d:?\d\d)$", ""), target)
        if t.name == "date":
            return pc.cast(pc.utf8_slice_codeunits(arr, 0, 10), target)
    if pa.types.is_decimal(arr.type):  # through text, as the JSON number is read (a direct cast may round)
        return pc.cast(pc.cast(arr, pa.string()), target)
    if pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(target):
        # typed stats: any unit; a zone-less value is a UTC instant (parquet INT96 from Spark)
        same_unit = arr if arr.type.unit == "us" else pc.cast(arr, pa.timestamp("us", arr.type.tz), safe=False)
        return same_unit.cast(target) if same_unit.type != target else same_unit
    return pc.cast(arr, target)


def stats_table(files: pa.Table, columns: list[n.Column]) -> pa.Table | None:
    """Each file's ``numRecords``, ``tightBounds`` and, per column (by physical path),
    ``minValues``/``maxValues`` (typed: :func:`_bound_type`) and ``nullCount``; ``None`` when the
    stats do not parse.

    Rows with a typed ``stats_parsed`` (read from a checkpoint written with
    ``delta.checkpoint.writeStatsAsStruct``) are taken from it; the others (files added by JSON
    commits after the checkpoint) from their ``stats`` JSON, in one pyarrow call. Both give the same
    result; ``stats_parsed`` is used only when its type holds every column asked for.
    """
    leaf = {}
    for c in columns:
        if _json_type(c.type) is not None:
            leaf.setdefault(c.physical_path or c.path, c.type)
    count = files.num_rows
    parsed = files.column(STATS_PARSED).combine_chunks() if STATS_PARSED in files.column_names else None
    use = None
    if parsed is not None and count and parsed.null_count < count and _covers(parsed.type, leaf):
        use = parsed.is_valid()
    if use is None:
        return _stats_from_json(files.column("stats"), leaf, count)
    try:
        from_parsed = _stats_from_parsed(parsed.filter(use), leaf)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _stats_from_json(files.column("stats"), leaf, count)
    if parsed.null_count == 0:
        return from_parsed
    rest = pc.invert(use)
    from_json = _stats_from_json(files.column("stats").filter(rest), leaf, count - len(from_parsed))
    if from_json is None:
        return None
    # back to file order: row i of the concatenation is file order[i]
    order = pa.concat_arrays([pc.indices_nonzero(use), pc.indices_nonzero(rest)])
    return pa.concat_tables([from_parsed, from_json]).take(pc.sort_indices(order))


def _covers(parsed_type: pa.DataType, leaf: dict) -> bool:
    """``stats_parsed`` of this type holds numRecords and min, max and nullCount of every leaf."""
    if not pa.types.is_struct(parsed_type) or parsed_type.get_field_index("numRecords") < 0:
        return False

    def has(top: str, path: tuple[str, ...]) -> bool:
        t = parsed_type
        for p in (top, *path):
            if not pa.types.is_struct(t) or t.get_field_index(p) < 0:
                return False
            t = t.field(p).type
        return True

    return all(has(top, p) for p in leaf for top in ("minValues", "maxValues", "nullCount"))


def _assemble(records, tight, mins: dict, maxs: dict, nulls: dict, count: int) -> pa.Table:
    cols = {"numRecords": records, "tightBounds": tight}
    if mins:
        cols["minValues"] = _nested_array(mins, count)
        cols["maxValues"] = _nested_array(maxs, count)
        cols["nullCount"] = _nested_array(nulls, count)
    return pa.table(cols)


def _bounds_or_null(arr: pa.Array | None, t, count: int) -> pa.Array:
    """Typed bounds; all null (unknown) when missing or when they do not convert."""
    if arr is not None:
        try:
            return _typed(arr, t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return pa.nulls(count, _bound_type(t))


def _stats_from_json(raw, leaf: dict, count: int) -> pa.Table | None:
    schema = [("numRecords", pa.int64()), ("tightBounds", pa.bool_())]
    if leaf:
        json_leaf = {p: _json_type(t) for p, t in leaf.items()}
        schema += [
            ("minValues", _nested(json_leaf)),
            ("maxValues", _nested(json_leaf)),
            ("nullCount", _nested({p: pa.int64() for p in leaf})),
        ]
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    raw = pc.fill_null(raw, "{}")
    raw = pc.if_else(pc.equal(pc.utf8_trim_whitespace(raw), ""), "{}", raw)
    data = "\n".join(raw.to_pylist()).encode()
    try:
        table = pajson.read_json(
            pa.py_buffer(data),
            parse_options=pajson.ParseOptions(explicit_schema=pa.schema(schema), unexpected_field_behavior="ignore"),
            read_options=pajson.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != count:
        return None
    table = table.combine_chunks()

    def top(name):
        return table.column(name).combine_chunks()

    mins, maxs, nulls = {}, {}, {}
    for p, t in leaf.items():
        mins[p] = _bounds_or_null(_leaf(top("minValues"), p), t, count)
        maxs[p] = _bounds_or_null(_leaf(top("maxValues"), p), t, count)
        nulls[p] = _leaf(top("nullCount"), p)
    return _assemble(top("numRecords"), top("tightBounds"), mins, maxs, nulls, count)


def _stats_from_parsed(parsed: pa.StructArray, leaf: dict) -> pa.Table:
    count = len(parsed)
    t = parsed.type

    def field(name, type_):
        arr = _leaf(parsed, (name,)) if t.get_field_index(name) >= 0 else None
        return pa.nulls(count, type_) if arr is None else pc.cast(arr, type_)

    mins, maxs, nulls = {}, {}, {}
    for p, ct in leaf.items():
        mins[p] = _typed(_leaf(parsed, ("minValues", *p)), ct)
        maxs[p] = _typed(_leaf(parsed, ("maxValues", *p)), ct)
        nulls[p] = pc.cast(_leaf(parsed, ("nullCount", *p)), pa.int64())
    return _assemble(field("numRecords", pa.int64()), field("tightBounds", pa.bool_()), mins, maxs, nulls, count)


def _get(table: pa.Table, top: str, path: tuple[str, ...]) -> pa.Array | None:
    if top not in table.column_names:
        return None
    return _leaf(table.column(top).combine_chunks(), path)


def _loosen_string_max(hi: pa.Array) -> pa.Array:
    """An upper bound from a string maximum that may be a truncated prefix.

    Writers truncate string stats to a prefix (32 characters by default; delta-spark counts UTF-16
    units) and delta-spark appends a tie-breaker (U+FFFD; U+10FFFF in some versions) that is not an
    upper bound when the cut character sorts above it (e.g. a supplementary character), and other
    writers may append nothing. A maximum that ends with a tie-breaker or has at least
    ``STRING_PREFIX_LENGTH`` characters is therefore read as "the true maximum starts with ``P``"
    (``P`` = the value without trailing tie-breakers), and the bound used is ``P`` with its last
    character incremented: greater than every string starting with ``P``. Unknown (null) when
    ``P`` is empty or ends with U+10FFFF. Shorter maxima without tie-breaker are exact.
    """
    breakers = "\ufffd\U0010ffff"
    length = pc.utf8_length(hi)
    prefix = pc.utf8_rtrim(hi, characters=breakers)
    maybe_cut = pc.or_(pc.greater_equal(length, STRING_PREFIX_LENGTH), pc.less(pc.utf8_length(prefix), length))
    if not pc.any(maybe_cut).as_py():
        return hi
    # the successor of each last character, computed once per distinct character
    last = pc.dictionary_encode(pc.utf8_slice_codeunits(prefix, -1))
    following = pa.array([_next_char(c) for c in last.dictionary.to_pylist()], hi.type)
    bound = pc.binary_join_element_wise(
        pc.utf8_slice_codeunits(prefix, 0, -1), following.take(last.indices), pa.scalar("", hi.type)
    )
    return pc.if_else(maybe_cut, bound, hi)


def _next_char(c: str) -> str | None:
    """The next Unicode scalar value after ``c`` (a one-character string); None after the last or for ``""``."""
    if not c or ord(c) >= 0x10FFFF:
        return None
    nxt = ord(c) + 1
    return chr(0xE000 if 0xD800 <= nxt <= 0xDFFF else nxt)


class _Stats:
    def __init__(self, files, schema, partition_columns, parts, ptable):
        self.files = files
        self.schema = schema
        self.parts = parts
        self.ptable = ptable
        self._table = None
        self._loaded = False
        self.n = files.num_rows

    def _stats(self, columns):
        if not self._loaded:
            self._table = stats_table(self.files, columns)
            self._loaded = True
        return self._table

    def prepare(self, expr: n.Expr) -> None:
        cols = [c for c in expr.column_nodes() if c.path[0].lower() not in self.parts]
        self._stats(cols)

    def is_partition(self, c: n.Column) -> bool:
        return len(c.path) == 1 and c.path[0].lower() in self.parts

    def bounds(self, c: n.Column) -> tuple[pa.Array | None, pa.Array | None]:
        """(min, max) per file, typed; None entries = unknown."""
        if self.is_partition(c):
            v = self.ptable.column(c.path[0]).combine_chunks()
            return v, v
        st = self._table
        if st is None or _collated(self.schema, c.path):
            return None, None  # a collated column's min/max may be in its collation's order, not bytes'
        path = c.physical_path or c.path
        lo, hi = _get(st, "minValues", path), _get(st, "maxValues", path)
        if hi is not None:
            if c.type.name == "string":
                hi = _loosen_string_max(hi)
            elif c.type.name in ("timestamp", "timestamp_ntz"):
                # stats keep milliseconds: a max written as .123 may stand for up to .123999
                hi = pc.add(hi, pa.scalar(999, pa.duration("us")))
            elif c.type.name in n.FRACTIONAL:
                hi = None
        if isinstance(c.type, n.DecimalType):  # float64 bounds of decimals: loosen by a rounding error
            lo, hi = _loosened(lo, hi)
        return lo, hi

    def null_count(self, c: n.Column) -> pa.Array | None:
        if self.is_partition(c):
            v = self.ptable.column(c.path[0]).combine_chunks()
            records = self.num_records()
            big = pa.scalar(2**62, pa.int64())
            return pc.if_else(pc.is_null(v), records if records is not None else big, 0)
        st = self._table
        if st is None:
            return None
        return _get(st, "nullCount", c.physical_path or c.path)

    def num_records(self) -> pa.Array | None:
        st = self._table
        if st is None:
            return None
        return st.column("numRecords").combine_chunks()

    def wide(self) -> pa.Array | None:
        """True for files whose stats say ``tightBounds: false`` (nullCount may then be wrong)."""
        st = self._table
        if st is None or "tightBounds" not in st.column_names:
            return None
        return pc.fill_null(pc.equal(st.column("tightBounds").combine_chunks(), False), False)


def _collated(schema: StructType | None, path: tuple[str, ...]) -> bool:
    """Whether the column at ``path`` (names, case-insensitive) is a string with a non-binary collation."""
    f = None
    t = schema
    for name in path:
        f = t.find(name) if isinstance(t, StructType) else None
        if f is None:
            return False
        t = f.type
    return f is not None and non_binary_collation(f) is not None


def _literal_for(target, lit: n.Literal):
    """The literal as a scalar of the type the column's bounds are compared in."""
    if isinstance(target, n.DecimalType) or target.name in n.FRACTIONAL:
        return pa.scalar(float(lit.value), pa.float64())
    return pa.scalar(lit.value, target.to_arrow())


def _widening(source, target) -> bool:
    """Whether a cast from ``source`` to ``target`` keeps order (never decreasing) and cannot fail:
    the casts the binder puts on a column to compare it with a wider literal (smallint with an int,
    int with a bigint or a decimal, float with a double, decimal(10,2) with decimal(12,2)). The
    bounds of the column's stats then bound the cast values too."""
    if not (n.is_numeric(source) and n.is_numeric(target)):
        return False
    if n.is_integral(source):
        if n.is_integral(target):
            return n.INTEGRAL.index(target.name) >= n.INTEGRAL.index(source.name)
        if isinstance(target, n.DecimalType):  # exact when the integer digits fit
            digits = {"byte": 3, "short": 5, "integer": 10, "long": 19}[source.name]
            return target.precision - target.scale >= digits
        return True  # to float / double: rounding is monotonic
    if isinstance(source, n.DecimalType):
        if isinstance(target, n.DecimalType):
            return target.scale >= source.scale and target.precision - target.scale >= source.precision - source.scale
        return target.name == "double"
    return source.name == "float" and target.name == "double"


def _loosened(lo, hi, eps: float = 1e-9) -> tuple:
    """float64 bounds widened by a relative rounding error (decimals compared as doubles)."""
    lo = pc.subtract(lo, pc.multiply(pc.add(pc.abs(lo), 1.0), eps)) if lo is not None else None
    hi = pc.add(hi, pc.multiply(pc.add(pc.abs(hi), 1.0), eps)) if hi is not None else None
    return lo, hi


def _stats_column(e: n.Expr) -> n.Column | None:
    """The column whose stats bound ``e``: a column, or a widening cast of one."""
    if isinstance(e, n.Column):
        return e
    if isinstance(e, n.Cast) and isinstance(e.child, n.Column) and _widening(e.child.type, e.type):
        return e.child
    return None


def _column_literal(e: n.Compare) -> tuple[n.Column, n.DataType, str, n.Literal] | None:
    """(column, the type compared in, op, literal) for ``column op literal`` in either order."""
    for side, other, op in ((e.left, e.right, e.op), (e.right, e.left, n.FLIPPED[e.op])):
        c = _stats_column(side)
        if c is not None and isinstance(other, n.Literal):
            return c, side.type, op, other
    return None


def _bounds_as(lo, hi, c: n.Column, target) -> tuple:
    """The column's (min, max) arrays in the type its values are compared in (``target``, from a
    widening cast): decimals as float64 (as for decimal columns, loosened by a rounding error)."""
    if target == c.type:
        return lo, hi
    if isinstance(target, n.DecimalType) or target.name in n.FRACTIONAL:
        # safe=False: a long beyond 2**53 rounds to the nearest double, as Spark's cast of each value does
        lo = pc.cast(lo, pa.float64(), safe=False) if lo is not None else None
        hi = pc.cast(hi, pa.float64(), safe=False) if hi is not None else None
        if isinstance(target, n.DecimalType) and not isinstance(c.type, n.DecimalType):
            lo, hi = _loosened(lo, hi)
        return lo, hi
    arrow = target.to_arrow()
    return (pc.cast(lo, arrow) if lo is not None else None), (pc.cast(hi, arrow) if hi is not None else None)


def _all(value: bool, count: int) -> pa.Array:
    return pa.repeat(pa.scalar(value), count)


def _negate(e: n.Expr) -> n.Expr | None:
    """An expression TRUE exactly where ``NOT e`` is TRUE, pushed down; None when unknown."""
    if isinstance(e, n.Not):
        return e.child
    if isinstance(e, n.And):
        items = [_negate(i) for i in e.items]
        return None if any(i is None for i in items) else n.Or(tuple(items))
    if isinstance(e, n.Or):
        items = [_negate(i) for i in e.items]
        return None if any(i is None for i in items) else n.And(tuple(items))
    if isinstance(e, n.Compare) and e.op in n.NEGATED:
        return n.Compare(n.NEGATED[e.op], e.left, e.right)
    if isinstance(e, n.IsNull):
        return n.IsNull(e.child, not e.negated)
    if isinstance(e, n.In):
        return n.In(e.child, e.values, not e.negated)
    return None


def _can_match(e: n.Expr, stats: _Stats) -> pa.Array | None:
    stats.prepare(e)
    return _rewrite(e, stats)


def _rewrite(e: n.Expr, s: _Stats) -> pa.Array | None:
    """True/NULL where a file may hold a row making ``e`` TRUE; False where it provably cannot."""
    if isinstance(e, n.And):
        out = None
        for item in e.items:
            r = _rewrite(item, s)
            if r is not None:
                r = pc.fill_null(r, True)
                out = r if out is None else pc.and_(out, r)
        return out
    if isinstance(e, n.Or):
        out = None
        for item in e.items:
            r = _rewrite(item, s)
            if r is None:
                return None
            r = pc.fill_null(r, True)
            out = r if out is None else pc.or_(out, r)
        return out
    if isinstance(e, n.Not):
        pushed = _negate(e.child)
        return _rewrite(pushed, s) if pushed is not None else None
    if isinstance(e, n.Literal):
        return _all(e.value is True, s.n)
    if isinstance(e, n.Compare):
        return _compare(e, s)
    if isinstance(e, n.In) and _stats_column(e.child) is not None and not e.negated:
        return _in_set(e, s)
    if isinstance(e, n.IsNull) and isinstance(e.child, n.Column):
        nulls = s.null_count(e.child)
        if nulls is None:
            return None
        if not e.negated:
            return pc.greater(nulls, 0)
        records = s.num_records()
        if records is None:
            return None
        some_value = pc.less(nulls, records)
        wide = s.wide()  # nullCount of wide stats may be wrong: never "all null" from it
        return some_value if wide is None else pc.or_kleene(some_value, wide)
    return None


def _in_set(e: n.In, s: _Stats) -> pa.Array | None:
    """``x IN (v1, ..., vk)`` as a set: a file may match when one of the values lies within its
    ``[min, max]`` (what the OR of the k equalities says), found by a binary search of the sorted
    values per file, so a 5,000-value list costs about what a 50-value one does."""
    present = [v.value for v in e.values if v.value is not None]
    if not present:
        return _all(False, s.n)
    c, target = _stats_column(e.child), e.child.type
    floating = isinstance(target, n.DecimalType) or target.name in n.FRACTIONAL
    if floating and any(v != v for v in present):
        return None  # NaN literals: leave to the data (as for one equality)
    try:
        values = pa.array([float(v) for v in present] if floating else present, _literal_for(target, e.values[0]).type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    lo, hi = _bounds_as(*s.bounds(c), c, target)
    if lo is None and hi is None:
        return None
    keys = _sortable(pc.unique(values))
    if keys is None:
        return None
    keys = np.sort(keys[0])
    if lo is None:
        first = np.zeros(s.n, dtype=np.int64)
    else:
        lo_keys = _sortable(lo)
        if lo_keys is None:
            return None
        # the smallest value at or above each file's min (a file without a min: the smallest value)
        first = np.where(lo_keys[1], np.searchsorted(keys, lo_keys[0], side="left"), 0)
    found = first < len(keys)
    if hi is not None:
        hi_keys = _sortable(hi)
        if hi_keys is None:
            return None
        candidate = keys[np.minimum(first, len(keys) - 1)]
        with np.errstate(invalid="ignore"):
            found &= ~hi_keys[1] | (candidate <= hi_keys[0])
    return pa.array(found, pa.bool_())


def _sortable(arr) -> tuple[np.ndarray, np.ndarray] | None:
    """``arr``'s values as a numpy array ordered as Spark compares them (strings by code point, NaN
    last), and where they are valid; None for a type without such an order here."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    valid = np.asarray(pc.is_valid(arr).to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.array([v if v is not None else "" for v in arr.to_pylist()], dtype=object), valid
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_boolean(t):
        arr = arr.cast(pa.int64()) if not pa.types.is_date(t) else arr.cast(pa.int32()).cast(pa.int64())
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return None
    zero = pa.scalar(0, arr.type)
    return np.asarray(pc.fill_null(arr, zero).to_numpy(zero_copy_only=False)), valid


def _compare(e: n.Compare, s: _Stats) -> pa.Array | None:
    cl = _column_literal(e)
    if cl is None:
        return None
    c, target, op, lit = cl
    if lit.value is None:
        return None if op == "<=>" else _all(False, s.n)
    if isinstance(lit.value, float) and lit.value != lit.value:
        return None  # NaN literals: leave to the data
    lo, hi = _bounds_as(*s.bounds(c), c, target)
    v = _literal_for(target, lit)
    floating = isinstance(target, n.PrimitiveType) and target.name in n.FRACTIONAL

    def cmp(op2, a):
        return None if a is None else compare(op2, a, v, floating)

    if op in ("=", "<=>"):
        parts = [x for x in (cmp("<=", lo), cmp(">=", hi)) if x is not None]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pc.and_kleene(parts[0], parts[1])
    if op == "<":
        return cmp("<", lo)
    if op == "<=":
        return cmp("<=", lo)
    if op == ">":
        return cmp(">", hi)
    if op == ">=":
        return cmp(">=", hi)
    if op == "!=":
        if lo is None or hi is None:
            return None
        both = pc.and_kleene(compare("=", lo, v, floating), compare("=", hi, v, floating))
        return pc.invert(both)
    return None


_ROW_GROUP_STAT_TYPES = ("byte", "short", "integer", "long", "float", "double", "string", "boolean", "timestamp")


def row_groups_may_match(
    metadata, predicate: n.Expr, schema: StructType, partition_columns: list[str], partition_values: dict
) -> list[bool]:
    """One boolean per row group of a parquet file (``pq.FileMetaData``): False where the group's
    min/max/null-count statistics rule out every row for ``predicate`` (the same rewrite as for
    files). Top-level columns of simple types only; anything else keeps the group."""
    groups = metadata.num_row_groups
    if groups == 0:
        return []
    parts = {c.lower() for c in partition_columns}
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    mins, maxs, nulls, leaf = {}, {}, {}, {}
    for c in predicate.column_nodes():
        if len(c.path) != 1 or c.path[0].lower() in parts:
            continue
        if c.type.name not in _ROW_GROUP_STAT_TYPES or c.path in leaf or _collated(schema, c.path):
            continue
        physical = (c.physical_path or c.path)[0]
        if physical not in names:
            continue
        i = names.index(physical)
        lo, hi, nc = [], [], []
        for g in range(groups):
            st = metadata.row_group(g).column(i).statistics
            ok = st is not None and st.has_min_max
            lo.append(st.min if ok else None)
            hi.append(st.max if ok else None)
            nc.append(st.null_count if st is not None and st.has_null_count else None)
        try:
            t = c.type.to_arrow()
            mins[physical], maxs[physical] = pa.array(lo, t), pa.array(hi, t)
            nulls[physical] = pa.array(nc, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            continue
        leaf[c.path] = physical
    fields = [("numRecords", pa.array([metadata.row_group(g).num_rows for g in range(groups)], pa.int64()))]
    if leaf:
        fields += [
            ("minValues", pa.StructArray.from_arrays(list(mins.values()), names=list(mins))),
            ("maxValues", pa.StructArray.from_arrays(list(maxs.values()), names=list(maxs))),
            ("nullCount", pa.StructArray.from_arrays(list(nulls.values()), names=list(nulls))),
        ]
    table = pa.table(dict(fields))
    ptable = None
    if partition_columns:
        files = pa.table(
            {"partition_values": pa.array([list(partition_values.items())] * groups, pa.map_(pa.string(), pa.string()))}
        )
        ptable = partition_table(files, schema, partition_columns)
    s = _Stats(table, schema, partition_columns, parts, ptable)
    s._table, s._loaded = table, True
    keep = pa.repeat(pa.scalar(True), groups)
    part_conjuncts = [c for c in n.conjuncts(predicate) if c.columns() and is_partition_only(c, partition_columns)]
    if part_conjuncts and ptable is not None:
        keep = pc.fill_null(evaluate(n.and_all(part_conjuncts), ptable), False)
    may = _rewrite(predicate, s)
    if may is not None:
        keep = pc.and_(keep, pc.fill_null(may, True))
    return keep.to_pylist()
