"""Exceptions the provider raises, and the ONE place that maps an app failure onto Airflow's retry model.

Rules:

* A failed spark app reports one line (``DELTA_ERROR <Class>: <problem. Cause: ... Fix: ...>``) and,
  through ``--result-uri``, ``{"status": "error", "error_class", "message", "retryable", ...}``.
  That line, not the Spark log, becomes the exception message.
* ``retryable`` (conflicts, I/O) -> :class:`DeltaRetryableError`, an ``AirflowException``: Airflow
  retries the task if it has retries left. Everything else (bad input, missing table, unsupported
  feature, schema mismatch) -> :class:`DeltaPermanentError`, an ``AirflowFailException``: Airflow fails
  the task at once, because a retry cannot help.
* Both derive from :class:`DeltaTaskError`, so a caller can catch them together and read
  ``error_class``, ``message``, ``retryable`` and the app's ``result`` dict.
"""

from __future__ import annotations

try:
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
    )
except ImportError:  # Airflow 3.1: the task SDK does not re-export these yet
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
    )


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "DeltaTaskError",
    "DeltaRetryableError",
    "DeltaPermanentError",
    "DeltaConfigurationError",
    "app_error",
]


class DeltaTaskError(Exception):
    """Mixin carried by every app failure surfaced by the provider.

    :param error_class: the engine's error class name (e.g. ``TableNotFoundError``), or a provider
        label such as ``SparkSubmitError`` when the app never reported one.
    :param message: the one-line message (problem, cause, fix).
    :param retryable: whether a task retry may help.
    :param result: the app's error result dict when one came back (``--result-uri`` file or stdout).
    """

    def __init__(self, error_class: str, message: str, *, retryable: bool, result: dict | None = None):
        self.error_class = error_class
        self.message = message
        self.retryable = retryable
        self.result = result
        super().__init__(f"{error_class}: {message}" if error_class else message)


class DeltaRetryableError(DeltaTaskError, AirflowException):
    """The app failed in a way a retry may fix (commit conflict, storage I/O, lost executor)."""


class DeltaPermanentError(DeltaTaskError, AirflowFailException):
    """The app failed in a way a retry cannot fix (bad input, missing table, unsupported feature)."""


class DeltaConfigurationError(DeltaPermanentError):
    """The provider cannot build a submission from the given connection and arguments."""

    def __init__(self, problem: str, cause: str | None = None, fix: str | None = None):
        parts = [problem.rstrip(".") + "."]
        if cause:
            parts.append(f"Cause: {cause.rstrip('.')}.")
        if fix:
            parts.append(f"Fix: {fix.rstrip('.')}.")
        super().__init__("DeltaConfigurationError", " ".join(parts), retryable=False)


def app_error(error_class: str, message: str, *, retryable: bool, result: dict | None = None) -> DeltaTaskError:
    """Build the exception for an app failure: retryable -> AirflowException, else AirflowFailException."""
    cls = DeltaRetryableError if retryable else DeltaPermanentError
    return cls(error_class, message, retryable=retryable, result=result)
