"""Entry point: ``python -m airflow_delta_provider_apps <operation> ...`` and the spark-submit application file.

spark-submit runs this file by path (``spark-submit .../spark_apps/__main__.py describe ...``); then
``sys.path[0]`` is the ``airflow_delta_provider_apps`` folder itself, so the package's parent folder is added when
``airflow_delta_provider_apps`` is not importable otherwise (shipped with ``--py-files`` or installed, it is).
"""

import os
import sys

try:
    from airflow_delta_provider_apps.cli import main
except ImportError:  # executed by path from a source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from airflow_delta_provider_apps.cli import main

if __name__ == "__main__":
    sys.exit(main())
