"""The transaction identity of a run: ``app_id``, ``app_version`` and ``user_metadata`` as one value.

``(app_id, app_version)`` makes a write idempotent (Delta's ``SetTransaction``: a version already
committed for ``app_id`` is skipped); ``user_metadata`` lands in ``commitInfo.userMetadata``. The
registry (:mod:`airflow_delta_provider_apps.operations`), the CLI, the operators and the commands pass
this one value instead of three keywords each. Imports nothing: the registry reads it at DAG parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TxnIdentity", "IDENTITY_KEYS"]

IDENTITY_KEYS = ("app_id", "app_version", "user_metadata")


@dataclass(frozen=True)
class TxnIdentity:
    """Who commits: the idempotent-write identity and the commit's user metadata (all optional)."""

    #: the application id of an idempotent write (with ``app_version``)
    app_id: str | None = None
    #: its version: a version already committed for ``app_id`` is skipped
    app_version: int | None = None
    #: ``commitInfo.userMetadata``
    user_metadata: str | None = None

    @classmethod
    def of(cls, values: Mapping[str, Any] | None) -> TxnIdentity:
        """The identity among ``values`` (a run's parameters, or keyword options); other keys ignored."""
        values = values or {}
        return cls(*(values.get(k) for k in IDENTITY_KEYS))

    def options(self) -> dict[str, Any]:
        """The keywords a command's transaction takes (only those given)."""
        return {k: getattr(self, k) for k in IDENTITY_KEYS if getattr(self, k) is not None}
