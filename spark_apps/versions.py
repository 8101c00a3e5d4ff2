"""Check that the importable pyspark and the Spark jars it launches are the same release.

The apache-spark provider depends on ``pyspark-client``, which installs into the same ``pyspark/``
folder as ``pyspark``; a mixed install imports one version's Python code against another's jars.
``python -m airflow_delta_provider_apps.versions`` exits non-zero when they disagree (run by ``make install``).
"""

from __future__ import annotations

import glob
import os
import re
import sys


def pyspark_versions() -> dict:
    import pyspark
    from pyspark.version import __version__ as py_version

    home = os.path.dirname(pyspark.__file__)
    jars = glob.glob(os.path.join(home, "jars", "spark-core_*.jar"))
    jar_version = None
    if jars:
        m = re.search(r"spark-core_[0-9.]+-(.+)\.jar$", os.path.basename(jars[0]))
        jar_version = m.group(1) if m else None
    return {"python": py_version, "jars": jar_version, "spark_home": home, "num_core_jars": len(jars)}


FIX = "pip uninstall -y pyspark-client pyspark && pip install --no-deps pyspark=={version}"


def install_problem() -> str | None:
    """One line saying what is wrong with the installed pyspark (and the fix), or ``None``."""
    v = pyspark_versions()
    fix = FIX.format(version=v["python"])
    if v["jars"] is None:
        return (
            f"pyspark {v['python']} at {v['spark_home']} has no Spark jars: pyspark-client (Spark Connect only) "
            f"replaced it. Fix: {fix}"
        )
    if v["python"] != v["jars"] or v["num_core_jars"] != 1:
        return (
            f"pyspark Python code is {v['python']} but its jars are {v['jars']} ({v['num_core_jars']} spark-core "
            f"jars): a mixed pyspark/pyspark-client install. Fix: {fix}"
        )
    return None


def main() -> int:
    problem = install_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    v = pyspark_versions()
    print(f"pyspark {v['python']} matches its jars ({v['jars']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
