"""Engine errors.

Every error says three things: the problem, its cause, and the fix (the Java Kernel's
exception principles). ``str(err)`` renders them as one line, which is what a failing
spark app prints last and what the Airflow hook surfaces.

``retryable`` tells the Airflow side whether a task retry may help (conflicts, I/O)
or not (bad input, missing table, unsupported feature).
"""

from __future__ import annotations


class DeltaError(Exception):
    """Base class of every error raised by the engine."""

    retryable: bool = False

    def __init__(self, problem: str, cause: str | None = None, fix: str | None = None):
        self.problem = problem.rstrip(".")
        self.cause = cause.rstrip(".") if cause else None
        self.fix = fix.rstrip(".") if fix else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [self.problem + "."]
        if self.cause:
            parts.append(f"Cause: {self.cause}.")
        if self.fix:
            parts.append(f"Fix: {self.fix}.")
        return " ".join(parts).replace("\n", " ")

    def to_dict(self) -> dict:
        return {
            "error_class": type(self).__name__,
            "problem": self.problem,
            "cause": self.cause,
            "fix": self.fix,
            "retryable": self.retryable,
            "message": self.one_line(),
        }


class InvalidArgumentError(DeltaError):
    """A caller passed something we cannot act on (bad option, bad predicate, bad path)."""


class InvalidPredicateError(InvalidArgumentError):
    """A predicate or expression that cannot be parsed, bound to the table schema, or evaluated."""


class TableNotFoundError(DeltaError):
    """No Delta table (no ``_delta_log/`` with a commit) at the given location."""


class TableAlreadyExistsError(DeltaError):
    """CREATE TABLE found a table already there."""


class VersionNotFoundError(DeltaError):
    """Time travel asked for a version or timestamp the log cannot reconstruct."""


class LogCorruptedError(DeltaError):
    """The transaction log breaks the protocol (gap in versions, missing protocol/metaData, bad JSON)."""


class UnsupportedFeatureError(DeltaError):
    """The table uses a reader or writer feature this engine does not implement."""


class SchemaMismatchError(DeltaError):
    """Data written does not match the table schema (schema enforcement)."""


class InvalidSchemaError(DeltaError):
    """A schema (DDL string, Delta JSON, Spark StructType) cannot be parsed or is invalid."""


class DataFileMissingError(DeltaError):
    """A data file referenced by the log is gone (e.g. vacuumed)."""


class CorruptDataFileError(DeltaError):
    """A data file the log names is not a readable parquet file (damaged or replaced outside Delta)."""


class StorageError(DeltaError):
    """The storage layer failed (I/O); a retry may help."""

    retryable = True


class AppendOnlyViolationError(DeltaError):
    """A commit would remove or change data of a table with ``delta.appendOnly=true``."""


class ConstraintViolationError(DeltaError):
    """A row written violates a CHECK constraint or a generated column's expression (nothing is
    committed), or a new CHECK constraint is violated by rows the table holds."""


class DuplicateMatchError(DeltaError):
    """MERGE: more than one source row matched one target row that a clause updates or deletes."""


class InvalidCommitError(DeltaError):
    """A commit breaks a per-commit validity rule of the protocol; nothing was written."""


class CommitConflictError(DeltaError):
    """Base of all conflicts found by the optimistic-transaction conflict checker.

    A retry of the whole task usually helps (it re-reads the table), so it is retryable.
    """

    retryable = True

    def __init__(
        self,
        problem: str,
        cause: str | None = None,
        fix: str | None = None,
        *,
        winning_version: int | None = None,
        winning_operation: str | None = None,
    ):
        self.winning_version = winning_version
        self.winning_operation = winning_operation
        super().__init__(problem, cause, fix)


class ConcurrentAppendError(CommitConflictError):
    """A concurrent commit added files that this transaction's read predicates would match."""


class ConcurrentDeleteReadError(CommitConflictError):
    """A concurrent commit removed a file this transaction read."""


class ConcurrentDeleteDeleteError(CommitConflictError):
    """A concurrent commit removed a file this transaction also removes."""


class MetadataChangedError(CommitConflictError):
    """A concurrent commit changed the table metadata (schema, partitioning, properties)."""


class ProtocolChangedError(CommitConflictError):
    """A concurrent commit changed the table protocol."""


class ConcurrentTransactionError(CommitConflictError):
    """A concurrent commit touched the same application transaction id or metadata domain."""


class ConcurrentVacuumError(CommitConflictError):
    """A commit that brings old files back (RESTORE) met a VACUUM that may delete them."""


class CommitRetriesExhaustedError(CommitConflictError):
    """Lost the race for the next version more times than the retry budget allows."""
