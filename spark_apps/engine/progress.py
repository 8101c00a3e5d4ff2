"""Progress of a running command, for the people watching it (an Airflow task log).

Commands call :func:`report` at their phase boundaries (files considered and kept after skipping,
files rewritten, rows written); nothing happens unless a sink is installed. The CLI installs one
that prints a ``DELTA_PROGRESS <json>`` line, which the provider's hook turns into a readable log
line. Best effort by design: in cluster deploy mode the driver's stdout does not reach Airflow.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

__all__ = ["report", "reporting_to", "set_sink"]

_sink: Callable[[dict], None] | None = None


def set_sink(sink: Callable[[dict], None] | None) -> None:
    """Where :func:`report` sends events (None: nowhere)."""
    global _sink
    _sink = sink


def report(operation: str, phase: str, **counts) -> None:
    """One progress event: ``phase`` of ``operation`` with its counts (ints)."""
    if _sink is None:
        return
    try:
        _sink({"operation": operation, "phase": phase, **counts})
    except Exception:  # progress must never fail a command
        pass


@contextmanager
def reporting_to(sink: Callable[[dict], None]):
    """Events of the commands run inside the block go to ``sink`` (a run in this process: the
    provider logs them), then to where they went before."""
    global _sink
    previous, _sink = _sink, sink
    try:
        yield
    finally:
        _sink = previous
