"""The provider's Airflow UI plugin: a Delta view of each table the deployment's assets point to
(:mod:`.delta_view`)."""
