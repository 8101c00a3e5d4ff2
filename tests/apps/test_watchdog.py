"""The app's watchdog under spark-submit: when the driver JVM (this process's parent) dies, the app
prints its error line and exits with the retryable code at once, whatever the main thread waits on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from airflow_delta_provider_apps.cli import watch_driver_jvm
    watch_driver_jvm(interval=0.1)
    print("watching", os.getpid(), flush=True)
    time.sleep(120)  # a call into a dead JVM that never returns
    """
)


def test_the_app_exits_when_its_driver_jvm_dies(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "out.txt"
    # the shell stands in for the driver JVM: it starts the app and dies
    parent = subprocess.Popen(["sh", "-c", f"'{sys.executable}' '{script}' > '{out}' 2>&1 & sleep 1"])
    parent.wait(timeout=30)
    started = time.monotonic()
    while "DELTA_ERROR" not in out.read_text() and time.monotonic() - started < 20:
        time.sleep(0.1)
    text = out.read_text()
    assert "watching" in text
    assert "DELTA_ERROR SparkInfrastructureError: Spark failed: the Spark driver JVM died" in text
    assert time.monotonic() - started < 20
    pid = int(text.split("watching", 1)[1].split()[0])
    time.sleep(0.3)
    assert _state(pid) in (None, "Z")  # it exited (a zombie until its new parent reaps it)


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None
