"""What a finished app run means for the task: its result, or the one error Airflow should raise.

Pure (no I/O): :class:`AppOutput` reads the app's output lines (spark-submit's merged stdout/stderr),
:func:`resolve_outcome` decides from the result file, those lines and the exit code. Failure mapping
lives here: the app's ``retryable`` flag, else its exit code (2 = retryable) or the engine error
class's ``retryable``; a Spark infrastructure failure named in Spark's own output is retryable.
"""

from __future__ import annotations

import functools
import json
import re
from collections import deque
from dataclasses import dataclass, field

from airflow_delta_provider.exceptions import DeltaPermanentError, DeltaRetryableError, DeltaTaskError, app_error
from airflow_delta_provider_apps.operations import OPERATIONS

__all__ = [
    "AppOutput",
    "engine_error_retryable",
    "metrics_summary",
    "progress_text",
    "reader_warning_text",
    "resolve_outcome",
    "schema_change_text",
]

# The app's failure line; design.md names it "DELTA_ERROR <Class>: msg" (and, in one place,
# "DeltaError[<Class>]: msg"): both are accepted.
_ERROR_LINE_RE = re.compile(
    r"^(?:DELTA_ERROR\s+(?P<c1>[A-Za-z_][\w.]*)|DeltaError\[(?P<c2>[A-Za-z_][\w.]*)\])\s*:\s*(?P<msg>.*)$"
)


@dataclass
class AppOutput:
    """What spark-submit's merged stdout/stderr told us: the last result line, the last error line."""

    result: dict | None = None
    error_class: str | None = None
    error_message: str | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=20))
    # lines that show a Spark infrastructure failure (master unreachable, no resources, lost driver):
    # Spark logs them long before the app's own error, which only sees a stopped SparkContext
    infrastructure_lines: deque = field(default_factory=lambda: deque(maxlen=10))

    def feed(self, raw: str) -> None:
        line = raw.strip()
        if not line:
            return
        self.tail.append(line)
        if _infrastructure_cause(line):
            self.infrastructure_lines.append(line)
        if line.startswith("{") and line.endswith("}") and '"status"' in line:
            try:
                obj = json.loads(line)
            except ValueError:
                return
            if isinstance(obj, dict) and obj.get("status") in ("ok", "error"):
                self.result = obj
            return
        m = _ERROR_LINE_RE.match(line)
        if m:
            self.error_class = m.group("c1") or m.group("c2")
            self.error_message = m.group("msg").strip()

    @classmethod
    def parse(cls, lines) -> AppOutput:
        out = cls()
        for line in lines:
            out.feed(line)
        return out


@functools.cache
def _infrastructure_classifier():
    """The apps' classifier, imported once (it runs on every output line); ``None`` without the engine."""
    try:
        from airflow_delta_provider_apps.protocol import infrastructure_cause
    except Exception:  # the engine is optional on the Airflow side
        return None
    return infrastructure_cause


def _infrastructure_cause(text: str, master: str | None = None) -> str | None:
    classify = _infrastructure_classifier()
    return classify(text, master) if classify is not None else None


def engine_error_retryable(error_class: str | None) -> bool | None:
    """The engine's ``retryable`` for an error class name; ``None`` when it is not an engine error."""
    try:
        from airflow_delta_provider_apps.protocol import error_retryable
    except Exception:  # the engine is optional on the Airflow side
        return None
    return error_retryable(error_class)


def _error_from_result(result: dict) -> DeltaTaskError:
    error_class = str(result.get("error_class") or "DeltaError")
    message = (
        result.get("message")
        or " ".join(p for p in (result.get("problem"), result.get("cause"), result.get("fix")) if p)
        or "the app reported an error without a message"
    )
    retryable = result.get("retryable")
    if retryable is None:
        retryable = bool(engine_error_retryable(error_class))
    return app_error(error_class, str(message), retryable=bool(retryable), result=result)


def resolve_outcome(
    *,
    returncode: int | None,
    file_result: dict | None,
    output: AppOutput,
    submit_error: str | None = None,
    master: str | None = None,
) -> dict:
    """Decide the task's outcome from everything the submission produced.

    Precedence: the ``--result-uri`` file, then the last JSON result line on stdout, then the last
    ``DELTA_ERROR`` line, then the bare exit status. An ``ok`` result wins even over a non-zero
    spark-submit exit (the commit is in the log; failing would invite a duplicate retry).

    :return: the app's result dict (``status == "ok"``).
    :raises DeltaRetryableError: retryable app error, or spark-submit failed before the app reported.
    :raises DeltaPermanentError: non-retryable app error, or the app succeeded without a result.
    """
    infrastructure = _infrastructure_cause(
        "\n".join([*output.infrastructure_lines, *output.tail, submit_error or ""]), master
    )
    for result in (file_result, output.result):
        if result is None:
            continue
        if result.get("status") == "ok":
            return result
        if result.get("status") == "error":
            raise _refined(_error_from_result(result), infrastructure)
    if output.error_class:
        retryable = returncode == 2 or bool(engine_error_retryable(output.error_class))
        raise _refined(app_error(output.error_class, output.error_message or "", retryable=retryable), infrastructure)
    if returncode:
        tail = " | ".join(list(output.tail)[-5:])
        detail = submit_error.splitlines()[0] if submit_error else f"spark-submit exited with code {returncode}"
        cause = infrastructure
        raise DeltaRetryableError(
            "SparkSubmitError",
            f"The Spark application failed before the Delta app reported a result. Cause: {cause or detail}. "
            f"Last output: {tail or '(none)'}. Fix: see the task log for the Spark error.",
            retryable=True,
        )
    raise DeltaPermanentError(
        "MissingResultError",
        "The Delta app finished but returned no result. Cause: no --result-uri file and no JSON result "
        "line on stdout. Fix: check that the installed airflow_delta_provider_apps matches this provider version.",
        retryable=False,
    )


def _refined(error: DeltaTaskError, infrastructure: str | None) -> DeltaTaskError:
    """The app's error, unless it is a bare unexpected error (or an infrastructure error) and Spark's own
    output names an infrastructure failure: then a retryable error with that one-line cause. (When the
    master cannot be reached, Spark stops the SparkContext and the app only sees "Cannot call methods on
    a stopped SparkContext"; the reason is in Spark's log lines.)"""
    generic = error.error_class == "DeltaError" or error.error_class == "SparkInfrastructureError"
    if not infrastructure or not generic:
        return error
    return DeltaRetryableError(
        "SparkInfrastructureError",
        f"Spark failed: {infrastructure}. Fix: check the cluster and the connection's master; the task is retried.",
        retryable=True,
    )


def metrics_summary(operation: str, metrics: dict) -> str:
    """``"; numOutputRows=10, numFiles=1, ..."``: the operation's main metrics (the registry's list)."""
    try:
        names = OPERATIONS[operation].metrics
    except (KeyError, NameError):
        names = ()
    shown = [f"{k}={metrics[k]}" for k in names if k in metrics]
    return "; " + ", ".join(shown) if shown else ""


def schema_change_text(change: dict) -> str:
    """One entry of a result's ``schema_changes`` as a line a person reads:
    ``column quantity widened from integer to long``."""
    kind, column = change.get("change"), change.get("column")
    if kind == "widened":
        return f"column {column} widened from {change.get('from')} to {change.get('to')}"
    if kind == "retyped":
        return f"column {column} changed type from {change.get('from')} to {change.get('to')}"
    if kind == "renamed":
        return f"column {change.get('from')} renamed to {column}"
    return f"column {column} {kind}" + (f" ({change['type']})" if change.get("type") else "")


def reader_warning_text(warning: dict) -> str:
    """One entry of a result's ``reader_warnings`` as a line: what turned on, who refuses what."""
    return str(warning.get("message") or f"feature '{warning.get('feature')}' turned on: {warning.get('readers')}")


def progress_text(event: dict) -> str:
    """A ``DELTA_PROGRESS`` event of the app as a line a person reads."""
    op, phase = str(event.get("operation", "")), event.get("phase")
    if phase == "files":
        extra = f" ({event['source_rows']} source rows)" if "source_rows" in event else ""
        return f"{op}: {event.get('candidates')} of {event.get('table')} files to read after skipping{extra}"
    if phase == "rewritten":
        rows = ", ".join(f"{v} rows {k}" for k, v in event.items() if k in ("matched", "written"))
        return f"{op}: {event.get('files')} files rewritten" + (f", {rows}" if rows else "")
    if phase == "file_by_file":
        return f"{op}: the source is read once and merged file by file"
    if phase == "join":
        return f"{op}: the source is joined with the candidate files in Spark"
    if phase == "upsert":
        how = "marked in deletion vectors" if event.get("deletion_vectors") else "dropped from their files"
        return f"{op}: an upsert: only the keys are joined, the matched rows {how}, the source rows written"
    if phase == "written":
        return f"{op}: {event.get('files')} files written, {event.get('rows')} rows"
    counts = ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("operation", "phase"))
    return f"{op}: {phase} {counts}".rstrip()
