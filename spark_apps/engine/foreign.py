"""Exceptions that are not ours, as the DeltaError a caller of the engine gets (issue 31.5).

Every entry point (the DeltaTable facade, the CLI, a Spark Connect run) hands the caller one of our
errors: the problem, its cause, the fix, and whether a retry may help. Two places do that here:

* **Across the executor boundary.** A Spark task's exception reaches the driver only as text inside
  Spark's (a ``PythonException`` under Py4J or Spark Connect). :func:`encoded` puts the task's error
  between markers as JSON (the executor side, ``spark.session.guard_executor``); :func:`decoded`
  finds it in any exception's text and builds the same DeltaError class again, whichever Spark
  action raised it (a scan's ``collect`` in a MERGE join, a write job, a per-file job).
* **At the engine's public API** (:func:`translated`, on every :class:`~.table.DeltaTable` method
  and on MERGE's ``execute``): :func:`as_delta_error` maps what is left: an I/O error to a retryable
  :class:`StorageError`, a Spark error to bad input or a retryable infrastructure failure (the apps'
  one classifier, :mod:`airflow_delta_provider_apps.failures`), anything else (a KeyError or an
  ``ArrowInvalid`` out of our own code: a bug, or a check missing at the source) to a
  :class:`DeltaError` naming it. The original stays the ``__cause__`` (its traceback is kept).

A race that is a bug is fixed where it happens (a missing data file is a DataFileMissingError where
the file is opened; a folder a cleaner removed is made again); this module is the net behind them.
Stdlib only: no pyspark, no pyarrow import (their exceptions are recognised by module and name).
"""

from __future__ import annotations

import functools
import json
import re
import traceback

from . import errors
from .errors import DeltaError, InvalidArgumentError, StorageError

__all__ = ["MARK", "encoded", "decoded", "as_delta_error", "translated", "translated_methods", "translated_iter"]

#: what brackets an executor's error in the text of Spark's exception
MARK = "<<DELTA_EXECUTOR_ERROR>>"


def encoded(e: BaseException) -> str:
    """The text an executor raises for ``e``: a DeltaError as itself; any other exception as the
    DeltaError :func:`as_delta_error` makes of it, with the line of our code it came from."""
    err = e if isinstance(e, DeltaError) else _local_error(e, where=_innermost(e))
    payload = {"class": type(err).__name__, "problem": err.problem, "cause": err.cause, "fix": err.fix}
    return f"{MARK}{json.dumps(payload)}{MARK}"


def decoded(exc: BaseException) -> DeltaError | None:
    """The DeltaError an executor raised inside ``exc`` (a Spark, Py4J or Connect exception, whose
    text carries the task's), or ``None``."""
    text = str(exc)
    start = text.find(MARK)
    end = text.find(MARK, start + len(MARK)) if start >= 0 else -1
    if end < 0:
        return None
    try:
        d = json.loads(text[start + len(MARK) : end])
    except ValueError:
        return None
    cls = getattr(errors, str(d.get("class")), None)
    if not (isinstance(cls, type) and issubclass(cls, DeltaError)):
        cls = _apps_error_class(str(d.get("class"))) or DeltaError
    return cls(d.get("problem") or "A Spark task failed", d.get("cause"), d.get("fix"))


def as_delta_error(e: BaseException) -> DeltaError:
    """``e`` as one of our errors: itself; the error a Spark task raised inside it; an I/O error
    (retryable); a Spark or Spark Connect infrastructure failure by its text (retryable; the apps'
    classifier, :mod:`airflow_delta_provider_apps.failures`); Spark refusing the plan (bad input);
    anything else named as unexpected (not retryable), with its first line as the cause."""
    if isinstance(e, DeltaError):
        return e
    found = decoded(e)
    if found is not None:
        return found
    if isinstance(e, OSError):
        return _local_error(e)
    from airflow_delta_provider_apps.failures import SparkInfrastructureError, grpc_text, infrastructure_cause

    cause = infrastructure_cause(str(e))
    if cause:
        what = grpc_text(e) or _first_line(e)
        return SparkInfrastructureError(f"Spark failed: {cause}", what, "check the cluster and retry")
    gone = _SPARK_FILE_GONE.search(str(e))
    if gone:  # Spark's own reader met a file gone since the plan (the native scan)
        from .reader import missing_data_file

        location = gone.group(1) or gone.group(2)
        return missing_data_file(location, location)
    if _from_spark(e):
        return _spark_error(e)
    return _local_error(e)


#: how Spark's parquet reader (classic and Connect) says a file it was given is gone
_SPARK_FILE_GONE = re.compile(
    r"FAILED_READ_FILE\.FILE_NOT_EXIST\][^\n]*?reading file (\S+?)\.? File does not exist"
    r"|java\.io\.FileNotFoundException: (?:File )?(\S+?) does not exist"
)


def translated(fn):
    """``fn`` raising only DeltaErrors: any other exception (not BaseException's interrupts) leaves
    as :func:`as_delta_error` of it, chained to the original."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DeltaError:
            raise
        except Exception as e:
            raise as_delta_error(e) from e

    return run


def translated_iter(items):
    """``items`` (an iterator read after the API call returned, e.g. a reader's batches) raising
    only DeltaErrors, as :func:`translated`."""
    try:
        yield from items
    except DeltaError:
        raise
    except Exception as e:
        raise as_delta_error(e) from e


def translated_methods(cls):
    """``cls`` (a class decorator) with every public method, class method and static method
    :func:`translated`."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, classmethod):
            setattr(cls, name, classmethod(translated(member.__func__)))
        elif isinstance(member, staticmethod):
            setattr(cls, name, staticmethod(translated(member.__func__)))
        elif callable(member):
            setattr(cls, name, translated(member))
    return cls


# --------------------------------------------------------------------------------------------------


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:500] if text else type(e).__name__


def _innermost(e: BaseException) -> str | None:
    """``file:line`` of the frame that raised ``e``."""
    frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ is not None else []
    return f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else None


def _local_error(e: BaseException, where: str | None = None) -> DeltaError:
    """An exception of Python, pyarrow or the storage layer (not Spark's)."""
    what = _first_line(e)
    if isinstance(e, FileNotFoundError):
        name = e.filename or what
        return StorageError(
            f"A file the operation needed is gone: '{name}'",
            "it was deleted while the operation ran (by VACUUM, metadata cleanup or outside Delta)",
            "retry the operation (it reads the table again); if it keeps failing, check what deletes files "
            "under the table",
        )
    if isinstance(e, OSError):  # pyarrow's I/O errors are OSErrors too
        return StorageError("An I/O operation failed", f"{type(e).__name__}: {what}", "check the storage and retry")
    if isinstance(e, MemoryError):
        return StorageError(
            "The operation ran out of memory", what, "give the driver (or the worker) more memory, or retry"
        )
    at = f" (at {where})" if where else ""
    return DeltaError(
        f"Unexpected {type(e).__name__}{at}",
        what,
        "check the arguments and the data; if they are right, this is a bug of the engine: report it with "
        "this message and the traceback (in the log above)",
    )


def _from_spark(e: BaseException) -> bool:
    mod = type(e).__module__ or ""
    return mod.startswith(("pyspark", "py4j", "grpc"))


def _spark_error(e: BaseException) -> DeltaError:
    """A Spark exception that carries no error of ours and no infrastructure failure: Spark refusing
    the plan (bad input), or Spark failing otherwise."""
    what = _first_line(e)
    if type(e).__name__ in ("AnalysisException", "ParseException", "IllegalArgumentException"):
        return InvalidArgumentError(
            "Spark refused the operation", what, "check the source DataFrame and the arguments (columns, types)"
        )
    return DeltaError(f"Spark failed ({type(e).__name__})", what, "see the Spark log for the task's error")


def _apps_error_class(name: str):
    """An error class of the apps (not the engine's own) an executor may raise, by name."""
    if name == "SparkInfrastructureError":
        from airflow_delta_provider_apps.failures import SparkInfrastructureError

        return SparkInfrastructureError
    return None
