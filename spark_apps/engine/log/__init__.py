"""Transaction log core: listing, vectorised replay, snapshots, ``_last_checkpoint``.

Public entry points::

    from airflow_delta_provider_apps.engine.log.snapshot import Snapshot, load_snapshot, history, read_commit_infos
    from airflow_delta_provider_apps.engine.log.listing import latest_version, list_log, LogSegment
    from airflow_delta_provider_apps.engine.log.file_actions import FILE_SCHEMA, REMOVE_SCHEMA
"""

from ..arrow_memory import use_engine_pool

# every command reads the log before it allocates: the pool is chosen here, once (see arrow_memory)
use_engine_pool()
