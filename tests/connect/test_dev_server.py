"""The development Connect server (``python -m airflow_delta_provider_apps.connect_server``) takes its
JVM with it however the launcher ends: after SIGTERM (kill, a supervisor) and after kill -9 of the
launcher no JVM is left and the port is free; a port that already answers is refused (the clients would
talk to the server already there). The two launchers start together: one JVM start-up's wait."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_delta_provider_apps.connect_server import ConnectServer, free_port

LAUNCHER = [sys.executable, "-m", "airflow_delta_provider_apps.connect_server"]


@dataclass
class Launcher:
    proc: subprocess.Popen
    port: int
    out: Path
    jvm: int = 0


def _alive(pid: int) -> bool:
    """Running. A zombie nobody reaped yet counts as gone once all its threads exited (a JVM's main
    thread is a zombie while its other threads still tear down, holding its port)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return False
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z" or threads > 1


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


def _listeners(port: int) -> str:
    """What holds the port (for a failure's message)."""
    try:
        return subprocess.run(["ss", "-ltnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    except OSError as e:
        return str(e)


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="module")
def launchers(tmp_path_factory):
    """Two launchers, each once its server answers, with its JVM's pid (which it prints)."""
    tmp = tmp_path_factory.mktemp("launchers")
    started = []
    ports = set()
    while len(ports) < 2:
        ports.add(free_port())
    try:
        for port in sorted(ports):
            out = tmp / f"launcher-{port}.out"
            with open(out, "w") as f:
                proc = subprocess.Popen([*LAUNCHER, "--port", str(port)], stdout=f, stderr=subprocess.STDOUT)
            started.append(Launcher(proc, port, out))
        deadline = time.monotonic() + 150
        for launcher in started:
            while not (m := re.search(r"JVM pid (\d+)", launcher.out.read_text())):
                assert launcher.proc.poll() is None, launcher.out.read_text()
                assert time.monotonic() < deadline, launcher.out.read_text()
                time.sleep(0.2)
            launcher.jvm = int(m.group(1))
            assert _alive(launcher.jvm) and _answers(launcher.port)
        yield started
    finally:
        for launcher in started:
            launcher.proc.kill()
            launcher.proc.wait()
            if launcher.jvm and _alive(launcher.jvm):  # the test failed: leave nothing running
                os.kill(launcher.jvm, signal.SIGKILL)


def test_sigterm_of_the_launcher_stops_the_jvm_and_frees_the_port(launchers):
    launcher = launchers[0]
    launcher.proc.send_signal(signal.SIGTERM)
    assert launcher.proc.wait(timeout=60) == 0, launcher.out.read_text()
    assert not _alive(launcher.jvm)  # stopped and waited for before the launcher exited
    assert not _answers(launcher.port)


def test_kill_9_of_the_launcher_kills_the_jvm_and_frees_the_port(launchers):
    launcher = launchers[1]
    launcher.proc.kill()
    launcher.proc.wait()
    assert _gone_within(launcher.jvm, 30)
    assert not _answers(launcher.port), _listeners(launcher.port)


def test_a_port_that_answers_is_refused():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {port} on 127.0.0.1 already answers"):
            ConnectServer(port=port)
        p = subprocess.run([*LAUNCHER, "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert f"port {port} on 127.0.0.1 already answers" in p.stderr and f"lsof -iTCP:{port}" in p.stderr
    assert "JVM pid" not in p.stdout
