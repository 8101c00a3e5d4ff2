"""A local Spark Connect server started from the installed pyspark distribution (development, the demo,
the bench and the tests): ``python -m airflow_delta_provider_apps.connect_server [--port 15002]``.

pyspark's wheel ships ``bin/spark-submit`` and the Connect jar; this runs the server class with it (as
``sbin/start-connect-server.sh --wait`` does, without that script's extra shell, so the JVM is this
process's own child) with ``SPARK_HOME`` set to the pyspark folder, on loopback, ``local[2]`` by
default, the server's Python workers on this interpreter (they import the engine from the zip each
session adds, and need pyarrow). Its driver JVM exits on an OutOfMemoryError, as a production server
should: clients then fail instead of waiting on a wedged server. Needs Java, like any Spark server.

The JVM dies with whatever started it: :meth:`ConnectServer.stop` kills its process group (the JVM and
its Python workers); on Linux the JVM gets SIGKILL when its parent dies, even by kill -9; the launcher
(``main``) stops it on SIGTERM, SIGHUP and Ctrl-C. A port that already answers is refused: the clients
would talk to the server already there.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["ConnectServer", "free_port"]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.extraJavaOptions": "-XX:+ExitOnOutOfMemoryError",
    # tasks share sessions (see airflow_delta_provider_apps.connect): a quiet night must not close them,
    # since each new session costs the server its own Python workers until it stops (SPARK-54055)
    "spark.connect.session.manager.defaultSessionTimeout": "7d",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pyspark_home() -> str:
    spec = importlib.util.find_spec("pyspark")
    home = Path(spec.origin).parent if spec and spec.origin else None
    if home is None or not (home / "bin" / "spark-submit").exists():
        raise RuntimeError(
            "The installed pyspark has no bin/spark-submit: install the full pyspark "
            "distribution (pip install 'airflow-delta-provider[pyspark]'), not pyspark-client alone"
        )
    return str(home)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def _die_with_parent():
    """A ``preexec_fn``: the child (the JVM, spark-submit execs it) gets SIGKILL when this process dies
    (Linux ``prctl(PR_SET_PDEATHSIG)``, kept across exec); ``None`` where there is no prctl."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: the child only calls it
    except (AttributeError, OSError):
        return None
    parent, kill = os.getpid(), int(signal.SIGKILL)

    def set_death_signal() -> None:
        prctl(1, kill, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl: nothing would signal
            os.kill(os.getpid(), signal.SIGKILL)

    return set_death_signal


class ConnectServer:
    """One Spark Connect server process on loopback; :attr:`url` is its ``sc://`` address. Create it
    from a thread that outlives it: on Linux the JVM is killed when the thread that started it ends.

    :param port: the port (default: a free one)
    :param master: the server's Spark master
    :param conf: more Spark properties of the server
    :param event_log: keep the server's event log (plans, properties, jobs: what its UI shows) in
        :attr:`event_dir`, uncompressed
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        master: str = "local[2]",
        conf: dict[str, str] | None = None,
        event_log: bool = False,
        timeout: float = 90,
    ) -> None:
        self.port = port or free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        if _listening(self.port):
            raise RuntimeError(
                f"port {self.port} on 127.0.0.1 already answers: another server (an earlier Spark Connect "
                f"server?) holds it, and clients would talk to it. Find it with `lsof -iTCP:{self.port} "
                f"-sTCP:LISTEN` (or `ss -ltnp 'sport = :{self.port}'`) and stop it, or choose another port"
            )
        self.log_dir = tempfile.mkdtemp(prefix="spark-connect-")
        self.event_dir = os.path.join(self.log_dir, "events")
        home = pyspark_home()
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            **DEFAULT_CONF,
            **(conf or {}),
        }
        if event_log:
            os.makedirs(self.event_dir)
            settings.update(
                {
                    "spark.eventLog.enabled": "true",
                    "spark.eventLog.dir": f"file://{self.event_dir}",
                    "spark.eventLog.compress": "false",
                }
            )
        args = [os.path.join(home, "bin", "spark-submit"), "--class", SERVER_CLASS, "--name", "Spark Connect server"]
        args += ["--master", master]
        for k, v in settings.items():
            args += ["--conf", f"{k}={v}"]
        env = {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_CONNECT_MODE": "0",  # as start-connect-server.sh sets it
            "SPARK_LOG_DIR": self.log_dir,
            "SPARK_PID_DIR": self.log_dir,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        }
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        self.log_path = os.path.join(self.log_dir, "server.out")
        started = time.monotonic()
        with open(self.log_path, "wb") as out:
            self._proc = subprocess.Popen(
                args,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() kills the JVM and its workers
                preexec_fn=_die_with_parent(),
            )
        try:
            while not _listening(self.port):
                if self._proc.poll() is not None or time.monotonic() - started > timeout:
                    raise RuntimeError(f"the Spark Connect server did not start; its output:\n{self.output()[-3000:]}")
                time.sleep(0.2)
        except BaseException:  # a timeout, Ctrl-C or a signal while starting
            self.stop()
            raise

    @property
    def pid(self) -> int:
        """The server's JVM."""
        return self._proc.pid

    def output(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def event_log(self) -> str:
        """The server's event log so far (with ``event_log=True``)."""
        files = sorted(p for p in Path(self.event_dir).rglob("*") if p.is_file())
        return "".join(p.read_text(errors="replace") for p in files)

    def kill(self) -> None:
        """kill -9 of the whole server (the JVM and its Python workers): a crash, not a shutdown."""
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._proc.wait(timeout=30)

    def stop(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGTERM)
            self._proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> ConnectServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _Stopped(Exception):
    pass


def _stop_on_signal(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the stop itself is not interrupted
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    raise _Stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a local Spark Connect server until interrupted.")
    parser.add_argument("--port", type=int, default=15002)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    conf = dict(item.split("=", 1) for item in args.conf)
    signal.signal(signal.SIGTERM, _stop_on_signal)  # kill, a supervisor, a closed terminal: stop the JVM
    signal.signal(signal.SIGHUP, _stop_on_signal)
    try:
        with ConnectServer(port=args.port, master=args.master, conf=conf) as server:
            print(
                f"Spark Connect server at {server.url} (JVM pid {server.pid}, output: {server.log_path}); "
                "Ctrl-C or SIGTERM stops it",
                flush=True,
            )
            while server._proc.poll() is None:
                time.sleep(1)
            print(f"The server exited with code {server._proc.returncode}; its output: {server.log_path}", flush=True)
            return 1
    except (KeyboardInterrupt, _Stopped):
        return 0
    except RuntimeError as e:
        print(f"Spark Connect server not started: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
