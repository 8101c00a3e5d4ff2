"""A Spark Connect server on loopback for the tests, started from the installed pyspark distribution.

``sbin/start-connect-server.sh --wait`` (pyspark ships it and the Connect jar), ``local[2]``, a free
loopback port, the server's Python workers on this interpreter (they import the engine from the zip
each session adds, and need pyarrow). The JVM exits on an OutOfMemoryError, as a production server
should: a client then fails instead of waiting on a wedged server. Stopped by killing its process
group (the script execs spark-submit, which starts the JVM).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from object_store_servers import free_port, wait_for_port


def pyspark_home() -> str:
    import importlib.util

    return str(Path(importlib.util.find_spec("pyspark").origin).parent)


class ConnectServer:
    """One Spark Connect server process; :attr:`url` is its ``sc://`` address."""

    def __init__(self, *, port: int | None = None, conf: dict[str, str] | None = None, timeout: float = 90) -> None:
        self.port = port or free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log_dir = tempfile.mkdtemp(prefix="spark-connect-")
        self.event_dir = os.path.join(self.log_dir, "events")  # what the server's UI shows, as files
        os.makedirs(self.event_dir)
        home = pyspark_home()
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "8",
            "spark.driver.extraJavaOptions": "-XX:+ExitOnOutOfMemoryError",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{self.event_dir}",
            "spark.eventLog.compress": "false",
            **(conf or {}),
        }
        args = [os.path.join(home, "sbin", "start-connect-server.sh"), "--wait", "--master", "local[2]"]
        for k, v in settings.items():
            args += ["--conf", f"{k}={v}"]
        env = {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_LOG_DIR": self.log_dir,
            "SPARK_PID_DIR": self.log_dir,
            "PYSPARK_PYTHON": sys.executable,
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        }
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        self.log_path = os.path.join(self.log_dir, "server.out")
        with open(self.log_path, "wb") as out:
            self._proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_port(self.port, "the Spark Connect server", timeout=timeout)
        except RuntimeError:
            self.stop()
            raise RuntimeError(
                f"the Spark Connect server did not start; its output:\n{self.output()[-3000:]}"
            ) from None

    def output(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def event_log(self) -> str:
        """The server's event log so far: plans, properties and job descriptions, all its UI shows."""
        return "".join(p.read_text(errors="replace") for p in sorted(Path(self.event_dir).rglob("*")) if p.is_file())

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
