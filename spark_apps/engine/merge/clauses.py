"""MERGE's clause rules, stated once (Delta's): which actions each kind of WHEN clause allows, what an
action needs, and the order rule. The operations registry checks a task's clauses with them before any
Spark application starts, the :class:`~..commands.merge.MergeBuilder` and the binding raise their errors from
them. Imports nothing, so the registry can read it at DAG parse time."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "MATCHED",
    "NOT_MATCHED",
    "NOT_MATCHED_BY_SOURCE",
    "KINDS",
    "CLAUSES",
    "NEEDS",
    "allowed",
    "clause_problem",
    "order_problem",
]

MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE = "matched", "not_matched", "not_matched_by_source"
KINDS = (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE)
#: ``when`` -> the ``then`` actions it allows (``*_all``: every column by name from the source)
CLAUSES = {
    MATCHED: ("update", "update_all", "delete"),
    NOT_MATCHED: ("insert", "insert_all"),
    NOT_MATCHED_BY_SOURCE: ("update", "delete"),
}
#: the argument an action's assignments come in: ``{target column: expression}``
NEEDS = {"update": "set", "insert": "values"}


def allowed() -> str:
    """The valid pairs, for error messages."""
    return "; ".join(f"{when}: {', '.join(thens)}" for when, thens in CLAUSES.items())


def clause_problem(when, then) -> str | None:
    """Why ``when``/``then`` is not a clause (None: it is one)."""
    if when in CLAUSES and then in CLAUSES[when]:
        return None
    return f"when={when!r} then={then!r} is not a MERGE clause (valid: {allowed()})"


def order_problem(clauses: Iterable[tuple[str, bool]]) -> str | None:
    """Why clauses given in order as ``(when, has_condition)`` cannot run (None: they can): there must
    be at least one, and only the last of a kind may omit its condition (an earlier one would hide
    every later one of its kind)."""
    clauses = list(clauses)
    if not clauses:
        return "MERGE needs at least one WHEN clause"
    for kind in KINDS:
        of_kind = [has_condition for when, has_condition in clauses if when == kind]
        if not all(of_kind[:-1]):
            return f"only the last WHEN {kind.upper().replace('_', ' ')} clause may omit its condition"
    return None
