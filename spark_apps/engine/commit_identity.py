"""The transaction identity of a run: ``app_id``, ``app_version`` and ``user_metadata`` as one value.

``(app_id, app_version)`` makes a write idempotent (Delta's ``SetTransaction``: a version already
committed for ``app_id`` is skipped); ``user_metadata`` lands in ``commitInfo.userMetadata``. The
registry (:mod:`airflow_delta_provider_apps.operations`), the CLI, the operators, the commands and
the transaction pass this one value (``identity=``) instead of three keywords each; it is checked
once, when it is made. :func:`takes_identity` lets a public front (``DeltaTable``'s methods) also
take the three keywords, folded into the one value there. Imports nothing heavy: the registry reads
it at DAG parse time.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

__all__ = ["TxnIdentity", "IDENTITY_KEYS", "takes_identity"]

IDENTITY_KEYS = ("app_id", "app_version", "user_metadata")


@dataclass(frozen=True)
class TxnIdentity:
    """Who commits: the idempotent-write identity and the commit's user metadata (all optional).

    :raises InvalidArgumentError: ``app_id`` without ``app_version`` (or the reverse), or a version
        that is not an integer
    """

    #: the application id of an idempotent write (with ``app_version``)
    app_id: str | None = None
    #: its version: a version already committed for ``app_id`` is skipped
    app_version: int | None = None
    #: ``commitInfo.userMetadata``
    user_metadata: str | None = None

    def __post_init__(self):
        from .errors import InvalidArgumentError

        if (self.app_id is None) != (self.app_version is None):
            raise InvalidArgumentError(
                "An idempotent write needs both an application id and a version",
                f"got app_id={self.app_id!r}, app_version={self.app_version!r}",
                "pass both app_id and app_version (e.g. the DAG run id and a monotonically increasing number), or neither",
            )
        if self.app_version is not None and type(self.app_version) is not int:
            try:
                object.__setattr__(self, "app_version", int(self.app_version))
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"Transaction version {self.app_version!r} is not an integer",
                    None,
                    "pass app_version as an integer",
                ) from None

    def options(self) -> dict[str, Any]:
        """The identity as the app's spec keys (only those given): what goes on the wire (the
        registry's :meth:`~airflow_delta_provider_apps.operations.Operation.identity` reads it back)."""
        return {k: getattr(self, k) for k in IDENTITY_KEYS if getattr(self, k) is not None}


def takes_identity(function):
    """``function`` (which takes ``identity: TxnIdentity | None``) also taking ``app_id``,
    ``app_version`` and ``user_metadata`` as keywords, the user's convenience: they become its one
    ``identity`` here (not with ``identity=`` as well). The signature shows the three keywords."""
    from .errors import InvalidArgumentError

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        given = {k: kwargs.pop(k) for k in IDENTITY_KEYS if k in kwargs}
        if any(v is not None for v in given.values()):
            if kwargs.get("identity") is not None:
                raise InvalidArgumentError(
                    f"Both identity= and {', '.join(k for k, v in given.items() if v is not None)} were given",
                    "they say the same thing: the commit's transaction identity",
                    "pass identity=TxnIdentity(app_id, app_version, user_metadata), or the keywords alone",
                )
            kwargs["identity"] = TxnIdentity(**given)
        return function(*args, **kwargs)

    signature = inspect.signature(function)
    params = list(signature.parameters.values())
    at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    extra = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None) for k in IDENTITY_KEYS]
    wrapper.__signature__ = signature.replace(parameters=params[:at] + extra + params[at:])
    return wrapper
