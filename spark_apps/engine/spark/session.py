"""SparkSession creation for the apps and the tests (one place for the settings we rely on)."""

from __future__ import annotations

import os
import re
import threading
from contextlib import contextmanager

DEFAULT_CONF = {
    # Arrow batches flow through mapInArrow for reading and writing data files.
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    # the scan lists exact files from the log: never Spark's distributed listing job (see spark.scan)
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    # Spark's own parquet writer (spark.write.write_native) writes timestamps as Delta's readers
    # expect them: INT64 micros (its default, INT96, has no statistics)
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def build_session(app_name: str = "delta-engine", master: str | None = None, conf: dict | None = None):
    """A SparkSession with :data:`DEFAULT_CONF`. Outside spark-submit, Python workers default to this
    interpreter (``PYSPARK_PYTHON`` when unset), so the engine snippet works in any virtualenv."""
    import os
    import sys

    from pyspark.sql import SparkSession

    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


#: a Connect client's retries of a failed RPC: 6 tries over ~6 s (pyspark's DefaultPolicy arguments;
#: its defaults wait ~10 minutes for a server that is gone)
CONNECT_RETRY = {
    "max_retries": 5,
    "initial_backoff": 200,
    "backoff_multiplier": 2.0,
    "max_backoff": 3000,
    "jitter": 100,
}

#: what a Connect session does not take from :data:`DEFAULT_CONF`: static properties, the server's own
_SERVER_OWNED = ("spark.ui.enabled", "spark.ui.showConsoleProgress")


def connect_session(
    url: str,
    *,
    conf: dict | None = None,
    pyfiles=(),
    app_name: str = "delta-engine",
    session_id: str | None = None,
    release_on_failure: bool = True,
    bundle_marker: bytes | None = None,
):
    """A Spark Connect session on ``url`` (``sc://...``): the client's retries bounded by
    :data:`CONNECT_RETRY` before its first call, :data:`DEFAULT_CONF`'s runtime properties and
    ``conf`` set on the session, and ``pyfiles`` (the apps' zip) added to the server's Python path
    for this session's UDFs. ``session_id``: attach to (or create) the server's session of that id
    (a shared one: never released here, see ``airflow_delta_provider_apps.connect``). With
    ``bundle_marker`` the files are uploaded once per session: after them the marker is cached in the
    session (a cache artifact, the only kind whose presence a client can ask about), and a session
    that holds it gets no upload. Works with ``pyspark-client`` alone (no JVM here)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession

    if session_id is not None:
        base, _, params = url.partition("/;")
        url = f"{base.rstrip('/')}/;" + ";".join([p for p in params.split(";") if p] + [f"session_id={session_id}"])
    session = SparkSession.builder.remote(url).create()  # no RPC yet: the retry policy comes first
    try:
        session.client.set_retry_policies([DefaultPolicy(**CONNECT_RETRY)])
        settings = {k: v for k, v in DEFAULT_CONF.items() if k not in _SERVER_OWNED}
        settings.update({str(k): str(v) for k, v in (conf or {}).items()})
        for key, value in settings.items():
            _set_conf(session, key, value)
        if pyfiles and not holds_marker(session, bundle_marker):
            add_pyfiles(session, pyfiles)
            if bundle_marker is not None:
                session.client.cache_artifact(bundle_marker)
    except BaseException as e:
        # a server that cannot be reached has no session to release: do not wait on retries for it
        session.release_session_on_close = release_on_failure and "UNAVAILABLE" not in str(e)
        session.stop()
        raise
    return session


def add_pyfiles(session, pyfiles) -> None:
    """Add ``pyfiles`` to the session's Python path; a session that has them already: a no-op (the
    server compares the bytes). Runs that start together on a fresh session (a new or restarted
    server) race to add them: the server checks that a file is absent, then moves its copy into place,
    so a run that found it absent just before another's move gets ``FileAlreadyExistsException``. The file
    there holds the same bytes (a shared session's id derives from the files' contents, the bundle's
    name from its hash): adding again, the server finds it, compares, and keeps it."""
    try:
        session.addArtifacts(*pyfiles, pyfile=True)
    except Exception as e:
        if "FileAlreadyExistsException" not in str(e):
            raise
        session.addArtifacts(*pyfiles, pyfile=True)  # still failing: retryable (failures.py)


def holds_marker(session, marker: bytes | None) -> bool:
    """Whether the session already cached ``marker`` (then it holds the files added before it)."""
    if marker is None:
        return False
    import hashlib

    return session.client._artifact_manager.is_cached_artifact(hashlib.sha256(marker).hexdigest())


def _set_conf(session, key: str, value: str) -> None:
    """One session property; a static one (the server's, fixed at its start) is refused clearly."""
    try:
        session.conf.set(key, value)
    except Exception as e:
        if "CANNOT_MODIFY" not in str(e) and "static" not in str(e).lower():
            raise
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"Spark property '{key}' cannot be set on a Spark Connect session",
            "it is a static property of the Spark Connect server, fixed when the server started",
            f"set it where the server starts (--conf {key}=...), or drop it from spark_conf",
        ) from None


@contextmanager
def connect_mode():
    """pyspark's functions (``F.col``, ``Window``, ...) build Connect or classic columns by a process-wide
    switch, the ``SPARK_CONNECT_MODE_ENABLED`` variable (always on with ``pyspark-client`` alone):
    on inside the block, as it was after the last block ends. Counted, so runs in several threads of
    one process (the tests) overlap safely: the first to enter saves the value, the last to leave
    restores it. One task runs per worker process; a process that also holds a classic session (the
    tests) runs its Connect work inside this block only."""
    global _connect_depth, _connect_before
    with _connect_lock:
        if _connect_depth == 0:
            _connect_before = os.environ.get(_CONNECT_MODE)
            os.environ[_CONNECT_MODE] = "1"
        _connect_depth += 1
    try:
        yield
    finally:
        with _connect_lock:
            _connect_depth -= 1
            if _connect_depth == 0:
                if _connect_before is None:
                    os.environ.pop(_CONNECT_MODE, None)
                else:
                    os.environ[_CONNECT_MODE] = _connect_before


_connect_lock = threading.Lock()
_connect_depth = 0
_connect_before: str | None = None
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@contextmanager
def active(spark):
    """``spark`` as this thread's active session inside the block (then the one before): pyspark's
    Spark Connect client builds the DataFrame of a ``localCheckpoint`` on the *active* session, and a
    session attached by id (a shared one) is never made active, so without this the call fails
    (``NO_ACTIVE_OR_DEFAULT_SESSION``) or, worse, binds the rows to another run's session."""
    if not is_connect(spark):
        yield spark
        return
    from pyspark.sql.connect.session import SparkSession

    local = getattr(SparkSession, "_active_session", None)
    if local is None:  # a pyspark without the thread-local (not one we support): as it is
        yield spark
        return
    before = getattr(local, "session", None)
    local.session = spark
    try:
        yield spark
    finally:
        local.session = before


def conf_value(spark, key: str, default: str) -> str:
    """A Spark property as the session sees it (over Connect: the server's), ``default`` when unset."""
    try:
        value = spark.conf.get(key, None)
    except Exception:  # a property the session refuses to show
        value = None
    return default if value in (None, "") else str(value)


_MEMORY = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(i?b)?")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def memory_bytes(text: str, *, plain: str = "m", strict: bool = False) -> int:
    """A Spark memory size (``"1g"``, ``"512m"``, ``"64mb"``, ``"1024b"``) in bytes; a bare number is in
    ``plain`` units (MiB, as for driver memory). Unreadable: Spark's default driver memory (1 GiB),
    or with ``strict`` a ValueError."""
    m = _MEMORY.fullmatch(str(text).strip().lower())
    if m is None:
        if strict:
            raise ValueError(f"{text!r} is not a size such as 64m, 1g or 1048576")
        return 1 << 30
    number, unit, suffix = m.groups()
    return int(float(number) * _UNITS[unit if unit or suffix else plain])


#: Spark property: where DELETE, UPDATE, OPTIMIZE and a file-by-file MERGE do their per-file work.
#: ``auto`` (the default): this process's threads when the files are small
#: (:data:`..rewrite.common.IN_PROCESS_BYTES`) or Spark's executors are this machine's cores
#: (:func:`on_this_machine`), else Spark tasks; ``tasks``: Spark tasks whatever the size
FILE_WORK_CONF = "spark.airflowDelta.fileWork"


#: on a local master, the share of this machine's available memory (:func:`available_memory`) a MERGE
#: source held in this process may take (:func:`.merge.collect_cap`); the rest is for the join's hash
#: table, the files being rewritten, and Spark
LOCAL_SOURCE_SHARE = 0.25


def available_memory() -> int:
    """Bytes this machine can give now without swapping: ``MemAvailable`` (/proc/meminfo), else the
    free physical pages (``os.sysconf``), else 1 GiB; at most what this process's cgroup (a
    container's memory limit) has left."""
    free = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if free is None:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            free = 1 << 30
    left = _cgroup_memory_left()
    return free if left is None else min(free, left)


#: a cgroup's memory limit and usage: v2, then v1 (a limit this large means none)
_CGROUP_MEMORY = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def _cgroup_memory_left() -> int | None:
    for limit_file, usage_file in _CGROUP_MEMORY:
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(usage_file) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None
        return max(int(limit) - usage, 0)
    return None


def local_source_cap() -> int:
    """The most bytes of Arrow a MERGE source held in this process may take on a local master:
    :data:`LOCAL_SOURCE_SHARE` of :func:`available_memory`."""
    return int(available_memory() * LOCAL_SOURCE_SHARE)


def local_master(spark) -> bool:
    """Whether ``spark`` is a classic session on a local master (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``): its executors are threads of this machine's JVM, on the cores this process has."""
    if is_connect(spark):
        return False
    try:
        return _is_local_master(str(spark.sparkContext.master))
    except Exception:  # no SparkContext to ask
        return False


def _is_local_master(master: str) -> bool:
    master = master.strip().lower()
    return master == "local" or master.startswith("local[")


def on_this_machine(spark) -> str | None:
    """Why Spark's executors for ``spark`` are this machine's cores, or None: the rule by which the
    per-file work runs in this process's threads (:meth:`.plane.SparkPlane.in_driver`), where a
    Spark job would add its scheduling and the shipping of its inputs on the same cores.

    * a classic session on a local master (:func:`local_master`);
    * a Spark Connect session whose server is on a loopback address and runs a local master itself
      (its ``spark.master``; a loopback address alone could be a tunnel to a cluster's server)."""
    if not is_connect(spark):
        return "a local master" if local_master(spark) else None
    import ipaddress

    host = str(getattr(getattr(spark, "client", None), "host", "") or "").strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name
        loopback = False
    if not loopback:
        return None
    master = conf_value(spark, "spark.master", "")
    return f"a Spark Connect server on loopback ({host}) with master {master}" if _is_local_master(master) else None


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


# --------------------------------------------------------------------------------------------------
# Errors crossing the executor boundary: an exception raised in a mapInArrow function reaches the
# driver only as text inside Spark's exception. The executor side wraps it between markers (as JSON,
# ..foreign.encoded); the driver side finds it and raises the same DeltaError class again.


def guard_executor(batches):
    """Re-raise any exception of an executor generator in a form the driver decodes: a DeltaError
    as itself, any other as the DeltaError it stands for (a FileNotFoundError a retryable
    StorageError, a KeyError a bug named with its line)."""
    from ..errors import DeltaError
    from ..foreign import encoded

    try:
        yield from batches
    except DeltaError as e:
        raise RuntimeError(encoded(e)) from None
    except Exception as e:  # not ours: its traceback stays in Spark's text (the task's log), for the bug
        raise RuntimeError(encoded(e)) from e


def delta_error_from(exc: BaseException):
    """The DeltaError an executor raised inside ``exc`` (a Spark/Py4J exception), or ``None``."""
    from ..foreign import decoded

    return decoded(exc)


# --------------------------------------------------------------------------------------------------
# The Python a classic session's workers start: the engine's tasks import pyarrow (and this package).

#: pyspark's worker Python when ``PYSPARK_PYTHON`` is unset (``SparkContext.pythonExec``)
_PYSPARK_DEFAULT_PYTHON = "python3"
#: worker Python -> why it cannot run the engine's tasks (None: it can); asked once per process
_worker_python_problems: dict[str, str | None] = {}


def ensure_python_workers(spark) -> None:
    """Before the engine's Python tasks run on ``spark``, the Python its workers start is one that can
    run them. On a classic session on a local master that is ``SparkContext.pythonExec``
    (``PYSPARK_PYTHON`` when the context started, else ``python3`` on the PATH, often without
    pyarrow): when nothing chose it, the workers use this driver's own interpreter, as the sessions
    :func:`build_session` starts do; a Python that was chosen is checked to import pyarrow (once per
    process), and one that cannot is refused here, naming what to set, instead of a task failing with
    ``No module named 'pyarrow'``. Over Spark Connect and on a cluster the workers' Python lives on
    other machines: nothing to check from here."""
    if is_connect(spark) or not local_master(spark):
        return
    import sys

    sc = spark.sparkContext
    python = str(getattr(sc, "pythonExec", None) or "")
    if not os.environ.get("PYSPARK_PYTHON") and python in ("", _PYSPARK_DEFAULT_PYTHON):
        sc.pythonExec = sys.executable  # read when each Python function is wrapped, i.e. from the next job on
        return
    if python not in _worker_python_problems:
        _worker_python_problems[python] = _python_problem(python)
    problem = _worker_python_problems[python]
    if problem is None:
        return
    from ..errors import InvalidArgumentError

    raise InvalidArgumentError(
        f"The Python workers of this Spark session cannot run the engine's tasks: '{python}' {problem}",
        "on a local master the workers start the Python that PYSPARK_PYTHON named when the session started "
        "(spark.pyspark.python under spark-submit), and the engine's tasks import pyarrow and pyroaring",
        f"set PYSPARK_PYTHON to a Python with pyarrow and pyroaring before the session starts (this driver's: "
        f"PYSPARK_PYTHON={sys.executable}), or leave it unset so that the workers use this driver's Python",
    )


def _python_problem(python: str) -> str | None:
    """Why ``python`` (a path, or a name on the PATH) cannot import what the engine's tasks import
    (pyarrow; pyroaring for deletion vectors); None when it can."""
    import shutil
    import subprocess
    import sys

    found = shutil.which(python)
    if found is None:
        return "is not found (no such executable, nor on the PATH)"
    if os.path.abspath(found) == os.path.abspath(sys.executable):  # this interpreter runs pyarrow already
        return None
    try:
        run = subprocess.run(
            [found, "-c", "import pyarrow; import pyroaring"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot be started ({e})"
    if run.returncode == 0:
        return None
    last = (run.stderr.strip().splitlines() or ["exit code " + str(run.returncode)])[-1]
    return f"cannot import {'pyroaring' if 'pyroaring' in last else 'pyarrow'} ({last})"


def map_in_arrow(df, fn, schema):
    """``df.mapInArrow(fn, schema)``, the one way the engine runs its code in executors.

    ``fn`` runs with the driver's object-store settings (credentials, endpoint; see
    :func:`..storage.executor_env`) set in the executor's environment, so executors that do
    not share the driver's environment (a cluster, or a session started before they were set) reach
    the same store as the same principal. They travel inside the task's serialized function, as
    Hadoop's credentials travel in its configuration: not on a command line, not in a log.
    """
    from ..storage import executor_env

    ensure_python_workers(df.sparkSession)
    env = executor_env()
    if env:
        inner = fn

        def fn(batches, _env=env, _inner=inner):
            import os

            os.environ.update(_env)
            return _inner(batches)

    return df.mapInArrow(fn, schema)


def collect_tasks(df, fn, schema: str) -> list:
    """``map_in_arrow(df, fn, schema).collect()``, with a DeltaError an executor raised re-raised as
    itself (not wrapped in Spark's exceptions): how every per-file job of the engine runs."""
    try:
        return map_in_arrow(df, fn, schema).collect()
    except Exception as e:  # executor errors arrive wrapped in Spark exceptions
        err = delta_error_from(e)
        if err is not None:
            raise err from None
        raise
