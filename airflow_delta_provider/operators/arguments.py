"""Unknown keyword arguments of the Delta operators and sensor, refused at DAG parse time with the
closest accepted name (Airflow's own error says only ``Invalid arguments``)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable


def accepted_arguments(cls: type, own: Iterable[str] = ()) -> list[str]:
    """Every keyword argument ``cls`` takes: ``own`` (taken from ``**kwargs``, e.g. an operation's
    arguments) and the named parameters of each ``__init__`` of its classes."""
    names = list(own)
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and klass is not object:
            params = inspect.signature(vars(klass)["__init__"]).parameters.values()
            names += [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [n for n in dict.fromkeys(names) if n != "self"]


def refuse_unknown_arguments(cls: type, kwargs: dict, *, own: Iterable[str] = (), takes: str = "") -> None:
    """Raise TypeError (problem, cause, fix) when ``kwargs`` holds a name ``cls`` does not take, with
    the closest accepted name for each; ``takes`` describes what it takes, for the cause."""
    if not kwargs:
        return
    accepted = accepted_arguments(cls, own)
    unknown = [k for k in kwargs if not k.startswith("_") and k not in accepted]  # _airflow_*: Airflow's own
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise TypeError(
        f"{cls.__name__} got unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(hints)}. "
        f"Cause: it takes {takes or 'its own arguments'} and BaseOperator's. "
        "Fix: correct the name, or drop the argument."
    )
