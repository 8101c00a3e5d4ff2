"""A local Spark Connect server started from the installed pyspark distribution (development, the demo,
the bench and the tests): ``python -m airflow_delta_provider_apps.connect_server [--port 15002]``.

pyspark's wheel ships ``sbin/start-connect-server.sh`` and the Connect jar; this runs it in the
foreground (``--wait``) with ``SPARK_HOME`` set to the pyspark folder, on loopback, ``local[2]`` by
default, the server's Python workers on this interpreter (they import the engine from the zip each
session adds, and need pyarrow). Its driver JVM exits on an OutOfMemoryError, as a production server
should: clients then fail instead of waiting on a wedged server. It is stopped by killing its process
group (the script execs spark-submit, which starts the JVM). Needs Java, like any Spark server.
"""

from __future__ import annotations

import argparse
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

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.extraJavaOptions": "-XX:+ExitOnOutOfMemoryError",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pyspark_home() -> str:
    spec = importlib.util.find_spec("pyspark")
    home = Path(spec.origin).parent if spec and spec.origin else None
    if home is None or not (home / "sbin" / "start-connect-server.sh").exists():
        raise RuntimeError(
            "The installed pyspark has no sbin/start-connect-server.sh: install the full pyspark "
            "distribution (pip install 'airflow-delta-provider[pyspark]'), not pyspark-client alone"
        )
    return str(home)


class ConnectServer:
    """One Spark Connect server process on loopback; :attr:`url` is its ``sc://`` address.

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
        args = [os.path.join(home, "sbin", "start-connect-server.sh"), "--wait", "--master", master]
        for k, v in settings.items():
            args += ["--conf", f"{k}={v}"]
        env = {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_LOG_DIR": self.log_dir,
            "SPARK_PID_DIR": self.log_dir,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        }
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        self.log_path = os.path.join(self.log_dir, "server.out")
        started = time.monotonic()
        with open(self.log_path, "wb") as out:
            self._proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while not self._listening():
            if self._proc.poll() is not None or time.monotonic() - started > timeout:
                self.stop()
                raise RuntimeError(f"the Spark Connect server did not start; its output:\n{self.output()[-3000:]}")
            time.sleep(0.2)

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a local Spark Connect server until interrupted.")
    parser.add_argument("--port", type=int, default=15002)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    conf = dict(item.split("=", 1) for item in args.conf)
    with ConnectServer(port=args.port, master=args.master, conf=conf) as server:
        print(f"Spark Connect server at {server.url} (output: {server.log_path}); Ctrl-C stops it", flush=True)
        try:
            while server._proc.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
