"""Run a child process with a deadline and measure the peak memory of everything it starts.

:func:`run_measured` starts ``cmd`` in its own process group (stdout and stderr to files, never
pipes: a chatty JVM cannot block on a full pipe), then every ``interval`` seconds walks the child's
process tree (and the trees of ``watch_pids``, e.g. a Spark Connect server started elsewhere) and
records, per process, its peak resident set (``VmHWM`` of ``/proc/<pid>/status``: the kernel's own
high-water mark, so a peak between two samples is not missed as long as the process is alive at
the next sample) and, per sample, the sum of the current resident sets (``VmRSS``) of all of them.

Each process gets a role from its name and command line:

* ``jvm``: a ``java`` process (the spark-submit driver JVM, or the Connect server's);
* ``task``: the child itself (the Airflow hook, the Connect client, or the deltalake process);
* ``app``: a Python process started by a JVM that runs the spark-submit launcher (the engine's
  driver process under spark-submit);
* ``worker``: Spark's Python workers (``pyspark.daemon`` and the workers it forks);
* ``other``: anything else (shells the launch scripts run before exec).

On expiry of ``timeout`` the child's whole process group is killed (SIGKILL), then any process of
its tree still alive (recorded by pid, e.g. one that left the group); the result says ``timeout``.
The child is reaped with ``os.wait4``: its ``ru_maxrss`` (the largest resident set of the child and
of its reaped descendants, as the kernel counts it) is reported beside the samples.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20


def _status(pid: int) -> tuple[str, dict[str, int]]:
    """The process's name and its ``VmHWM`` / ``VmRSS`` in kB (empty when it is gone)."""
    name, out = "", {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k == "Name":
                    name = v.strip()
                elif k in ("VmHWM", "VmRSS"):
                    out[k] = int(v.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return name, out


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.Error:
        return []


def _role(pid: int, top: int) -> str:
    import psutil

    if pid == top:
        return "task"
    try:
        p = psutil.Process(pid)
        name = p.name()
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return "other"
    if name == "java":
        return "jvm"
    if "python" in name or "python" in cmd.split(" ", 1)[0]:
        if "pyspark.daemon" in cmd or "pyspark.worker" in cmd or "pyspark/daemon" in cmd:
            return "worker"
        try:
            parent = p.parent()
            if parent is not None and parent.name() == "java":
                return "app"
        except psutil.Error:
            pass
        return "worker" if pid != top else "task"
    return "other"


@dataclass
class Measured:
    """The outcome of one :func:`run_measured` call (sizes in bytes, times in seconds)."""

    status: str  # ok | failed | timeout
    exit_code: int | None
    wall_s: float
    result: dict | None = None  # the last stdout line that is a JSON object
    error: str = ""  # the child's last error line (failed / timeout)
    peak: dict[str, int] = field(default_factory=dict)  # role -> largest VmHWM of one process of that role
    peak_sum: dict[str, int] = field(default_factory=dict)  # role -> largest sampled sum of VmRSS
    peak_total: int = 0  # largest sampled sum of VmRSS over every process watched
    ru_maxrss: int = 0  # os.wait4's ru_maxrss of the child (bytes)
    processes: int = 0  # distinct processes seen
    log: str = ""

    def mib(self, role: str) -> float | None:
        v = self.peak.get(role)
        return None if v is None else v / MiB


def _error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for marks in (("DELTA_ERROR",), ("Error:", "Exception:", "error:"), ("Killed", "OutOfMemory")):
        hits = [ln for ln in lines if any(m in ln for m in marks)]
        if hits:
            return hits[-1][:400]
    return lines[-1][:400] if lines else ""


def run_measured(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 900,
    log_path: str | Path,
    watch_pids: tuple[int, ...] = (),
    interval: float = 0.2,
) -> Measured:
    """Run ``cmd`` (see the module docstring); never waits past ``timeout``."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out_path = log_path.with_suffix(".stdout")
    hwm: dict[int, int] = {}
    roles: dict[int, str] = {}
    names: dict[int, str] = {}
    peak_sum: dict[str, int] = {}
    peak_total = 0
    started = time.monotonic()
    with open(out_path, "wb") as out, open(log_path, "wb") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err, start_new_session=True)
    top = proc.pid
    status, code, rusage = "ok", None, None

    def sample() -> None:
        nonlocal peak_total
        pids = _descendants(top) + [d for w in watch_pids for d in _descendants(w)]
        sums: dict[str, int] = {}
        total = 0
        for pid in dict.fromkeys(pids):
            name, st = _status(pid)
            if not st:
                continue
            if names.get(pid) != name:  # new, or exec'd into another program (spark-submit's script -> java)
                names[pid], roles[pid] = name, _role(pid, top)
            hwm[pid] = max(hwm.get(pid, 0), st.get("VmHWM", 0) * 1024)
            rss = st.get("VmRSS", 0) * 1024
            sums[roles[pid]] = sums.get(roles[pid], 0) + rss
            total += rss
        for r, v in sums.items():
            peak_sum[r] = max(peak_sum.get(r, 0), v)
        peak_total = max(peak_total, total)

    try:
        while True:
            sample()
            pid, wstatus, rusage = os.wait4(top, os.WNOHANG)
            if pid == top:
                code = os.waitstatus_to_exitcode(wstatus)
                break
            if time.monotonic() - started > timeout:
                status = "timeout"
                _kill(top, hwm)
                _, wstatus, rusage = os.wait4(top, 0)
                code = os.waitstatus_to_exitcode(wstatus)
                break
            time.sleep(interval)
    except BaseException:
        _kill(top, hwm)
        raise
    wall = time.monotonic() - started
    # a process of the child's group left behind (e.g. a daemon that outlived its parent) goes too
    for pid in hwm:
        try:
            if pid != top and os.getpgid(pid) == top:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    stdout = out_path.read_text(errors="replace")
    stderr = log_path.read_text(errors="replace")
    result = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
                break
            except ValueError:
                continue
    if status == "ok" and code != 0:
        status = "failed"
    if status == "ok" and isinstance(result, dict) and result.get("status") == "error":
        status = "failed"
    error = ""
    if status == "timeout":
        error = f"timed out after {timeout:.0f} s (process group killed); last line: {_error_line(stderr + stdout)}"
    elif status == "failed":
        error = (result or {}).get("error") or _error_line(stdout + "\n" + stderr) or f"exit code {code}"
    peak: dict[str, int] = {}
    for pid, v in hwm.items():
        r = roles.get(pid, "other")
        peak[r] = max(peak.get(r, 0), v)
    return Measured(
        status=status,
        exit_code=code,
        wall_s=wall,
        result=result,
        error=error,
        peak=peak,
        peak_sum=peak_sum,
        peak_total=peak_total,
        ru_maxrss=(rusage.ru_maxrss * 1024) if rusage is not None else 0,
        processes=len(hwm),
        log=str(log_path),
    )


def _kill(top: int, seen: dict[int, int]) -> None:
    """SIGKILL the child's process group, then every process of its tree still alive."""
    left = _descendants(top)
    try:
        os.killpg(top, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
