"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Rules:

* This module imports nothing from Airflow or from the engine: Airflow calls it while it is still
  configuring itself, so it must be cheap and side-effect free.
* ``connection-types`` registers the provider's own types: ``delta_glue`` and ``delta_hive_metastore``
  (the catalogs, :mod:`airflow_delta_provider.hooks.catalog`) and ``delta_spark`` ("Delta Lake
  (Spark)"): a ``spark`` connection whose form also shows the result folder. The ``spark`` type stays
  the apache-spark provider's (registering a second hook for it would make the two providers fight
  over it); Delta operators take either, and read ``delta_result_dir`` from either's extras.
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
        # a catalog table's name as an asset (catalog_table): hive://<metastore>/<db>/<table>,
        # glue://<region>/<db>/<table> (airflow_delta_provider.lineage)
        "asset-uris": [
            {
                "schemes": ["hive", "glue"],
                "handler": "airflow_delta_provider.lineage.sanitize_catalog_uri",
                "to_openlineage_converter": "airflow_delta_provider.lineage.catalog_asset_to_openlineage",
            }
        ],
        "extra-links": [
            "airflow_delta_provider.operators.delta.SparkApplicationLink",
            "airflow_delta_provider.operators.delta.DeltaTableLink",
        ],
        # the Delta view in the UI (also an airflow.plugins entry point: provider plugins load only
        # with [core] lazy_discover_providers = False; Airflow keeps one of the two, by name)
        "plugins": [
            {"name": "delta_view", "plugin-class": "airflow_delta_provider.plugins.delta_view.DeltaViewPlugin"}
        ],
        "config": {
            "delta": {
                "description": "The Delta view in Airflow's UI.",
                "options": {
                    "ui_enabled": {
                        "description": "Serve the Delta view (its page, its JSON endpoints and the navigation "
                        "entry). False: nothing is mounted.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    "ui_storage_conn_id": {
                        "description": "A storage connection (aws, google_cloud_platform, wasb, adls) the view "
                        "reads object-store tables with; unset: the api-server's environment.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "aws_lake",
                        "default": None,
                    },
                },
            }
        },
        "connection-types": [
            {
                "hook-class-name": "airflow_delta_provider.hooks.delta.DeltaSparkHook",
                "hook-name": "Delta Lake (Spark)",
                "connection-type": "delta_spark",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password", "extra"],
                    "relabeling": {"host": "Master"},
                    "placeholders": {
                        "host": "local[*], yarn, spark://host:7077, k8s://https://host:443 or sc://host:15002 (Spark Connect)"
                    },
                },
                "conn-fields": {
                    "deploy-mode": {
                        "label": "Deploy mode",
                        "description": "client or cluster (cluster mode needs the result folder)",
                        "schema": {"type": ["string", "null"], "default": "client"},
                    },
                    "delta_result_dir": {
                        "label": "Result folder",
                        "description": (
                            "A folder both Airflow and the Spark driver reach (hdfs://, s3://, a shared "
                            "mount) where the app writes its result; needed in cluster deploy mode"
                        ),
                        "schema": {"type": ["string", "null"]},
                    },
                    "spark-binary": {
                        "label": "Spark binary",
                        "description": "spark-submit, spark2-submit or spark3-submit (default: the installed pyspark's)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "queue": {"label": "YARN queue", "schema": {"type": ["string", "null"]}},
                    "namespace": {"label": "Kubernetes namespace", "schema": {"type": ["string", "null"]}},
                },
            },
            # the catalogs that record a table's name (catalog_conn_id): one type per catalog
            {
                "hook-class-name": "airflow_delta_provider.hooks.catalog.DeltaGlueHook",
                "hook-name": "Delta Lake catalog (AWS Glue)",
                "connection-type": "delta_glue",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port", "extra"],
                    "relabeling": {"host": "Endpoint URL", "login": "Access key id", "password": "Secret access key"},
                    "placeholders": {"host": "empty for AWS; a Glue-compatible endpoint otherwise"},
                },
                "conn-fields": {
                    "region_name": {"label": "Region", "schema": {"type": ["string", "null"]}},
                    "catalog_id": {
                        "label": "Catalog id",
                        "description": "another account's Data Catalog (default: the caller's)",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            },
            {
                "hook-class-name": "airflow_delta_provider.hooks.catalog.DeltaHiveMetastoreHook",
                "hook-name": "Delta Lake catalog (Hive metastore)",
                "connection-type": "delta_hive_metastore",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password"],
                    "relabeling": {"host": "Metastore host (thrift)"},
                    "placeholders": {
                        "host": "empty: the metastore database of the spark_conf extra",
                        "port": "9083",
                        "extra": '{"spark_conf": {"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:..."}}',
                    },
                },
            },
        ],
    }
