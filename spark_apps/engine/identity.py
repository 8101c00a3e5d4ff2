"""Identity columns (Delta's ``identityColumns`` feature): ``GENERATED [ALWAYS | BY DEFAULT] AS
IDENTITY`` columns, whose values the writer assigns.

A column is an identity column when its metadata holds ``delta.identity.start`` and
``delta.identity.step`` (never 0); ``delta.identity.highWaterMark`` is the furthest value assigned so
far (in the step's direction) and ``delta.identity.allowExplicitInsert`` says whether a write may give
values itself (BY DEFAULT) or not (ALWAYS).

* **Assigned in the core writer** (:class:`..writer.TableWriter`), where every write passes: a NULL in
  the column (the data left it out, or an insert gave none) gets the next value of that writer. Writers
  of one command run in parallel without talking to each other, so each takes its own range: the
  ``k``-th value of writer (task) ``t`` is ``base + step * (1 + t * STRIDE + k)`` with ``base`` the
  high water mark (``start - step`` before the first value). Values are unique and move in the step's
  direction; they are consecutive within one writer, not across writers (as in Delta).
* **The high water mark advances in the same commit** (:func:`advanced`, called by the command
  skeleton): from the files the commit adds, their stats' max (min for a negative step). A concurrent
  command that assigned values too changed the same metadata: the later commit conflicts, as in Delta,
  so two commands never assign the same values.
* **ALWAYS refuses given values**: a write whose data has the column, an UPDATE or MERGE that sets it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidArgumentError

__all__ = [
    "START",
    "STEP",
    "HIGH_WATER_MARK",
    "ALLOW_EXPLICIT",
    "STRIDE",
    "Identity",
    "identities",
    "refuse_given",
    "refuse_updates",
    "fill",
    "advanced",
]

START = "delta.identity.start"
STEP = "delta.identity.step"
HIGH_WATER_MARK = "delta.identity.highWaterMark"
ALLOW_EXPLICIT = "delta.identity.allowExplicitInsert"
#: values a writer may assign before its range meets the next writer's
STRIDE = 1 << 32


@dataclass(frozen=True)
class Identity:
    column: str
    start: int
    step: int
    high: int | None
    explicit: bool

    @property
    def base(self) -> int:
        return self.high if self.high is not None else self.start - self.step

    def values(self, task_id: int, first: int, count: int) -> pa.Array:
        """The ``count`` values of writer ``task_id`` from its ``first``-th on (refused, not wrapped,
        past the range of BIGINT)."""
        import numpy as np

        low = self.base + self.step * (1 + task_id * STRIDE + first)  # Python ints: exact
        high = low + self.step * (count - 1)
        if not (-(2**63) <= min(low, high) and max(low, high) < 2**63):
            raise InvalidArgumentError(
                f"Identity column '{self.column}' has run out of values",
                f"the next values ({low} ... {high}) are outside BIGINT's range",
                "recreate the column with a smaller step, or write in fewer tasks",
            )
        return pa.array(np.arange(count, dtype=np.int64) * np.int64(self.step) + np.int64(low), pa.int64())


def identities(schema) -> list[Identity]:
    """The identity columns of a schema (top level, as Delta allows)."""
    out = []
    for f in schema.fields:
        md = f.metadata or {}
        if START not in md and STEP not in md:
            continue
        try:
            start, step = int(md.get(START, 1)), int(md.get(STEP, 1))
            high = int(md[HIGH_WATER_MARK]) if md.get(HIGH_WATER_MARK) is not None else None
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"Identity column '{f.name}' has unreadable metadata", json.dumps(md), "repair the schema"
            ) from None
        if step == 0 or f.type.name != "long":
            raise InvalidArgumentError(
                f"Identity column '{f.name}' is not a BIGINT with a non-zero step",
                f"its type is {f.type.simple_string()}, its step {step}",
                "recreate the column as BIGINT GENERATED ... AS IDENTITY with a non-zero step",
            )
        explicit = str(md.get(ALLOW_EXPLICIT, "false")).lower() == "true"
        out.append(Identity(f.name, start, step, high, explicit))
    return out


def refuse_given(schema, given) -> None:
    """Refuse values given for a GENERATED ALWAYS identity column (``given``: column names a write
    or a command sets)."""
    low = {str(c).lower() for c in given}
    for i in identities(schema):
        if not i.explicit and i.column.lower() in low:
            raise InvalidArgumentError(
                f"Cannot give values for identity column '{i.column}'",
                f"it is GENERATED ALWAYS AS IDENTITY: the table assigns its values ({ALLOW_EXPLICIT} is false)",
                f"leave '{i.column}' out of the data or the assignments",
            )


def refuse_updates(schema, assigned) -> None:
    """An identity column's values are the table's: no UPDATE or MERGE sets them (as in Delta)."""
    low = {str(c).lower() for c in assigned}
    hit = [i.column for i in identities(schema) if i.column.lower() in low]
    if hit:
        raise InvalidArgumentError(
            f"Cannot update identity column '{hit[0]}'",
            "its values are assigned by the table when rows are written",
            f"leave '{hit[0]}' out of the assignments",
        )


def fill(ids: list[Identity], batch: pa.RecordBatch, task_id: int, counters: dict) -> pa.RecordBatch:
    """``batch`` with the NULLs of its identity columns assigned (``counters``: values this writer
    assigned so far, per column)."""
    for ident in ids:
        i = batch.schema.get_field_index(ident.column)
        col = batch.column(i)
        nulls = col.null_count
        if not nulls:
            continue
        first = counters.get(ident.column, 0)
        counters[ident.column] = first + nulls
        new = ident.values(task_id, first, nulls)
        if nulls == len(col):
            col = new
        else:
            col = pc.replace_with_mask(col.cast(pa.int64()), pc.is_null(col), new)
        batch = batch.set_column(i, batch.schema.field(i), col.cast(batch.schema.field(i).type))
    return batch


def kept_high_water_marks(older, current):
    """``older`` metadata (RESTORE's) with ``current``'s identity high water marks: values assigned
    since are never assigned again."""
    import dataclasses

    from .schema import StructField, StructType, parse_schema

    marks = {i.column: i.high for i in identities(parse_schema(current.schema_string)) if i.high is not None}
    if not marks:
        return older
    schema = parse_schema(older.schema_string)
    fields = tuple(
        StructField(f.name, f.type, f.nullable, {**f.metadata, HIGH_WATER_MARK: marks[f.name]})
        if f.name in marks and (START in f.metadata or STEP in f.metadata)
        else f
        for f in schema.fields
    )
    return dataclasses.replace(older, schema_string=StructType(fields).to_json_string())


def advanced(metadata, adds: list):
    """``metadata`` with each identity column's high water mark moved to the furthest value in the
    ``adds`` (their stats), or None when no mark moves."""
    import dataclasses

    from .schema import StructField, StructType, parse_schema

    schema = parse_schema(metadata.schema_string)
    ids = identities(schema)
    if not ids or not adds:
        return None
    moved = {}
    for ident in ids:
        f = schema.find(ident.column)
        key = f.physical_name
        best = ident.high
        for a in adds:
            stats = json.loads(a.stats) if getattr(a, "stats", None) else None
            if stats is None or not stats.get("numRecords"):
                continue
            bound = (stats.get("maxValues" if ident.step > 0 else "minValues") or {}).get(key)
            nulls = (stats.get("nullCount") or {}).get(key)
            if bound is None:
                if nulls is not None and nulls == stats["numRecords"]:
                    continue
                raise InvalidArgumentError(
                    f"Cannot advance identity column '{ident.column}'",
                    f"the file '{a.path}' has no statistics for it",
                    "keep the column among the columns with statistics (delta.dataSkippingNumIndexedCols)",
                )
            if best is None or (bound > best if ident.step > 0 else bound < best):
                best = int(bound)
        if best != ident.high:
            moved[ident.column] = best
    if not moved:
        return None
    fields = tuple(
        StructField(f.name, f.type, f.nullable, {**f.metadata, HIGH_WATER_MARK: moved[f.name]})
        if f.name in moved
        else f
        for f in schema.fields
    )
    return dataclasses.replace(metadata, schema_string=StructType(fields).to_json_string())
