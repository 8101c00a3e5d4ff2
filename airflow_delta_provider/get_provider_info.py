"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Rules:

* This module imports nothing from Airflow or from the engine: Airflow calls it while it is still
  configuring itself, so it must be cheap and side-effect free.
* ``connection-types`` is deliberately empty: :class:`~airflow_delta_provider.hooks.delta.DeltaHook`
  uses the ``spark`` connection type that the apache-spark provider already registers (with its
  SparkSubmitHook). Registering a second hook for the same type would make the two providers fight
  over it (Airflow warns and keeps one); our extra connection key (``delta_result_dir``) is simply
  read from that connection's extras.
"""

from __future__ import annotations

INTEGRATION = "Delta Lake"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("airflow-delta-provider")
    except Exception:  # not installed (source checkout on sys.path)
        return "0.1.0"


def get_provider_info() -> dict:
    version = _version()
    return {
        "package-name": "airflow-delta-provider",
        "name": "Delta Lake",
        "description": (
            "`Delta Lake <https://delta.io/>`__ tables written and maintained by bundled PySpark apps "
            "(a pure-Python Delta engine) submitted through the Apache Spark provider's SparkSubmitHook.\n"
        ),
        "versions": [version],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://delta.io/",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_delta_provider.hooks.delta"]}],
        "operators": [{"integration-name": INTEGRATION, "python-modules": ["airflow_delta_provider.operators.delta"]}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["airflow_delta_provider.sensors.delta"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["airflow_delta_provider.triggers.delta"]}],
        "connection-types": [],
    }
