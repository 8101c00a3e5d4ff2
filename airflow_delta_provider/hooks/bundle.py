"""The apps as shipped to Spark: a zip of the installed ``airflow_delta_provider_apps`` package.

Built once per package version and content hash into a cache folder (deterministic bytes, written
atomically), with a two-line launcher next to it that runs ``python -m airflow_delta_provider_apps``
from that zip (``runpy``). spark-submit ships both (``--py-files`` and the application file); a Spark
Connect session adds the zip as an artifact to its server's Python path. Driver, executors and
Connect's Python workers therefore run exactly the zipped code.

Beside them, an empty jar: the application file of a standalone master in cluster deploy mode, which
refuses Python applications but runs a JVM application whose main class is Spark's own PythonRunner
(what spark-submit runs for Python in client mode) with the launcher and the zip as its arguments.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import uuid
import zipfile
from dataclasses import dataclass

from airflow_delta_provider.exceptions import DeltaConfigurationError

__all__ = ["APP_PACKAGE", "AppBundle", "build_app_bundle", "clear_bundle_cache", "default_bundle_dir"]

APP_PACKAGE = "airflow_delta_provider_apps"
LAUNCHER_NAME = "delta_spark_app.py"
RUNNER_JAR_NAME = "delta_spark_app.jar"
LAUNCHER_SOURCE = (
    '"""spark-submit entry of airflow-delta-provider: runs `python -m airflow_delta_provider_apps` from the --py-files zip."""\n'
    "import runpy\n"
    'runpy.run_module("airflow_delta_provider_apps", run_name="__main__", alter_sys=True)\n'
)
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class AppBundle:
    """The shipped apps: ``zip_path`` for ``--py-files``, ``launcher_path`` as the application file,
    ``runner_jar_path`` as the application file of a standalone cluster-mode driver (see the module)."""

    zip_path: str
    launcher_path: str
    version: str
    digest: str
    runner_jar_path: str = ""


def _package_dir(package: str = APP_PACKAGE) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DeltaConfigurationError(
            f"The '{package}' package is not installed",
            "the Delta apps ship from the installed airflow-delta-provider distribution",
            "pip install airflow-delta-provider into the Airflow environment",
        )
    return list(spec.submodule_search_locations)[0]


def _dist_version() -> str:
    try:
        from importlib.metadata import version

        return version("airflow-delta-provider")
    except Exception:
        return "0+unknown"


def default_bundle_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "airflow-delta-provider", "bundles")


def build_app_bundle(cache_dir: str | None = None) -> AppBundle:
    """Zip the installed ``airflow_delta_provider_apps`` package once per (version, content hash); return the paths.

    The zip's bytes depend only on the files' names and contents (sorted, fixed timestamps), so
    two workers build identical files; each write goes to a temporary name and is renamed into place.
    """
    from airflow_delta_provider_apps.package_zip import package_contents, write_zip

    contents = package_contents(_package_dir(), APP_PACKAGE)
    h = hashlib.sha256()
    for arcname, data in contents:
        h.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
    h.update(LAUNCHER_SOURCE.encode())
    digest = h.hexdigest()[:16]
    version = _dist_version()
    target = os.path.join(cache_dir or default_bundle_dir(), f"{version}-{digest}")
    # the hash in the name: a Spark Connect server that holds a file of this name holds these bytes
    zip_path = os.path.join(target, f"{APP_PACKAGE}-{digest}.zip")
    launcher_path = os.path.join(target, LAUNCHER_NAME)
    jar_path = os.path.join(target, RUNNER_JAR_NAME)
    if not (os.path.isfile(zip_path) and os.path.isfile(launcher_path) and os.path.isfile(jar_path)):
        write_zip(zip_path, contents)
        tmp_launcher = f"{launcher_path}.{uuid.uuid4().hex}.tmp"
        with open(tmp_launcher, "w") as f:
            f.write(LAUNCHER_SOURCE)
        os.replace(tmp_launcher, launcher_path)
        tmp_jar = f"{jar_path}.{uuid.uuid4().hex}.tmp"
        with zipfile.ZipFile(tmp_jar, "w") as zf:  # a jar with a manifest and no classes
            zf.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", date_time=_ZIP_EPOCH), "Manifest-Version: 1.0\n")
        os.replace(tmp_jar, jar_path)
    return AppBundle(
        zip_path=zip_path, launcher_path=launcher_path, version=version, digest=digest, runner_jar_path=jar_path
    )


def clear_bundle_cache(cache_dir: str | None = None) -> None:
    """Delete every cached apps bundle (rebuilt on the next run)."""
    shutil.rmtree(cache_dir or default_bundle_dir(), ignore_errors=True)
