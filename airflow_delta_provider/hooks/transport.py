"""How a task reaches Spark: one contract, one implementation per way.

A :class:`Transport` is everything the hook and the operators know of a way to run an operation of
the bundled apps; :mod:`.registry` picks one from the connection (``TRANSPORTS[kind]``), and nothing
else asks which one it is. What it carries:

* its own settings: the user's arguments it takes (:attr:`Transport.options`, checked by
  :meth:`Transport.check_options` before anything runs; the hook and the operators pass every
  transport's through as one mapping, ``hook.options``, without knowing which one takes which), and
  what they and the connection mean, parsed once (:meth:`Transport.settings`);
* :meth:`~Transport.run`: run one operation, attached, and return the app's result dict (the app
  protocol's ``{"status": "ok", "operation", "table_uri", "version", "skipped", "committed",
  "metrics", ...}``), or raise :class:`~airflow_delta_provider.exceptions.DeltaRetryableError` /
  :class:`~airflow_delta_provider.exceptions.DeltaPermanentError`;
* deferral: :meth:`~Transport.start` returns a JSON handle of the started run, the triggerer
  :meth:`~Transport.poll`\\ s it (a class method: no hook, no connection there), and the resumed task
  :meth:`~Transport.finish`\\ es it; :meth:`~Transport.deferral_blocker` says why a transport (or these
  settings) cannot free the worker slot, and :meth:`~Transport.start` refuses with that reason;
* :meth:`~Transport.kill` (the task's ``on_kill``), :meth:`~Transport.stop` (a started run that
  never began), :meth:`~Transport.release` (what a started run left on this worker);
* :meth:`~Transport.recover`: an earlier try's run that outlived its worker, waited for instead of
  starting a second one;
* :attr:`~Transport.application_url`: the running application's web page (the operators' link).

The implementations: :class:`~airflow_delta_provider.hooks.submit.SubmitTransport` (spark-submit),
:class:`~airflow_delta_provider.hooks.connect.ConnectTransport` (Spark Connect) and
:class:`~airflow_delta_provider.hooks.local.LocalTransport` (in the worker's process, no Spark).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_delta_provider.exceptions import DeltaConfigurationError, app_error

if TYPE_CHECKING:
    from airflow_delta_provider_apps.operations import TxnIdentity

__all__ = ["RunState", "Started", "Transport", "app_run", "class_path"]


@dataclass(frozen=True)
class RunState:
    """A started run's state as :meth:`Transport.poll` reads it.

    :param state: the service's own word for it (upper case: ``RUNNING``, ``FINISHED``, ...).
    :param active: the run has not ended.
    :param waiting: of an active run: still waiting for resources (the trigger's start timeout applies).
    :param succeeded: of an ended run: it ended well (its result is then read by :meth:`Transport.finish`).
    """

    state: str
    active: bool
    waiting: bool = False
    succeeded: bool = False


@dataclass(frozen=True)
class Started:
    """A run started by :meth:`DeltaHook.start`: its JSON ``handle`` and the ``trigger`` that follows it."""

    handle: dict
    trigger: Any


def class_path(cls: type) -> str:
    """``module.QualName`` of a class: how a trigger names its transport (importable on the triggerer)."""
    return f"{cls.__module__}.{cls.__qualname__}"


class Transport:
    """One way for a task to reach Spark (see the module docstring). Subclasses set :attr:`name`
    and :meth:`serves`, implement :meth:`run`, and those that can defer :meth:`start`,
    :meth:`poll` and :meth:`finish`."""

    #: its key in :data:`~airflow_delta_provider.hooks.registry.TRANSPORTS`, in the task log and the
    #: result's ``transport``
    name: ClassVar[str] = ""
    #: seconds between the trigger's polls of a started run
    poll_interval: ClassVar[float] = 10.0
    #: runs in the worker's own process: what an operator's ``execution="local"`` takes
    #: (:func:`~airflow_delta_provider.hooks.registry.transport_in_worker`); no connection selects it
    in_worker: ClassVar[bool] = False
    #: the user's arguments (the hook's keywords, an operator's) that are this transport's own settings;
    #: the hook holds every transport's as one mapping (``hook.options``), this one reads its own
    options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, hook) -> None:  # the DeltaHook whose connection and arguments it uses
        self.hook = hook
        self.log = hook.log

    # -- selection and settings -----------------------------------------------------------

    @classmethod
    def serves(cls, conn) -> bool:
        """Whether runs over the Airflow connection ``conn`` go through this transport."""
        return False

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse a bad value among ``options`` (its own :attr:`options` the user gave, none of them a
        template) with a clear error, before anything runs: when the hook is built, and at DAG parse
        time when an operator is."""

    @classmethod
    def driver_env(cls, spark_conf: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, str]:
        """The environment its ``options`` (and ``spark_conf``) give the Spark app's driver, which the
        worker's own reads of the table take too (log reads, in-process runs): none by default."""
        return {}

    def option(self, name: str) -> Any:
        """The user's value of one of its :attr:`options` (None when not given)."""
        return self.hook.options.get(name)

    def foreign_options(self) -> list[str]:
        """The user's settings given for other transports (not its :attr:`options`): a run here ignores them."""
        return sorted(k for k, v in self.hook.options.items() if k not in self.options and v not in (None, {}, ()))

    def settings(self) -> Any:
        """What the connection (and its :attr:`options`) mean for this transport, parsed once;
        ``None`` for a transport without settings."""
        return None

    # -- attached runs ----------------------------------------------------------------------

    def run(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        raise NotImplementedError

    def recover(self, table_uri: str, identity: TxnIdentity) -> dict | None:
        """Before a run: when an earlier try of this task instance (the run's transaction
        ``identity``) still runs (it outlived the worker that started it), wait for it and return the
        result of its commit, instead of starting a second run; None: run as usual. Nothing to wait
        for where a run cannot outlive its worker."""
        return None

    @property
    def run_label(self) -> str:
        """How the task log names this transport after a run's result (`` (connect)``)."""
        return f" ({self.name})"

    # -- deferred runs -----------------------------------------------------------------------

    def deferral_blocker(self) -> str | None:
        """Why runs over this transport (and these settings) cannot free the worker slot while the
        work runs elsewhere, or None."""
        return f"the '{self.name}' transport runs attached to the task"

    def start(self, operation: str, table_uri: str, params: dict[str, Any]) -> dict:
        """Start the run without waiting for it; its JSON handle (it travels in the trigger's kwargs)."""
        raise DeltaConfigurationError("This run cannot be detached from the worker", self.deferral_blocker(), None)

    def trigger(self, handle: dict):
        """The trigger that follows a started run on the triggerer."""
        from airflow_delta_provider.triggers.delta import DeltaRunTrigger

        return DeltaRunTrigger(class_path(type(self)), handle, poll_interval=self.poll_interval)

    @classmethod
    def poll(cls, handle: dict) -> RunState:
        """The started run's state now (blocking: the trigger calls it in a thread, without a hook).

        :raises OSError: the service cannot be asked (the trigger's unreachable timeout applies).
        """
        raise NotImplementedError(f"the '{cls.name}' transport does not start runs")

    @classmethod
    def describe(cls, handle: dict) -> str:
        """The started run in a log line or an error."""
        return f"{cls.name} run {handle}"

    def finish(self, handle: dict, state: str, succeeded: bool) -> dict:
        """The result of a started run that ended in ``state`` (same result and errors as :meth:`run`)."""
        raise NotImplementedError(f"the '{self.name}' transport does not start runs")

    def stop(self, handle: dict) -> str | None:
        """Stop a started run (best effort, e.g. one that never got resources); what failed, or None."""
        return None

    def release(self, handle: dict) -> None:
        """Remove what a started run left on this worker (once it has ended)."""

    # -- the running work ---------------------------------------------------------------------

    @property
    def application_url(self) -> str | None:
        """The running application's web page, when there is one (the operators' extra link)."""
        return None

    def kill(self) -> None:
        """Stop the running work (the task's ``on_kill``)."""

    def on_kill(self) -> None:
        self.kill()


def app_run(call, log):
    """``call()`` (an app run in this process), its DeltaError raised as the task error Airflow
    acts on (retryable or permanent), its progress events in the task log, ``run_seconds`` added."""
    from airflow_delta_provider.hooks.outcome import progress_text
    from airflow_delta_provider_apps.protocol import DeltaError, progress_to

    started = time.monotonic()
    try:
        with progress_to(lambda event: log.info("%s", progress_text(event))):
            result = call()
    except DeltaError as e:
        cause = e.__cause__
        if cause is not None and not isinstance(cause, DeltaError):  # unexpected: its trace helps
            log.error("The Delta app failed with %s", type(cause).__name__, exc_info=cause)
        raise app_error(type(e).__name__, e.one_line(), retryable=e.retryable) from None
    return {**result, "run_seconds": round(time.monotonic() - started, 3)}
