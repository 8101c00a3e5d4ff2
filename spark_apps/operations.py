"""The operations registry: every operation of the apps, declared once.

Each :class:`Operation` says what the CLI parser, the app's dispatch, the Airflow hook and the
operators need to know, so none of them lists operations or arguments by hand:

* ``name``: the CLI name (``python -m airflow_delta_provider_apps delete ...``) and the operator's ``operation``;
* ``args``: its own arguments (:class:`Arg`: kind, default, choices, help, whether Airflow templates
  it); the common ones (table, result location, idempotent-write identity) are :data:`COMMON_ARGS`
  and :data:`COMMIT_ARGS`;
* ``command``: ``"module:function"`` of the engine command it runs (``(snapshot, **arguments,
  [plane=], identity=) -> CommandResult``; ``(table_uri, ...)`` for one that opens no snapshot:
  CREATE TABLE, DESCRIBE HISTORY), run by the generic runner
  (:mod:`airflow_delta_provider_apps.dispatch`) with the operation's typed parameters
  (:attr:`Operation.parameters`, a dataclass made from ``args``) and its transaction identity
  (:class:`TxnIdentity`); imported only when the operation runs;
* ``source``: it reads a source (:data:`SOURCE_SPEC`: location, format, options, query), which the
  generic runner reads (:mod:`airflow_delta_provider_apps.sources`) and hands the command as its
  ``source`` argument (with a change feed's ``watermark``);
* ``needs_spark``: whether it needs a SparkSession when run outside spark-submit (a callable of the
  parameters when it depends on them, e.g. CREATE TABLE with or without a source);
* ``metrics``: the Delta metric names its result carries;
* ``checks``: pure checks of the parameters (raise :class:`ValueError` with the problem, in the
  caller's words): run by the operator at DAG parse time for values without templates, after
  rendering in ``execute()`` before anything is submitted, and by the CLI.

Adding an operation: its command module in the engine, one :class:`Operation` here naming it, and an
operator class naming the operation if it gets one. This module imports nothing heavy (no engine,
no pyspark): the Airflow side reads it at DAG parse time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .engine import merge as merge_clauses  # the clause rules only (its names load on first use)
from .engine.commit_identity import TxnIdentity

__all__ = [
    "Arg",
    "Operation",
    "OPERATIONS",
    "COMMON_ARGS",
    "COMMIT_ARGS",
    "SOURCE_FORMATS",
    "SOURCE_SPEC",
    "get",
    "coerce",
    "check_params",
    "TxnIdentity",
]

SOURCE_FORMATS = ("parquet", "csv", "json", "delta", "orc")
KINDS = ("str", "int", "version", "float", "hours", "bool", "list", "dict", "schema", "updates", "clauses")


@dataclass(frozen=True)
class Arg:
    """One argument of an operation.

    :param name: the parameter name (Python keyword, ``--spec-json`` key, operator attribute)
    :param kind: ``str``, ``int``, ``version`` (a table version: the engine's ``parse_version``),
        ``float``, ``hours`` (a retention: the engine's ``parse_retention_hours``), ``bool``, ``list``
        (of strings; a comma-separated string is accepted), ``dict`` (strings to strings), ``schema``
        (DDL text or schema JSON, dict accepted),
        ``updates`` (``{column: expression}``; CLI ``--set col=EXPR``), ``clauses`` (MERGE's WHEN
        clauses: a list of ``{"when", "then", "condition"?, "set"?, "values"?}`` dicts or its JSON)
    :param default: value when not given
    :param choices: allowed values (case-sensitive)
    :param templated: Airflow renders it (a template field of the operator)
    :param flag: CLI flag (default ``--`` + name with dashes)
    :param help: one line for ``--help`` and the docs
    :param operator: an argument of the operators (False: the operator sets it itself, e.g. ``rerun``
        from its ``on_rerun``)
    :param sql: it holds Spark SQL, named as the engine's parser names it (``predicate``, ``condition``,
        ``merge condition``, ``expression``; ``schema``: a DDL or JSON schema): each literal text is
        parsed by the engine's parser in :func:`check_params` (an ``updates`` argument's values are
        expressions; a ``clauses`` argument's conditions are conditions, its ``set`` and ``values``
        expressions)
    """

    name: str
    kind: str = "str"
    default: Any = None
    choices: tuple = ()
    templated: bool = True
    flag: str | None = None
    help: str = ""
    operator: bool = True
    sql: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown argument kind {self.kind!r}")

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


#: the Python type of each argument kind, for the parameters dataclass (None: not given)
_TYPES = {
    "str": "str | None",
    "int": "int | None",
    "version": "int | None",
    "float": "float | None",
    "hours": "float | None",
    "bool": "bool",
    "list": "list[str] | None",
    "dict": "dict[str, str] | None",
    "schema": "str | None",
    "updates": "dict[str, str] | None",
    "clauses": "list[dict] | None",
}


@dataclass(frozen=True)
class Operation:
    """One operation (see the module docstring).

    :param command: ``"module:function"`` of the engine command it runs: ``(snapshot, **arguments,
        [plane=], identity=) -> CommandResult``, each of ``args`` passed by its name (``plane`` when
        the function takes one; ``table_uri`` instead of ``snapshot`` when it opens none), run by the
        generic runner (:func:`airflow_delta_provider_apps.dispatch.run_command`)
    """

    name: str
    delta_operation: str
    help: str
    command: str
    args: tuple[Arg, ...] = ()
    #: it reads a source (the arguments :data:`SOURCE_SPEC`), handed to the command as ``source``:
    #: a DataFrame, or Arrow data read in this process (no Spark, or :attr:`small_source_as_arrow`)
    source: bool = False
    #: a small file or Delta source is read in this process as Arrow, no Spark job (a MERGE's: the
    #: plane then merges it file by file)
    small_source_as_arrow: bool = False
    metrics: tuple[str, ...] = ()
    needs_spark: bool | Callable[[Mapping], bool] = False
    commits: bool = True  # takes the idempotent-write identity (app_id, app_version, user_metadata)
    checks: tuple[Callable[[Mapping], None], ...] = ()
    #: it can also run without Spark, in one process (``execution="local"``), even where the app uses
    #: Spark when it has it (DELETE and UPDATE rewrite files with a thread pool instead of Spark tasks)
    in_process: bool = False
    #: its commit may change the table's schema (``schema_changes``): a catalog entry of the table
    #: is synced after it
    changes_schema: bool = False
    #: a check of the table's log (I/O, unlike ``checks``) that settles these parameters without Spark:
    #: then the operator runs the operation in the worker and the CLI starts no session
    settled_by_log: Callable[[Mapping], bool] | None = None

    def spark_needed(self, params: Mapping) -> bool:
        return self.needs_spark(params) if callable(self.needs_spark) else bool(self.needs_spark)

    def spark_required(self, params: Mapping) -> bool:
        """Whether these parameters need a SparkSession: they read or write data
        (``needs_spark``) and the table's log does not settle them (``settled_by_log``). The one rule
        for where an operation runs: the operators' ``execution="auto"`` runs it in the worker when
        False, and the CLI then starts no session outside spark-submit."""
        return self.spark_needed(params) and not self.settled(params)

    def runs_in_process(self, params: Mapping) -> bool:
        """Whether these parameters can run without Spark (``execution="local"``)."""
        return self.in_process or not self.spark_needed(params)

    def settled(self, params: Mapping) -> bool:
        """Whether the table's log settles these parameters without Spark (``settled_by_log``); False
        when it cannot be read from here (the app then decides)."""
        if self.settled_by_log is None:
            return False
        try:
            return bool(self.settled_by_log(params))
        except Exception:  # e.g. a store this process has no credentials for
            return False

    @property
    def operator_args(self) -> tuple[Arg, ...]:
        """The operation's own arguments that its operator takes."""
        return tuple(a for a in self.args if a.operator)

    @property
    def all_args(self) -> tuple[Arg, ...]:
        return self.args + (COMMIT_ARGS if self.commits else ())

    @property
    def template_fields(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.all_args if a.templated)

    def arg(self, name: str) -> Arg | None:
        return next((a for a in self.all_args if a.name == name), None)

    def defaults(self) -> dict:
        return {a.name: a.default for a in self.all_args}

    @property
    def parameters(self) -> type:
        """The operation's typed parameters: a frozen dataclass of its own arguments (types, defaults,
        one ``:param:`` line each from their help) whose construction coerces and checks them as the
        operators do at DAG parse time (ValueError naming the parameter)."""
        made = _PARAMETERS.get(self)
        if made is None:
            made = _PARAMETERS[self] = _parameters_class(self)
        return made

    def identity(self, params: Mapping) -> TxnIdentity:
        """The transaction identity among a run's ``params`` (its :data:`COMMIT_ARGS`; the other keys
        ignored), checked as one value; empty for an operation that does not commit."""
        if not self.commits:
            return TxnIdentity()
        return TxnIdentity(params.get("app_id"), params.get("app_version"), params.get("user_metadata"))


_PARAMETERS: dict[Operation, type] = {}


def _parameters_class(op: Operation) -> type:
    import dataclasses

    def __post_init__(self):
        values = {a.name: getattr(self, a.name) for a in op.args}
        for name, value in check_params(op, values, own_only=True).items():
            object.__setattr__(self, name, value)

    fields = [(a.name, _TYPES[a.kind], dataclasses.field(default=a.default)) for a in op.args]
    name = "".join(w.capitalize() for w in op.name.replace("-", "_").split("_")) + "Parameters"

    def checked(cls, values: Mapping):
        """The parameters from ``values`` that :func:`check_params` returned (coerced and checked
        already: not again)."""
        made = object.__new__(cls)
        for a in op.args:
            object.__setattr__(made, a.name, a.default if values.get(a.name) is None else values[a.name])
        return made

    namespace = {"__post_init__": __post_init__, "checked": classmethod(checked)}
    cls = dataclasses.make_dataclass(name, fields, frozen=True, namespace=namespace)
    cls.__doc__ = f"The parameters of {op.delta_operation} ({op.help}).\n\n" + "\n".join(
        f":param {a.name}: {a.help}" for a in op.args
    )
    cls.__module__ = __name__
    return cls


COMMON_ARGS = (
    Arg("table_uri", help="the Delta table's location (absolute path or URI)"),
    Arg("result_uri", templated=False, help="also write the result JSON to this location"),
    Arg("master", templated=False, help="Spark master outside spark-submit (default local[*])"),
    Arg(
        "storage_env_file",
        templated=False,
        help="name of a JSON file of object-store settings (environment variables) shipped with --files "
        "in cluster deploy mode: loaded into the driver's environment, then deleted",
    ),
    Arg(
        "catalog",
        templated=False,
        help="the catalog entry this run syncs after its commit, in the app's own Spark session, as a JSON "
        'object {"kind", "table", "options", "always"} (engine.catalog.sync_in_session; the operators '
        "pass it for a Hive metastore): the result then carries catalog",
    ),
)
COMMIT_ARGS = (
    Arg("app_id", help="idempotent-write application id (with app_version)"),
    Arg("app_version", "int", help="idempotent-write version: a version already committed for app_id is skipped"),
    Arg("user_metadata", help="commitInfo.userMetadata"),
    Arg(
        "airflow_task",
        "dict",
        templated=False,
        help="the committing Airflow task instance (dag_id, task_id, run_id, map_index, try_number), "
        "recorded as commitInfo.airflow",
    ),
)


# --------------------------------------------------------------------------------------------------
# value handling shared by the CLI, the hook and the operators


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def coerce(arg: Arg, value: Any) -> Any:
    """``value`` in the form the apps take; ValueError (naming the parameter) when it cannot be."""
    if value is None:
        return None
    kind = arg.kind
    if kind in ("version", "hours"):  # the engine's one rule for each; imported only when used
        from .engine.errors import InvalidArgumentError
        from .engine.values import parse_retention_hours, parse_version

        try:
            return (parse_version if kind == "version" else parse_retention_hours)(value, arg.name)
        except InvalidArgumentError as e:  # the caller adds its own "Fix:"
            raise ValueError(f"{e.problem}: {e.cause}; {e.fix}") from None
    if kind == "int":
        if isinstance(value, bool):
            raise ValueError(f"{arg.name}={value!r} is not an integer")
        try:
            return int(str(value).strip()) if not isinstance(value, int) else value
        except ValueError:
            raise ValueError(f"{arg.name}={value!r} is not an integer") from None
    if kind == "float":
        if isinstance(value, bool):
            raise ValueError(f"{arg.name}={value!r} is not a number")
        try:
            return float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
        except ValueError:
            raise ValueError(f"{arg.name}={value!r} is not a number") from None
    if kind == "bool":
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "y")
        return bool(value)
    if kind == "list":
        if isinstance(value, str):
            return [c.strip() for c in value.split(",") if c.strip()]
        if isinstance(value, (list, tuple)):
            return [str(c) for c in value]
        raise ValueError(f"{arg.name} must be a list of names, not {type(value).__name__}")
    if kind in ("dict", "updates"):
        if isinstance(value, str) and value.strip().startswith("{"):
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError(f"{arg.name} is not a valid JSON object: {value[:200]!r}") from None
        if not isinstance(value, Mapping):
            raise ValueError(f"{arg.name} must be a mapping of strings, not {type(value).__name__}")
        return {str(k): str(v) for k, v in value.items()}
    if kind == "schema":
        return json.dumps(value) if isinstance(value, Mapping) else str(value)
    if kind == "clauses":
        return _clauses(arg, value)
    if arg.choices and str(value) not in arg.choices:
        raise ValueError(f"{arg.name} must be one of {', '.join(arg.choices)}, not {value!r}")
    return str(value)


def _clauses(arg: Arg, value: Any) -> list[dict]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"{arg.name} is not valid JSON: {value[:200]!r}") from None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{arg.name} must be a list of clause dicts, not {type(value).__name__}")
    out = []
    for i, c in enumerate(value):
        if not isinstance(c, Mapping):
            raise ValueError(f"{arg.name}[{i}] must be a dict such as {{'when': 'matched', 'then': 'update_all'}}")
        unknown = set(c) - {"when", "then", "condition", "set", "values"}
        when, then = c.get("when"), c.get("then")
        problem = merge_clauses.clause_problem(when, then)
        if unknown or problem:
            why = problem or f"unknown keys {sorted(unknown)}"
            raise ValueError(f"{arg.name}[{i}] = {dict(c)!r}: {why} (keys: when, then, condition, set, values)")
        needs = merge_clauses.NEEDS.get(then)
        if needs and not isinstance(c.get(needs), Mapping):
            raise ValueError(f"{arg.name}[{i}]: then={then!r} needs {needs}={{column: expression}}")
        out.append({k: (dict(v) if isinstance(v, Mapping) else v) for k, v in c.items()})
    return out


#: arguments holding a condition: None means every row, blank text is refused (engine.expr.check_text)
CONDITION_ARGS = ("predicate", "replace_where")


def check_params(op: Operation, params: Mapping, *, skip_templates: bool = False, own_only: bool = False) -> dict:
    """Coerce every known argument and run the operation's checks; returns the coerced params.

    :param skip_templates: leave values holding ``{{ ... }}`` alone (DAG parse time)
    :param own_only: only the operation's own arguments (not the commit identity)
    """
    out = dict(params)
    for arg in op.args if own_only else op.all_args:
        value = out.get(arg.name)
        if skip_templates and (is_template(value) or holds_template(value)):
            continue
        out[arg.name] = coerce(arg, value)
        _check_sql(arg, out[arg.name], skip_templates)
        _check_properties(arg, out[arg.name])
    if not skip_templates or not any(is_template(v) or holds_template(v) for v in out.values()):
        for check in (_conditions_not_blank, *op.checks):
            check(out)
    return out


def _conditions_not_blank(p: Mapping) -> None:
    # the engine's own rule and words; imported here because the provider reads this registry at DAG
    # parse time and must not pay for the engine's imports there
    from .engine.errors import InvalidArgumentError
    from .engine.expr.parse import check_text

    for name in CONDITION_ARGS:
        if p.get(name) is not None:
            try:
                check_text(p[name], "predicate")
            except InvalidArgumentError as e:
                raise ValueError(f"{name}: {e.one_line()}") from None


def _sql_texts(arg: Arg, value: Any) -> Iterator[tuple[str, str, Any]]:
    """``(where, what, text)`` of each Spark SQL text in an argument's coerced value (see ``Arg.sql``)."""
    if not arg.sql or value is None:
        return
    if arg.kind == "updates":
        yield from ((f"{arg.name}[{col!r}]", "expression", text) for col, text in value.items())
    elif arg.kind == "clauses":
        for i, clause in enumerate(value):
            if clause.get("condition") is not None:
                yield f"{arg.name}[{i}].condition", arg.sql, clause["condition"]
            for key in ("set", "values"):
                texts = clause.get(key) or {}
                yield from ((f"{arg.name}[{i}].{key}[{col!r}]", "expression", t) for col, t in texts.items())
    else:
        yield arg.name, arg.sql, value


def _check_sql(arg: Arg, value: Any, skip_templates: bool) -> None:
    """Each Spark SQL text of the argument parsed by the engine's own parser (a schema whole; a
    condition or expression for syntax, nesting and subqueries: what is knowable without the table's
    schema, which the engine binds it to when it runs): a literal one at DAG parse time, a templated
    one after rendering. Blank text is left to ``_conditions_not_blank`` and the operations' checks,
    which say what an empty one means."""
    texts = [(w, what, str(t)) for w, what, t in _sql_texts(arg, value) if t is not None]
    texts = [t for t in texts if t[2].strip() and not (skip_templates and is_template(t[2]))]
    if not texts:
        return
    # the parser (and sqlglot) are imported only when there is literal SQL to check
    from .engine.defaults import check_defaults
    from .engine.errors import DeltaError
    from .engine.expr.parse import check_syntax
    from .engine.schema import parse_schema

    for where, what, text in texts:
        try:
            # a schema's DEFAULTs checked against their columns' types (DDL and JSON forms alike)
            check_defaults(parse_schema(text)) if what == "schema" else check_syntax(text, what)
        except DeltaError as e:
            raise ValueError(f"{where}: {e.one_line()}") from None


def _check_properties(arg: Arg, value: Any) -> None:
    """Literal table properties checked as the engine checks them before a commit (unknown ``delta.*``
    keys, ones the engine alone sets, values that do not parse): at DAG parse time, not after the
    task started; templated ones after rendering."""
    if arg.name != "properties" or not isinstance(value, Mapping) or not value:
        return
    from .engine.commands.create_table import validate_properties
    from .engine.errors import DeltaError

    try:
        validate_properties(dict(value))
    except DeltaError as e:
        raise ValueError(f"properties: {e.one_line()}") from None


def holds_template(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(is_template(k) or is_template(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(is_template(v) for v in value)
    return False


# --------------------------------------------------------------------------------------------------
# checks (pure: no I/O)


def _schema_or_source(p: Mapping) -> None:
    if p.get("schema") is None and not p.get("source"):
        raise ValueError("give a schema, or a source to create the table from (schema= or source=)")


def _source_needs_format(p: Mapping) -> None:
    if p.get("source") and p.get("source_format") not in SOURCE_FORMATS:
        raise ValueError(f"source_format must be one of {', '.join(SOURCE_FORMATS)}, not {p.get('source_format')!r}")


def _column_named(p: Mapping) -> None:
    if not p.get("column") or not str(p.get("column")).strip():
        raise ValueError("column is required: the name of a top-level column")


def _widening_type(p: Mapping) -> None:
    t = p.get("new_type")
    if not t or not str(t).strip():
        raise ValueError("new_type is required: the column's wider type, e.g. BIGINT or DECIMAL(12,2)")
    from .engine.errors import DeltaError
    from .engine.schema.ddl import parse_type

    try:
        parse_type(str(t))
    except DeltaError as e:
        raise ValueError(f"new_type={t!r}: {e.problem}; {e.fix}") from None


def _new_name_given(p: Mapping) -> None:
    if not p.get("new_name") or not str(p.get("new_name")).strip():
        raise ValueError("new_name is required: the column's new name")


def _constraint_named(p: Mapping) -> None:
    if not p.get("name") or not str(p.get("name")).strip():
        raise ValueError("name is required: the constraint's name, e.g. positive_amount")


def _constraint_expression(p: Mapping) -> None:
    if not p.get("expression") or not str(p.get("expression")).strip():
        raise ValueError("expression is required: the condition every row must satisfy, e.g. amount >= 0")


def _partitioned_or_clustered(p: Mapping) -> None:
    if p.get("partition_by") and p.get("cluster_by"):
        raise ValueError(
            "partition_by and cluster_by cannot be combined: a Delta table is either partitioned or clustered"
        )


def _clustering_columns_given(p: Mapping) -> None:
    if p.get("columns") is None:
        raise ValueError("columns is required: the clustering columns, e.g. ['id', 'ts'] ([] removes clustering)")


def _source_required(p: Mapping) -> None:
    if (not p.get("source") or not str(p.get("source")).strip()) and not p.get("source_query"):
        raise ValueError("no source: pass source= (a file, folder or table URI) and/or source_query= (Spark SQL)")


def _write_mode(p: Mapping) -> None:
    if p.get("replace_where") is not None and p.get("mode") != "overwrite":
        raise ValueError("replace_where= needs mode='overwrite'")
    if p.get("overwrite_schema") and p.get("mode") != "overwrite":
        raise ValueError("overwrite_schema=True needs mode='overwrite'")
    if p.get("partition_overwrite_mode") == "dynamic" and p.get("replace_where") is not None:
        raise ValueError("replace_where= and partition_overwrite_mode='dynamic' cannot be combined")


def _updates_given(p: Mapping) -> None:
    if not p.get("updates"):
        raise ValueError("updates= must name at least one column, e.g. {'status': \"'done'\"}")


def _merge_how(p: Mapping) -> None:
    if not p.get("predicate") and not p.get("key_columns"):
        raise ValueError("give the merge condition (predicate=, with clauses=) or key_columns= for an upsert")
    if p.get("key_columns") and (p.get("clauses") or p.get("predicate")):
        raise ValueError("key_columns= is an upsert: it takes no predicate= or clauses=")
    if p.get("predicate") and not p.get("clauses"):
        raise ValueError(
            "clauses= must name at least one WHEN clause, e.g. [{'when': 'matched', 'then': 'update_all'}]"
        )
    if p.get("dedupe_by") and not p.get("key_columns"):
        raise ValueError("dedupe_by= applies to an upsert (key_columns=)")
    clauses = p.get("clauses") or []
    problem = merge_clauses.order_problem((c.get("when"), c.get("condition") is not None) for c in clauses)
    if clauses and problem:  # Delta's rule, checked before any Spark application starts
        raise ValueError(f"clauses: {problem}")


def _some_properties(p: Mapping) -> None:
    if not p.get("properties"):
        raise ValueError(
            "properties= must name at least one table property, e.g. {'delta.enableDeletionVectors': 'true'}"
        )


def _history_limit(p: Mapping) -> None:
    if p.get("limit") is not None and p["limit"] < 0:
        raise ValueError(f"limit={p['limit']}: pass a number of commits from 0 up, or none for every commit")


def _version_or_timestamp(p: Mapping) -> None:
    if (p.get("version") is None) == (p.get("timestamp") is None):
        raise ValueError("pass exactly one of version and timestamp")


def _change_feed(p: Mapping) -> bool:
    """Whether the source is a Delta table's change feed (``readChangeFeed``: :mod:`.sources`)."""
    options = p.get("source_options") or {}
    fmt = str(p.get("source_format") or "").strip().lower()
    return fmt == "delta" and str(options.get("readChangeFeed", "")).strip().lower() == "true"


def _no_change_feed_create(p: Mapping) -> None:
    if p.get("source") and _change_feed(p):
        raise ValueError(
            "a change feed source cannot create a table (it could not record which versions it consumed): "
            "create the table first, then write or merge the changes into it"
        )


def _change_feed_rerun(p: Mapping) -> None:
    if p.get("source") and _change_feed(p) and p.get("rerun") == "replace":
        raise ValueError(
            "a change feed source cannot be appended with on_rerun='replace' (replacing the earlier run's "
            "output would drop the changes it consumed): use on_rerun='apply'"
        )


def _needs_source_spark(p: Mapping) -> bool:
    return bool(p.get("source") or p.get("source_query"))


def _whole_files_deleted(p: Mapping) -> bool:
    """DELETE whose predicate names partition columns only: each file matches entirely or not at
    all, so the engine removes whole files from the log without reading them (the rule
    ``engine.commands.dml.delete`` applies, on the table's schema and partition columns)."""
    if p.get("predicate") is None or not p.get("table_uri"):
        return False
    from .engine.expr import parse_predicate  # the engine's log and parser (imported only when asked)
    from .engine.expr.skipping import is_partition_only
    from .engine.log.snapshot import load_table_metadata
    from .engine.schema import parse_schema
    from .engine.storage import storage_for, table_location

    root = table_location(str(p["table_uri"]))
    metadata = load_table_metadata(storage_for(root), root).metadata
    predicate = parse_predicate(str(p["predicate"]), parse_schema(metadata.schema_string))
    return is_partition_only(predicate, list(metadata.partition_columns or []))


def _kept_table(p: Mapping) -> bool:
    """CREATE TABLE IF NOT EXISTS where a table is: kept, its source never read."""
    if not p.get("if_not_exists") or not p.get("table_uri"):
        return False
    from .engine import DeltaTable  # the engine's log listing (imported only when asked)

    return DeltaTable(None, str(p["table_uri"])).exists()


#: the arguments that say where and how a source is read (:mod:`.sources`), not passed to the command
SOURCE_SPEC = ("source", "source_format", "source_options", "source_query")
SOURCE_ARGS = (
    Arg("source", help="source location: file, folder, or Delta table"),
    Arg("source_format", default="parquet", choices=SOURCE_FORMATS, help="|".join(SOURCE_FORMATS)),
    Arg("source_options", "dict", flag="--source-option", help="reader options KEY=VALUE (repeatable)"),
    Arg("source_query", help="Spark SQL over the source (a temporary view named `source`), e.g. a filter or join"),
    Arg("target_file_size", "int", templated=False, help="bytes per data file"),
)


def _rewrite_metrics(rows: str) -> tuple[str, ...]:
    """The metrics of a DML rewrite (DELETE, UPDATE) with its own count of ``rows``."""
    files = ("numRemovedFiles", "numAddedFiles", rows, "numCopiedRows", "numAddedBytes", "numRemovedBytes")
    return (*files, "numAddedChangeFiles", "executionTimeMs", "scanTimeMs", "rewriteTimeMs")


PREDICATE = Arg("predicate", help="Spark SQL condition, e.g. dt = '2026-01-01' AND id <= 4", sql="predicate")

_OPERATIONS = (
    Operation(
        "describe",
        "DESCRIBE DETAIL",
        "table detail (log only)",
        "airflow_delta_provider_apps.engine.commands.describe:detail",
        commits=False,
    ),
    Operation(
        "history",
        "DESCRIBE HISTORY",
        "commit history (log only)",
        "airflow_delta_provider_apps.engine.commands.describe:history",
        args=(Arg("limit", "int", help="newest N commits"),),
        commits=False,
        checks=(_history_limit,),
    ),
    Operation(
        "read",
        "READ",
        "rows to one parquet file (small tables)",
        "airflow_delta_provider_apps.engine.commands.describe:read",
        args=(
            Arg("output", help="PATH.parquet to write"),
            Arg("version", "version", help="time travel to this version"),
            Arg("timestamp", help="time travel to this timestamp"),
        ),
        metrics=("numOutputRows", "numFiles"),
        needs_spark=True,
        commits=False,
    ),
    Operation(
        "create-table",
        "CREATE TABLE",
        "CREATE TABLE [IF NOT EXISTS] [AS SELECT]",
        "airflow_delta_provider_apps.engine.commands.create_table:create_table",
        changes_schema=True,
        args=(
            Arg("schema", "schema", help="DDL string or Delta/Spark schema JSON", sql="schema"),
            Arg("partition_by", "list", help="partition columns"),
            Arg("cluster_by", "list", help="clustering columns (liquid clustering; not with partition_by)"),
            Arg("properties", "dict", flag="--property", help="table property KEY=VALUE (repeatable)"),
            Arg("description", help="table description"),
            Arg("name", help="table name stored in the metadata"),
            Arg("if_not_exists", "bool", default=False, templated=False, help="keep an existing table"),
            *SOURCE_ARGS,
        ),
        metrics=("numFiles", "numOutputRows", "numOutputBytes"),
        needs_spark=_needs_source_spark,
        source=True,
        checks=(_schema_or_source, _source_needs_format, _partitioned_or_clustered, _no_change_feed_create),
        settled_by_log=_kept_table,
    ),
    Operation(
        "write",
        "WRITE",
        "append or overwrite rows from a source",
        "airflow_delta_provider_apps.engine.commands.write:write",
        changes_schema=True,
        args=(
            Arg("mode", default="append", choices=("append", "overwrite"), help="append | overwrite"),
            *SOURCE_ARGS,
            Arg("replace_where", help="overwrite only the rows matching this Spark SQL condition", sql="predicate"),
            Arg("partition_overwrite_mode", default="static", choices=("static", "dynamic"), help="static | dynamic"),
            Arg("overwrite_schema", "bool", default=False, templated=False, help="replace the schema (overwrite)"),
            Arg("merge_schema", "bool", default=False, templated=False, help="add new columns, widen types"),
            Arg(
                "rerun",
                default="apply",
                choices=("apply", "replace"),
                templated=False,
                help="append with app_id: replace (remove the files this app_id's earlier commit appended) or apply",
                operator=False,
            ),
        ),
        metrics=("numFiles", "numOutputRows", "numOutputBytes", "numRemovedFiles", "numRemovedBytes"),
        needs_spark=True,
        source=True,
        checks=(_source_required, _source_needs_format, _write_mode, _change_feed_rerun),
    ),
    Operation(
        "delete",
        "DELETE",
        "delete the rows matching a predicate (all rows without one)",
        command="airflow_delta_provider_apps.engine.commands.dml:delete",
        args=(PREDICATE,),
        metrics=_rewrite_metrics("numDeletedRows"),
        needs_spark=lambda p: p.get("predicate") is not None,
        in_process=True,
        settled_by_log=_whole_files_deleted,
    ),
    Operation(
        "update",
        "UPDATE",
        "set columns to expressions on the rows matching a predicate",
        command="airflow_delta_provider_apps.engine.commands.dml:update",
        args=(
            Arg(
                "updates",
                "updates",
                flag="--set",
                help="COLUMN=EXPRESSION (repeatable), e.g. --set v='v * 2'",
                sql="expression",
            ),
            PREDICATE,
        ),
        metrics=_rewrite_metrics("numUpdatedRows"),
        needs_spark=True,
        checks=(_updates_given,),
        in_process=True,
    ),
    Operation(
        "merge",
        "MERGE",
        "merge (upsert) rows from a source: WHEN [NOT] MATCHED [BY SOURCE] clauses, or key columns",
        "airflow_delta_provider_apps.engine.commands.merge:merge_into",
        changes_schema=True,
        args=(
            *SOURCE_ARGS,
            Arg(
                "predicate",
                help="the merge condition over target and source, e.g. target.id = source.id",
                sql="merge condition",
            ),
            Arg(
                "clauses",
                "clauses",
                help='WHEN clauses as JSON: [{"when": "matched", "then": "update_all"}, ...]',
                sql="condition",
            ),
            Arg("key_columns", "list", help="upsert by these key columns (update all matched, insert all new)"),
            Arg("dedupe_by", help="upsert: keep the source row with the greatest value of this column per key"),
            Arg("source_alias", default="source", help="the source's alias in conditions"),
            Arg("target_alias", default="target", help="the table's alias in conditions"),
            Arg("merge_schema", "bool", default=False, templated=False, help="add the source's new columns"),
        ),
        metrics=(
            "numSourceRows",
            "numTargetRowsInserted",
            "numTargetRowsUpdated",
            "numTargetRowsDeleted",
            "numTargetRowsCopied",
            "numTargetFilesAdded",
            "numTargetFilesRemoved",
            "executionTimeMs",
        ),
        needs_spark=True,
        # execution="local": a parquet or Delta source merged file by file in the worker, no Spark
        in_process=True,
        source=True,
        small_source_as_arrow=True,
        checks=(_source_required, _source_needs_format, _merge_how),
    ),
    Operation(
        "vacuum",
        "VACUUM",
        "delete the files no version inside the retention needs (no Spark)",
        command="airflow_delta_provider_apps.engine.commands.vacuum:vacuum",
        args=(
            Arg("retention_hours", "hours", help="keep what versions of the last N hours need (default: the table's)"),
            Arg("dry_run", "bool", default=False, templated=False, help="list what would be deleted, delete nothing"),
            Arg(
                "enforce_retention_duration",
                "bool",
                default=True,
                templated=False,
                help="refuse a retention shorter than delta.deletedFileRetentionDuration",
            ),
            Arg(
                "mode",
                default="full",
                choices=("full", "lite"),
                help="full (list the table) | lite (the log's removes)",
            ),
            Arg("keep_versions", "list", help="keep every file these versions read, whatever its age (deltalake's)"),
            Arg(
                "inventory",
                help="a Delta table or parquet path of (path, length, isDir, modificationTime) used instead of "
                "listing (delta-spark's USING INVENTORY)",
            ),
        ),
        metrics=(
            "numFilesToDelete",
            "sizeOfDataToDelete",
            "numDeletedFiles",
            "numVacuumedDirectories",
            "executionTimeMs",
        ),
    ),
    Operation(
        "optimize",
        "OPTIMIZE",
        "compact small files, or Z-order them, or cluster a clustered table incrementally (rows unchanged)",
        command="airflow_delta_provider_apps.engine.commands.optimize:optimize",
        args=(
            Arg(
                "partition_filter",
                help="only the partitions matching this condition on partition columns",
                sql="predicate",
            ),
            Arg("target_size", "int", help="bytes per file written (default: delta.targetFileSize)"),
            Arg("min_file_size", "int", help="files smaller than this are compacted (default: the target size)"),
            Arg("z_order_by", "list", help="cluster the rows by these data columns"),
            Arg(
                "purge_deletion_vectors",
                "bool",
                False,
                help="rewrite only the files with deletion vectors, without their deleted rows (REORG ... PURGE)",
            ),
        ),
        metrics=(
            "numAddedFiles",
            "numRemovedFiles",
            "numAddedBytes",
            "numRemovedBytes",
            "numBatches",
            "totalConsideredFiles",
            "partitionsOptimized",
            "executionTimeMs",
        ),
        needs_spark=True,
        in_process=True,
    ),
    Operation(
        "set_properties",
        "SET TBLPROPERTIES",
        "set table properties, upgrading the protocol to the features they enable (log only)",
        command="airflow_delta_provider_apps.engine.commands.properties:set_properties",
        args=(
            Arg(
                "properties",
                "dict",
                help="properties to set, e.g. delta.enableDeletionVectors=true (CLI: --properties JSON)",
            ),
        ),
        checks=(_some_properties,),
    ),
    Operation(
        "add_constraint",
        "ADD CONSTRAINT",
        "add a CHECK constraint, after checking every row the table holds (no Spark)",
        command="airflow_delta_provider_apps.engine.commands.properties:add_constraint",
        args=(
            Arg("name", help="the constraint's name (letters, digits, underscores)"),
            Arg("expression", help="Spark SQL condition every row must satisfy, e.g. amount >= 0", sql="condition"),
        ),
        checks=(_constraint_named, _constraint_expression),
    ),
    Operation(
        "drop_constraint",
        "DROP CONSTRAINT",
        "drop a CHECK constraint (log only)",
        command="airflow_delta_provider_apps.engine.commands.properties:drop_constraint",
        args=(
            Arg("name", help="the constraint's name"),
            Arg("if_exists", "bool", default=False, help="no error when the table has no such constraint"),
        ),
        checks=(_constraint_named,),
    ),
    Operation(
        "rename_column",
        "RENAME COLUMN",
        "rename a column of a table with column mapping (metadata only)",
        changes_schema=True,
        command="airflow_delta_provider_apps.engine.commands.properties:rename_column",
        args=(Arg("column", help="the column's current name"), Arg("new_name", help="its new name")),
        checks=(_column_named, _new_name_given),
    ),
    Operation(
        "drop_column",
        "DROP COLUMNS",
        "drop a column of a table with column mapping (metadata only)",
        changes_schema=True,
        command="airflow_delta_provider_apps.engine.commands.properties:drop_column",
        args=(Arg("column", help="the column to drop"),),
        checks=(_column_named,),
    ),
    Operation(
        "change_column_type",
        "CHANGE COLUMN",
        "widen a column's type as the protocol allows (metadata only; enables type widening)",
        changes_schema=True,
        command="airflow_delta_provider_apps.engine.commands.properties:change_column_type",
        args=(
            Arg("column", help="the top-level column to widen"),
            Arg("new_type", help="its wider type, e.g. BIGINT, DOUBLE, DECIMAL(12,2), TIMESTAMP_NTZ"),
        ),
        checks=(_column_named, _widening_type),
    ),
    Operation(
        "cluster_by",
        "CLUSTER BY",
        "set the clustering columns, or remove them with an empty list (metadata only; OPTIMIZE clusters)",
        command="airflow_delta_provider_apps.engine.commands.properties:cluster_by",
        args=(
            Arg(
                "columns",
                "list",
                help="the new clustering columns (CLI: --columns a b); an empty list removes them (CLUSTER BY NONE)",
            ),
        ),
        checks=(_clustering_columns_given,),
    ),
    Operation(
        "restore",
        "RESTORE",
        "make the table's live files those of an older version (no Spark)",
        changes_schema=True,
        command="airflow_delta_provider_apps.engine.commands.restore:restore",
        args=(
            Arg("version", "version", help="the version to restore"),
            Arg("timestamp", help="or the version as of this timestamp"),
        ),
        metrics=(
            "numRestoredFiles",
            "numRemovedFiles",
            "numOfFilesAfterRestore",
            "tableSizeAfterRestore",
            "restoredFilesSize",
            "removedFilesSize",
        ),
        checks=(_version_or_timestamp,),
    ),
    Operation(
        "checkpoint",
        "CHECKPOINT",
        "write a checkpoint (log only)",
        command="airflow_delta_provider_apps.engine.commands.checkpoint:checkpoint",
        args=(Arg("cleanup", "bool", default=False, templated=False, help="then delete expired log files"),),
        commits=False,
    ),
    Operation(
        "cleanup-metadata",
        "CLEANUP METADATA",
        "delete expired log files (log only)",
        command="airflow_delta_provider_apps.engine.commands.checkpoint:cleanup_metadata",
        commits=False,
    ),
)

OPERATIONS: dict[str, Operation] = {op.name: op for op in _OPERATIONS}


def get(name: str) -> Operation:
    """The operation called ``name``; ValueError listing the known ones."""
    try:
        return OPERATIONS[name]
    except KeyError:
        raise ValueError(f"unknown operation {name!r}: use one of {', '.join(OPERATIONS)}") from None
