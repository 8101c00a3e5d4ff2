"""DeltaHook without a JVM: spark-submit command building per connection kind, the bundled apps zip,
output parsing, outcome/error mapping, and the whole run() path against a stand-in spark-submit
executable (a small script that behaves like the app would: logs, result file, last stdout line,
exit code). Real spark-submit runs are in tests/airflow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from airflow_delta_provider.exceptions import (
    AirflowException,
    AirflowFailException,
    DeltaConfigurationError,
    DeltaPermanentError,
    DeltaRetryableError,
    DeltaTaskError,
)
from airflow_delta_provider.hooks.delta import (
    AppOutput,
    DeltaHook,
    SparkSubmitOptions,
    build_app_bundle,
    engine_error_retryable,
    find_spark_submit,
    resolve_outcome,
)
from airflow_delta_provider.hooks.submit import SubmitTransport

PYSPARK_SUBMIT = os.path.join(
    os.path.dirname(__import__("importlib").util.find_spec("pyspark").origin), "bin", "spark-submit"
)


def _conn(monkeypatch, conn_id: str, host: str, **extra) -> str:
    body = {"conn_type": "spark", "host": host}
    if extra:
        body["extra"] = extra
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))
    return conn_id


def _command(hook: DeltaHook, operation="write", table_uri="/data/t", **params):
    sub, application, result_uri = hook.transport_for_connection().build_submit_hook(operation, table_uri, params)
    return sub._build_spark_submit_command(application), application, result_uri


def _flag(cmd: list[str], flag: str) -> list[str]:
    return [cmd[i + 1] for i, c in enumerate(cmd) if c == flag]


def _app_args(cmd: list[str], application: str) -> list[str]:
    return cmd[cmd.index(application) + 1 :]


@pytest.fixture
def bundle_dir(tmp_path):
    return str(tmp_path / "bundles")


# ------------------------------------------------------------------------------------------------
# command building


def test_local_connection_command(monkeypatch, bundle_dir):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    cid = _conn(monkeypatch, "spark_local_t", "local[2]")
    hook = DeltaHook(cid, spark_conf={"spark.sql.shuffle.partitions": 3}, bundle_dir=bundle_dir)
    cmd, application, result_uri = _command(
        hook,
        "write",
        "/data/t",
        mode="append",
        source="/in/x.parquet",
        source_format="parquet",
        source_options=None,
        app_id="loader",
        app_version=7,
    )
    assert cmd[0] == PYSPARK_SUBMIT  # the pyspark-bundled spark-submit, not whatever is on PATH
    assert _flag(cmd, "--master") == ["local[2]"]
    confs = dict(c.split("=", 1) for c in _flag(cmd, "--conf"))
    assert confs["spark.sql.shuffle.partitions"] == "3"
    assert confs["spark.pyspark.python"] == sys.executable
    assert confs["spark.pyspark.driver.python"] == sys.executable
    assert "--deploy-mode" not in cmd
    (py_files,) = _flag(cmd, "--py-files")
    assert py_files == build_app_bundle(bundle_dir).zip_path and py_files.startswith(bundle_dir)
    # its name holds its content's hash (a Spark Connect session holding that name holds these bytes)
    assert os.path.basename(py_files) == f"airflow_delta_provider_apps-{build_app_bundle(bundle_dir).digest}.zip"
    assert _flag(cmd, "--name") == ["delta-write"]
    assert os.path.dirname(application) == os.path.dirname(py_files)
    args = _app_args(cmd, application)
    assert args[:5] == ["write", "--table-uri", "/data/t", "--result-uri", result_uri]
    assert not result_uri.startswith(bundle_dir) and result_uri.endswith(".json")
    assert args[5] == "--spec-json" and len(args) == 7
    spec = json.loads(args[6])
    assert spec == {
        "table_uri": "/data/t",
        "mode": "append",
        "source": "/in/x.parquet",
        "source_format": "parquet",
        "app_id": "loader",
        "app_version": 7,
    }


def test_yarn_cluster_uses_result_dir_and_connection_extras(monkeypatch, bundle_dir):
    cid = _conn(
        monkeypatch,
        "spark_yarn_t",
        "yarn",
        **{"deploy-mode": "cluster", "queue": "etl", "delta_result_dir": "hdfs://nn:8020/tmp/delta-results/"},
    )
    hook = DeltaHook(
        cid, bundle_dir=bundle_dir, submit_options={"executor_memory": "4g", "num_executors": 3, "name": "nightly"}
    )
    cmd, application, result_uri = _command(hook, "checkpoint", "hdfs://nn:8020/lake/t", cleanup=True)
    assert _flag(cmd, "--master") == ["yarn"]
    assert _flag(cmd, "--deploy-mode") == ["cluster"]
    assert _flag(cmd, "--queue") == ["etl"]
    assert _flag(cmd, "--executor-memory") == ["4g"]
    assert _flag(cmd, "--num-executors") == ["3"]
    assert _flag(cmd, "--name") == ["nightly"]
    assert result_uri.startswith("hdfs://nn:8020/tmp/delta-results/delta-result-")
    assert "//delta-result-" not in result_uri.split("://", 1)[1]
    confs = dict(c.split("=", 1) for c in _flag(cmd, "--conf"))
    assert "spark.pyspark.python" not in confs  # the cluster's Python, not ours
    assert json.loads(_app_args(cmd, application)[-1]) == {"table_uri": "hdfs://nn:8020/lake/t", "cleanup": True}


def test_cluster_mode_without_result_dir_is_refused(monkeypatch, bundle_dir):
    cid = _conn(monkeypatch, "spark_yarn_nodir", "yarn", **{"deploy-mode": "cluster"})
    with pytest.raises(DeltaConfigurationError, match="delta_result_dir") as ei:
        _command(DeltaHook(cid, bundle_dir=bundle_dir))
    assert isinstance(ei.value, AirflowFailException)
    # a hook argument is enough
    cmd, _, result_uri = _command(DeltaHook(cid, bundle_dir=bundle_dir, result_dir="s3://b/results"))
    assert result_uri.startswith("s3://b/results/delta-result-")


def test_standalone_master_with_port(monkeypatch, bundle_dir):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_STANDALONE_T", json.dumps({"conn_type": "spark", "host": "spark://m1", "port": 7077})
    )
    cmd, _, _ = _command(DeltaHook("spark_standalone_t", bundle_dir=bundle_dir))
    assert _flag(cmd, "--master") == ["spark://m1:7077"]


def test_k8s_connection(monkeypatch, bundle_dir):
    cid = _conn(
        monkeypatch,
        "spark_k8s_t",
        "k8s://https://k8s.example:6443",
        **{"deploy-mode": "cluster", "namespace": "etl", "delta_result_dir": "s3://bucket/res"},
    )
    import airflow.providers.apache.spark.hooks.spark_submit as ssh

    if getattr(ssh, "kube_client", None) is None:
        # Without the cncf-kubernetes provider the apache-spark hook cannot be built for k8s://:
        # our hook says so clearly ...
        with pytest.raises(DeltaConfigurationError, match="cncf-kubernetes"):
            _command(DeltaHook(cid, bundle_dir=bundle_dir))
        # ... and with it installed (a stand-in module object here) the command is:
        monkeypatch.setattr(ssh, "kube_client", object(), raising=False)
    cmd, application, result_uri = _command(DeltaHook(cid, bundle_dir=bundle_dir), "describe", "s3://bucket/t")
    assert _flag(cmd, "--master") == ["k8s://https://k8s.example:6443"]
    assert _flag(cmd, "--deploy-mode") == ["cluster"]
    assert "spark.kubernetes.namespace=etl" in _flag(cmd, "--conf")
    assert result_uri.startswith("s3://bucket/res/")
    assert _app_args(cmd, application)[:3] == ["describe", "--table-uri", "s3://bucket/t"]


def test_spark_binary_resolution(monkeypatch, bundle_dir, tmp_path):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    # the connection's spark-binary extra is honoured as a name on PATH
    cid = _conn(monkeypatch, "spark_bin_t", "local[1]", **{"spark-binary": "spark3-submit"})
    assert _command(DeltaHook(cid, bundle_dir=bundle_dir))[0][0] == "spark3-submit"
    # the hook argument wins
    assert (
        _command(DeltaHook(cid, bundle_dir=bundle_dir, spark_binary="/opt/x/spark-submit"))[0][0]
        == "/opt/x/spark-submit"
    )
    # SPARK_HOME wins over the pyspark-bundled one
    home = tmp_path / "spark_home"
    (home / "bin").mkdir(parents=True)
    exe = home / "bin" / "spark-submit"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert find_spark_submit() == str(exe)
    monkeypatch.delenv("SPARK_HOME")
    assert find_spark_submit() == PYSPARK_SUBMIT
    # a binary the apache-spark provider does not allow is refused up front
    bad = _conn(monkeypatch, "spark_badbin_t", "local[1]", **{"spark-binary": "/tmp/evil"})
    with pytest.raises(DeltaConfigurationError, match="spark-binary"):
        _command(DeltaHook(bad, bundle_dir=bundle_dir))


def test_missing_connection_is_a_clear_error(monkeypatch, bundle_dir):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_SPARK", raising=False)
    with pytest.raises(DeltaConfigurationError, match="'no_such_spark' does not exist"):
        _command(DeltaHook("no_such_spark", bundle_dir=bundle_dir))


def test_unknown_operation_and_options(monkeypatch, bundle_dir):
    cid = _conn(monkeypatch, "spark_local_ops", "local[1]")
    with pytest.raises(DeltaConfigurationError, match="Unknown Delta operation 'defragment'"):
        _command(DeltaHook(cid, bundle_dir=bundle_dir), "defragment")
    with pytest.raises(DeltaConfigurationError, match="executor_mem"):
        SparkSubmitOptions.coerce({"executor_mem": "1g"})


def test_user_python_settings_are_kept(monkeypatch, bundle_dir):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    cid = _conn(monkeypatch, "spark_local_py", "local[1]")
    hook = DeltaHook(cid, bundle_dir=bundle_dir, spark_conf={"spark.pyspark.python": "/opt/py/bin/python"})
    confs = dict(c.split("=", 1) for c in _flag(_command(hook)[0], "--conf"))
    assert confs["spark.pyspark.python"] == "/opt/py/bin/python"
    assert confs["spark.pyspark.driver.python"] == "/opt/py/bin/python"


# ------------------------------------------------------------------------------------------------
# the bundled apps


def test_bundle_is_cached_deterministic_and_importable(tmp_path):
    a = build_app_bundle(str(tmp_path / "a"))
    b = build_app_bundle(str(tmp_path / "b"))
    assert a.digest == b.digest
    with open(a.zip_path, "rb") as fa, open(b.zip_path, "rb") as fb:
        assert fa.read() == fb.read()
    mtime = os.stat(a.zip_path).st_mtime_ns
    again = build_app_bundle(str(tmp_path / "a"))
    assert again == a and os.stat(a.zip_path).st_mtime_ns == mtime  # not rebuilt
    names = zipfile.ZipFile(a.zip_path).namelist()
    assert (
        "airflow_delta_provider_apps/__init__.py" in names and "airflow_delta_provider_apps/engine/errors.py" in names
    )
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    # the zip alone provides the package (no site-packages: -S)
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, {a.zip_path!r}); import airflow_delta_provider_apps.versions as v; print(v.__file__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out.startswith(a.zip_path)
    assert 'runpy.run_module("airflow_delta_provider_apps"' in open(a.launcher_path).read()


# ------------------------------------------------------------------------------------------------
# output parsing and outcome mapping (pure)

SPARK_NOISE = [
    "26/01/01 10:00:00 WARN NativeCodeLoader: Unable to load native-hadoop library",
    '{"not": "a result"}',
    'Exception in thread "main" something else entirely',
]


def test_app_output_keeps_last_result_line_among_spark_log():
    ok = {"status": "ok", "operation": "WRITE", "version": 4, "metrics": {"numFiles": 2}}
    lines = [
        *SPARK_NOISE,
        json.dumps({"status": "ok", "version": 3}),
        json.dumps(ok),
        "26/01/01 10:00:01 INFO ShutdownHookManager: Shutdown hook called",
    ]
    out = AppOutput.parse(line + "\n" for line in lines)
    assert out.result == ok and out.error_class is None


@pytest.mark.parametrize(
    "line,cls,msg",
    [
        (
            "DELTA_ERROR TableNotFoundError: No Delta table at '/x'. Cause: c. Fix: f.",
            "TableNotFoundError",
            "No Delta table at '/x'. Cause: c. Fix: f.",
        ),
        (
            "DeltaError[ConcurrentAppendError]: Files were added. Fix: retry.",
            "ConcurrentAppendError",
            "Files were added. Fix: retry.",
        ),
    ],
)
def test_app_output_error_line_formats(line, cls, msg):
    out = AppOutput.parse([*SPARK_NOISE, line, "26/01/01 INFO ShutdownHookManager: bye"])
    assert (out.error_class, out.error_message, out.result) == (cls, msg, None)


def test_engine_error_retryable_from_class_name():
    assert engine_error_retryable("ConcurrentAppendError") is True
    assert engine_error_retryable("StorageError") is True
    assert engine_error_retryable("SchemaMismatchError") is False
    assert engine_error_retryable("NoSuchThing") is None


def test_outcome_result_file_wins_over_stdout():
    file_result = {"status": "ok", "version": 5, "metrics": {"numFiles": 1}}
    out = AppOutput.parse([json.dumps({"status": "ok", "version": 4})])
    assert resolve_outcome(returncode=0, file_result=file_result, output=out) == file_result
    # stdout fallback when the file never appeared
    assert resolve_outcome(returncode=0, file_result=None, output=out)["version"] == 4
    # an ok result wins over a non-zero exit (the commit landed)
    assert resolve_outcome(returncode=1, file_result=file_result, output=AppOutput())["version"] == 5


def test_outcome_error_result_file_maps_retryable_flag():
    err = {
        "status": "error",
        "error_class": "ConcurrentAppendError",
        "message": "Files were added. Fix: retry.",
        "retryable": True,
    }
    with pytest.raises(DeltaRetryableError) as ei:
        resolve_outcome(returncode=2, file_result=err, output=AppOutput())
    e = ei.value
    assert isinstance(e, AirflowException) and not isinstance(e, AirflowFailException)
    assert str(e) == "ConcurrentAppendError: Files were added. Fix: retry."
    assert e.result == err and e.retryable

    bad = {
        "status": "error",
        "error_class": "SchemaMismatchError",
        "message": "Column x is missing.",
        "retryable": False,
    }
    with pytest.raises(DeltaPermanentError) as ei:
        resolve_outcome(returncode=1, file_result=bad, output=AppOutput.parse(["lots", "of", "spark", "log"]))
    assert isinstance(ei.value, AirflowFailException)
    assert str(ei.value) == "SchemaMismatchError: Column x is missing."  # the one line, no log pages


def test_outcome_stdout_error_line_uses_exit_code_and_class():
    line = "DELTA_ERROR TableNotFoundError: No Delta table at '/x'."
    with pytest.raises(DeltaPermanentError, match="^TableNotFoundError: No Delta table"):
        resolve_outcome(returncode=1, file_result=None, output=AppOutput.parse([line]))
    with pytest.raises(DeltaRetryableError):  # exit code 2 = retryable by contract
        resolve_outcome(returncode=2, file_result=None, output=AppOutput.parse(["DELTA_ERROR OSError: disk gone"]))
    with pytest.raises(DeltaRetryableError):  # a retryable engine class, whatever the exit code
        resolve_outcome(
            returncode=1,
            file_result=None,
            output=AppOutput.parse(["DELTA_ERROR ConcurrentDeleteReadError: lost the race."]),
        )


def test_outcome_without_any_report():
    noisy = AppOutput.parse([f"log line {i}" for i in range(200)])
    with pytest.raises(DeltaRetryableError, match="SparkSubmitError") as ei:
        resolve_outcome(returncode=137, file_result=None, output=noisy, submit_error="Cannot execute: x\nmore")
    assert "log line 199" in str(ei.value) and "log line 150" not in str(ei.value)  # a short tail only
    with pytest.raises(DeltaPermanentError, match="MissingResultError"):
        resolve_outcome(returncode=0, file_result=None, output=AppOutput())


# ------------------------------------------------------------------------------------------------
# run() against a stand-in spark-submit executable

FAKE_SPARK_SUBMIT = r'''#!{python}
"""Stand-in for spark-submit: records argv, then behaves like the Delta app in $FAKE_MODE."""
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_ARGV_FILE"], "w") as f:
    json.dump(argv, f)
app = next(i for i, a in enumerate(argv) if a.endswith(".py"))
args = argv[app + 1:]
op = args[0]
result_uri = args[args.index("--result-uri") + 1]
spec = json.loads(args[args.index("--spec-json") + 1])
mode = os.environ["FAKE_MODE"]
print("26/01/01 10:00:00 WARN NativeCodeLoader: Unable to load native-hadoop library", file=sys.stderr, flush=True)
ok = {{"status": "ok", "operation": "WRITE", "table_uri": spec["table_uri"], "version": 3, "skipped": False,
      "metrics": {{"numFiles": 1, "numOutputRows": 10}}}}
if mode == "file":
    with open(result_uri, "w") as f:
        json.dump(ok, f)
    print(json.dumps({{**ok, "version": -1}}), flush=True)   # the file must win
elif mode == "stdout":
    print(json.dumps(ok), flush=True)
elif mode == "retryable":
    err = {{"status": "error", "error_class": "ConcurrentAppendError", "message": "A concurrent WRITE added files. Fix: retry.", "retryable": True}}
    with open(result_uri, "w") as f:
        json.dump(err, f)
    print("DELTA_ERROR ConcurrentAppendError: A concurrent WRITE added files. Fix: retry.", flush=True)
    sys.exit(2)
elif mode == "fail_stdout_only":
    print("Traceback (most recent call last):\n  File x\nSchemaMismatchError: ...", file=sys.stderr, flush=True)
    print("DELTA_ERROR SchemaMismatchError: Column 'amount' has type string, the table has double.", flush=True)
    sys.exit(1)
elif mode == "sleep":
    print("running", flush=True)
    import time
    time.sleep(120)
elif mode == "crash":
    for i in range(50):
        print(f"\tat org.apache.spark.Something.method{{i}}(Something.scala:{{i}})", file=sys.stderr, flush=True)
    sys.exit(1)
print("26/01/01 10:00:01 INFO ShutdownHookManager: Shutdown hook called", file=sys.stderr, flush=True)
'''


@pytest.fixture
def fake_spark(tmp_path, monkeypatch):
    exe = tmp_path / "fake-spark-submit"
    exe.write_text(FAKE_SPARK_SUBMIT.format(python=sys.executable))
    exe.chmod(0o755)
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_ARGV_FILE", str(argv_file))
    cid = _conn(monkeypatch, "spark_fake_t", "local[1]")

    def run(mode: str, **params):
        monkeypatch.setenv("FAKE_MODE", mode)
        hook = DeltaHook(cid, spark_binary=str(exe), bundle_dir=str(tmp_path / "bundles"))
        return hook.run("write", str(tmp_path / "table"), mode="append", source="/in", source_format="csv", **params)

    run.argv = lambda: json.loads(argv_file.read_text())
    return run


def test_run_reads_result_file_and_deletes_it(fake_spark):
    result = fake_spark("file")
    assert result["version"] == 3 and result["metrics"]["numOutputRows"] == 10
    argv = fake_spark.argv()
    result_uri = argv[argv.index("--result-uri") + 1]
    assert not os.path.exists(result_uri)


def test_run_falls_back_to_stdout(fake_spark):
    assert fake_spark("stdout")["version"] == 3


def test_run_retryable_error(fake_spark):
    with pytest.raises(DeltaRetryableError) as ei:
        fake_spark("retryable")
    assert str(ei.value) == "ConcurrentAppendError: A concurrent WRITE added files. Fix: retry."


def test_run_permanent_error_from_stdout_only(fake_spark):
    with pytest.raises(DeltaPermanentError) as ei:
        fake_spark("fail_stdout_only")
    assert str(ei.value) == ("SchemaMismatchError: Column 'amount' has type string, the table has double.")
    assert isinstance(ei.value, DeltaTaskError) and ei.value.error_class == "SchemaMismatchError"


def test_run_crash_before_report_is_retryable_with_short_tail(fake_spark):
    with pytest.raises(DeltaRetryableError, match="SparkSubmitError") as ei:
        fake_spark("crash")
    assert "method49" in str(ei.value) and "method10(" not in str(ei.value)
    assert len(str(ei.value)) < 2000


def test_on_kill_is_delegated_to_the_submission(tmp_path, monkeypatch):
    DeltaHook("whatever").on_kill()  # nothing submitted: nothing to kill, no error
    exe = tmp_path / "fake-spark-submit"
    exe.write_text(FAKE_SPARK_SUBMIT.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_ARGV_FILE", str(tmp_path / "argv.json"))
    monkeypatch.setenv("FAKE_MODE", "sleep")
    cid = _conn(monkeypatch, "spark_fake_kill", "local[1]")
    hook = DeltaHook(cid, spark_binary=str(exe), bundle_dir=str(tmp_path / "bundles"))
    outcome = {}

    def run():
        try:
            hook.run("checkpoint", str(tmp_path / "t"))
        except Exception as e:
            outcome["error"] = e

    worker = threading.Thread(target=run)
    started = time.monotonic()
    worker.start()
    while (
        hook.transport_for_connection()._submit_hook is None
        or hook.transport_for_connection()._submit_hook._submit_sp is None
    ) and time.monotonic() - started < 30:
        time.sleep(0.05)
    hook.on_kill()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert hook.transport_for_connection()._submit_hook._submit_sp.returncode != 0
    assert isinstance(outcome["error"], DeltaRetryableError)  # killed before reporting: retry may help


@pytest.mark.parametrize(
    "lines, cause",
    [
        (
            [
                "26/01/01 WARN StandaloneAppClient$ClientEndpoint: Failed to connect to master nowhere:7077",
                "26/01/01 ERROR StandaloneSchedulerBackend: Application has been killed. Reason: All masters are unresponsive! Giving up.",
            ],
            "cannot reach the Spark master 'spark://nowhere:7077'",
        ),
        (["WARN TaskSchedulerImpl: Initial job has not accepted any resources; check your cluster UI"], "no resources"),
        (["ERROR YarnScheduler: Lost executor 1: Container killed by YARN for exceeding memory limits"], "were lost"),
    ],
)
def test_infrastructure_failures_are_retryable_with_a_one_line_cause(lines, cause):
    from airflow_delta_provider.exceptions import DeltaRetryableError
    from airflow_delta_provider.hooks.delta import AppOutput, resolve_outcome

    with pytest.raises(DeltaRetryableError) as e:
        resolve_outcome(
            returncode=1,
            file_result=None,
            output=AppOutput.parse(x + "\n" for x in lines),
            master="spark://nowhere:7077",
        )
    assert cause in str(e.value)


def test_bad_input_stays_permanent():
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.hooks.delta import AppOutput, resolve_outcome

    out = AppOutput.parse(["DELTA_ERROR InvalidPredicateError: Unknown column 'x'. Fix: use a column.\n"])
    with pytest.raises(DeltaPermanentError):
        resolve_outcome(returncode=1, file_result=None, output=out)


def test_app_side_spark_failures_become_retryable_errors():
    from airflow_delta_provider_apps import cli

    err = cli.as_delta_error(RuntimeError("java.io.IOException: Failed to connect to master localhost:1"))
    assert err.retryable and "cannot reach the Spark master" in err.problem


def test_stack_traces_stay_out_of_the_task_log_unless_verbose(monkeypatch):
    import airflow.providers.apache.spark.hooks.spark_submit as ss

    from airflow_delta_provider.hooks.delta import CapturingSparkSubmitHook

    lines = [
        "26/01/01 ERROR Executor: Exception in task 0.0",
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):",
        '  File "/x/worker.py", line 1, in main',
        "\tat org.apache.spark.api.python.BasePythonRunner.handle(PythonRunner.scala:572)",
        "\t... 20 more",
        "Caused by: java.lang.RuntimeException: boom",
        "DELTA_ERROR SchemaMismatchError: Column 'id' is NOT NULL. Fix: drop the nulls.",
    ]
    logged: list = []
    # the parent's log processing (Airflow's SparkSubmitHook) is the external boundary: record what reaches it
    monkeypatch.setattr(ss.SparkSubmitHook, "_process_spark_submit_log", lambda self, itr: logged.extend(itr))
    for verbose, shown in ((False, 2), (True, 7)):
        logged.clear()
        hook = CapturingSparkSubmitHook(conn_id="spark_default", show_traces=verbose)
        hook._process_spark_submit_log(iter(lines))
        assert len(logged) == shown, logged
        assert hook.app_output.error_class == "SchemaMismatchError"  # the error line always gets through


def test_a_mixed_pyspark_install_fails_at_the_first_task_with_the_fix(monkeypatch):
    import airflow_delta_provider_apps.versions as versions
    from airflow_delta_provider.hooks import submit as hook_mod

    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setattr(hook_mod, "_PYSPARK_CHECKED", {})
    # what pyspark-client leaves behind: Python code of one release, no jars (a real install is read
    # for the happy path below; the mixed one is simulated at its only input, the version probe)
    monkeypatch.setattr(
        versions, "pyspark_versions", lambda: {"python": "4.3.0", "jars": None, "spark_home": "/x", "num_core_jars": 0}
    )
    with pytest.raises(hook_mod.DeltaConfigurationError, match="pip uninstall -y pyspark-client pyspark"):
        hook_mod.check_pyspark_install("/venv/lib/pyspark/bin/spark-submit")
    monkeypatch.undo()
    monkeypatch.setattr(hook_mod, "_PYSPARK_CHECKED", {})
    monkeypatch.delenv("SPARK_HOME", raising=False)
    hook_mod.check_pyspark_install("/venv/lib/pyspark/bin/spark-submit")  # this machine's install is sound


def _captured(name: str) -> list[str]:
    path = Path(__file__).parent / "data" / name
    return [line for line in path.read_text().splitlines(keepends=True) if not line.startswith("# ")]


def test_an_unreachable_master_in_real_spark_submit_output_is_retryable_and_named():
    # Real output of the bundled app under spark-submit against a master nobody listens on: Spark logs
    # "Failed to connect to master" and "All masters are unresponsive", stops the SparkContext, and the
    # app itself only sees "Cannot call methods on a stopped SparkContext".
    from airflow_delta_provider.exceptions import DeltaRetryableError
    from airflow_delta_provider.hooks.delta import AppOutput, resolve_outcome
    from airflow_delta_provider_apps import cli

    output = AppOutput.parse(_captured("spark_submit_unreachable_master.log"))
    assert output.error_class == "DeltaError"  # the line the app printed
    with pytest.raises(DeltaRetryableError) as e:
        resolve_outcome(returncode=1, file_result=None, output=output, master="spark://127.0.0.1:7")
    assert "cannot reach the Spark master 'spark://127.0.0.1:7'" in str(e.value)
    assert "\n" not in str(e.value)

    # the same through the result file the app writes: the app now classifies what it saw as retryable
    app_seen = RuntimeError(
        "An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.\n"
        ": java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext."
    )
    err = cli.as_delta_error(app_seen)
    assert err.retryable
    file_result = {"status": "error", **err.to_dict()}
    with pytest.raises(DeltaRetryableError) as e:
        resolve_outcome(returncode=1, file_result=file_result, output=output, master="spark://127.0.0.1:7")
    assert "cannot reach the Spark master" in str(e.value)


def test_bad_input_stays_permanent_even_when_spark_logged_connection_trouble():
    from airflow_delta_provider.exceptions import DeltaPermanentError
    from airflow_delta_provider.hooks.delta import AppOutput, resolve_outcome

    lines = _captured("spark_submit_unreachable_master.log")[:-1] + [
        "DELTA_ERROR InvalidPredicateError: Unknown column 'x'. Fix: use one of the table's columns.\n"
    ]
    with pytest.raises(DeltaPermanentError):
        resolve_outcome(returncode=1, file_result=None, output=AppOutput.parse(lines), master="spark://h:7077")


def test_an_unreachable_standalone_master_fails_in_seconds_before_spark_submit():
    import socket

    from airflow_delta_provider.exceptions import DeltaRetryableError
    from airflow_delta_provider.hooks.delta import check_master_reachable

    with socket.socket() as s:  # a port nobody listens on: bind, never listen
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(DeltaRetryableError) as e:
            check_master_reachable(f"spark://127.0.0.1:{port}")
    assert f"cannot reach the Spark master 'spark://127.0.0.1:{port}'" in str(e.value)
    with socket.socket() as s:  # one of two HA masters answering is enough
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_master_reachable(f"spark://127.0.0.1:1,127.0.0.1:{s.getsockname()[1]}")
    for master in ("local[2]", "yarn", "k8s://https://api:6443", None):
        check_master_reachable(master)  # not probed


def test_an_executor_error_reaches_the_task_log_as_the_apps_one_line(monkeypatch):
    """Real output of a runtime failure in a Spark task: the log keeps Spark's own log lines and the
    app's one-line error; the marked payload, Python traceback and Java frames stay out unless verbose."""
    import airflow.providers.apache.spark.hooks.spark_submit as ss

    from airflow_delta_provider.hooks.delta import CapturingSparkSubmitHook

    lines = _captured("spark_submit_executor_error.log")
    logged: list = []
    monkeypatch.setattr(ss.SparkSubmitHook, "_process_spark_submit_log", lambda self, itr: logged.extend(itr))
    hook = CapturingSparkSubmitHook(conn_id="spark_default")
    hook._process_spark_submit_log(iter(lines))
    text = "".join(logged)
    for noise in ("<<DELTA_EXECUTOR_ERROR>>", "\tat org.", "SQLSTATE", "raise RuntimeError", "Traceback"):
        assert noise not in text, noise
    assert "ERROR Executor: Exception in task 0.0" in text and "Lost task" not in text  # a WARN: hidden
    assert "DELTA_ERROR InvalidPredicateError: Cannot evaluate the expression" in text
    assert hook.app_output.error_class == "InvalidPredicateError" and hook.hidden_trace_lines > 50
    logged.clear()
    CapturingSparkSubmitHook(conn_id="spark_default", show_traces=True)._process_spark_submit_log(iter(lines))
    assert len(logged) == len(lines)


def test_the_task_log_shows_the_apps_phases_and_a_metrics_summary_not_sparks_chatter(monkeypatch):
    import airflow.providers.apache.spark.hooks.spark_submit as ss

    from airflow_delta_provider.hooks.delta import CapturingSparkSubmitHook, DeltaHook, metrics_summary

    lines = [
        "WARNING: Using incubator modules: jdk.incubator.vector\n",
        "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties\n",
        "26/11/24 00:10:57 WARN NativeCodeLoader: Unable to load native-hadoop library\n",
        'DELTA_PROGRESS {"operation":"DELETE","phase":"files","table":20,"candidates":3,"bytes":100}\n',
        'DELTA_PROGRESS {"operation":"DELETE","phase":"rewritten","files":1,"matched":12}\n',
        'DELTA_PROGRESS {"operation":"MERGE","phase":"upsert","deletion_vectors":1}\n',
        '{"status":"ok","operation":"DELETE","version":4,"metrics":{"numDeletedRows":12}}\n',
    ]
    logged: list = []
    monkeypatch.setattr(ss.SparkSubmitHook, "_process_spark_submit_log", lambda self, itr: logged.extend(itr))
    hook = CapturingSparkSubmitHook(conn_id="spark_default")
    hook._process_spark_submit_log(iter(lines))
    assert logged == [
        "DELETE: 3 of 20 files to read after skipping\n",
        "DELETE: 1 files rewritten, 12 rows matched\n",
        "MERGE: an upsert: only the keys are joined, the matched rows marked in deletion vectors, the source rows written\n",
        lines[-1],
    ]
    assert hook.app_output.result["version"] == 4 and hook.hidden_noise_lines == 3
    summary = metrics_summary("delete", {"numRemovedFiles": 1, "numDeletedRows": 12, "other": 5})
    assert summary == "; numRemovedFiles=1, numDeletedRows=12"
    assert DeltaHook  # the hook logs this summary with each result (_log_result)


def test_a_delta_spark_connection_works_like_a_spark_one(monkeypatch, bundle_dir):
    """The provider's connection type (its UI form has the result folder): the master and extras are
    read as from a ``spark`` connection, by us and by SparkSubmitHook; the form's prefixed extra too."""
    for conn_id, extra in (
        ("delta_yarn", {"deploy-mode": "cluster", "delta_result_dir": "hdfs://nn/tmp/r"}),
        (
            "delta_yarn_form",
            {
                "extra__delta_spark__deploy-mode": "x",
                "deploy-mode": "cluster",
                "extra__delta_spark__delta_result_dir": "hdfs://nn/tmp/r",
            },
        ),
    ):
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "delta_spark", "host": "yarn", "extra": extra})
        )
        cmd, _, result_uri = _command(DeltaHook(conn_id, bundle_dir=bundle_dir), "checkpoint", "hdfs://nn/lake/t")
        assert _flag(cmd, "--master") == ["yarn"] and _flag(cmd, "--deploy-mode") == ["cluster"]
        assert result_uri.startswith("hdfs://nn/tmp/r/delta-result-")
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_LOCAL", json.dumps({"conn_type": "delta_spark", "host": "local[2]"}))
    cmd, _, _ = _command(DeltaHook("delta_local", bundle_dir=bundle_dir), "checkpoint", "/lake/t")
    assert _flag(cmd, "--master") == ["local[2]"]


def test_the_spark_application_link_comes_from_spark_submits_output(monkeypatch):
    """YARN's tracking URL (or the driver's Spark UI in client mode) becomes the operator's
    "Spark application" link; without one (local masters run without a UI) there is no link."""
    import airflow.providers.apache.spark.hooks.spark_submit as ss

    from airflow_delta_provider.hooks.delta import CapturingSparkSubmitHook
    from airflow_delta_provider.operators.delta import DeltaCheckpointOperator, SparkApplicationLink

    monkeypatch.setattr(ss.SparkSubmitHook, "_process_spark_submit_log", lambda self, itr: list(itr))
    cases = [
        (["INFO Client: Submitting application application_1_0002 to ResourceManager",
          "\t tracking URL: http://rm:8088/proxy/application_1_0002/"], "http://rm:8088/proxy/application_1_0002/"),
        (["INFO SparkUI: Bound SparkUI to 0.0.0.0, and started at http://driver:4040"], "http://driver:4040"),
        (["WARN NativeCodeLoader: Unable to load native-hadoop library"], None),
    ]  # fmt: skip
    op = DeltaCheckpointOperator(task_id="cp", table_uri="/lake/t")
    assert SparkApplicationLink().get_link(op, ti_key=None) == ""  # no run yet: no link
    for lines, url in cases:
        sub = CapturingSparkSubmitHook(conn_id="spark_default")
        sub._process_spark_submit_log(iter(lines))
        assert sub.application_url == url
        hook = DeltaHook("spark_default")
        hook.transport = SubmitTransport(hook)
        hook.transport._submit_hook = sub
        op.__dict__["hook"] = hook
        assert SparkApplicationLink().get_link(op, ti_key=None) == (url or "")
