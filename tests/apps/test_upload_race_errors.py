"""A Spark Connect server's answer to the loser of a bundle-upload race is a retryable Spark
infrastructure failure (issue 40), not a permanent 'Spark failed (UnknownException)'; a file that
already exists elsewhere (a table's) is not taken for it."""

from __future__ import annotations

import pytest

from airflow_delta_provider_apps.cli import as_delta_error
from airflow_delta_provider_apps.failures import SparkInfrastructureError, infrastructure_cause

connect = pytest.importorskip("pyspark.errors.exceptions.connect")

# what Spark 4's Connect server answers the loser of the race; and, where its staging folder is on another
# file system (a copy, not a rename), a run that compared its zip with another's copy not yet complete
LOST_RACE = (
    "(java.nio.file.FileAlreadyExistsException) /tmp/artifacts-c05f7094-b17a-4ec9-8a12-d7bc65dc8efc/"
    "a9c1c9ff-eedb-405c-95bb-847c34aea722/pyfiles/airflow_delta_provider_apps-0123456789abcdef.zip\n\n"
    "JVM stacktrace:\njava.nio.file.FileAlreadyExistsException\n\tat sun.nio.fs.UnixCopyFile.move"
)
PARTLY_COPIED = (
    "(java.lang.RuntimeException) Duplicate Artifact: pyfiles/airflow_delta_provider_apps-0123456789abcdef.zip. "
    "Artifacts cannot be overwritten."
)


@pytest.mark.parametrize("text", [LOST_RACE, PARTLY_COPIED])
def test_an_upload_race_is_retryable(text):
    err = as_delta_error(connect.UnknownException(text))
    assert isinstance(err, SparkInfrastructureError) and err.retryable
    assert err.problem == (
        "Spark failed: another task uploaded the same code bundle to the Spark Connect session at the same moment"
    )
    assert err.cause == text.splitlines()[0].rstrip(".")  # the server's own line names the file


@pytest.mark.parametrize(
    "text",
    [
        "(java.nio.file.FileAlreadyExistsException) /lake/orders/part-00000-1.parquet",
        "(org.apache.hadoop.fs.FileAlreadyExistsException) s3a://bucket/t/_delta_log/00000000000000000001.json",
    ],
)
def test_other_existing_files_are_not_an_upload_race(text):
    assert infrastructure_cause(text) is None
    err = as_delta_error(connect.UnknownException(text))
    assert not isinstance(err, SparkInfrastructureError) and not err.retryable
