"""The result of a run, in the app protocol's shape (docs/design.md): ``{"status": "ok", "operation",
"table_uri", "version", "skipped", "metrics", ...}``, made from a command's result. The same for
every operation: the generic runner (:mod:`.dispatch`), and the provider reading an earlier run's
commit (:mod:`.landed`)."""

from __future__ import annotations

__all__ = ["ok", "numbers", "from_command"]


def ok(operation: str, table_uri: str, version, *, skipped: bool = False, metrics: dict | None = None, **extra) -> dict:
    """The result of a run that succeeded, in the app protocol's shape."""
    out = {
        "status": "ok",
        "operation": operation,
        "table_uri": table_uri,
        "version": version,
        "skipped": bool(skipped),
        "metrics": numbers(metrics or {}),
    }
    out.update(extra)
    return out


def numbers(metrics: dict) -> dict:
    """Metric values as numbers (ints where integral)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                try:
                    v = float(v)
                except ValueError:
                    pass
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        out[k] = v
    return out


def from_command(r: dict, uri: str, **extra) -> dict:
    """A command's result dict (``CommandResult.to_dict()``) in the app protocol's shape, for ``uri``
    as the user gave it; ``extra``: fields the runner adds (a change feed's range)."""
    fields = {k: v for k, v in r.items() if k not in ("operation", "table_uri", "version", "skipped", "metrics")}
    fields = {k: v for k, v in fields.items() if k not in r["metrics"]}
    return ok(r["operation"], uri, r["version"], skipped=r["skipped"], metrics=r["metrics"], **fields, **extra)
