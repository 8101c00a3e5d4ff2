"""A Spark driver running on the cluster (cluster deploy mode), followed from outside the task.

A deferrable operator submits its application without waiting for it (:meth:`SubmitTransport.start`),
hands a :class:`SubmittedDriver` to :class:`~airflow_delta_provider.triggers.delta.DeltaSparkDriverTrigger`
and frees its worker slot; the trigger asks the cluster manager for the driver's state
(:func:`driver_state`) until it ends, and the task resumes to read the result (the result file, else
the commit in the table's log).

One question per cluster manager, each the manager's own public API:

* standalone: the master's REST server, ``GET /v1/submissions/status/<driver id>`` (``driverState``;
  the master needs ``spark.master.rest.enabled=true``; port: the connection extra ``rest_port``,
  default 6066, as in the apache-spark provider), one URL per master of an HA master list;
* YARN: the ResourceManager's ``GET /ws/v1/cluster/apps/<application id>`` (``state``, then
  ``finalStatus`` once it has finished; address: the connection extra
  ``yarn_resourcemanager_webapp_address``, as in the apache-spark provider);
* Kubernetes: the driver pod's phase (the cncf-kubernetes provider's client).

States are upper-case strings, as the managers name them; :data:`NOT_FOUND` when the manager does
not know the driver (a restarted master without recovery, a deleted pod).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field

__all__ = [
    "NOT_FOUND",
    "SubmittedDriver",
    "driver_state",
    "is_active",
    "is_succeeded",
    "is_waiting",
    "kill_driver",
    "discard_secret_file",
]

NOT_FOUND = "NOT_FOUND"

#: states of a driver that has not ended
_ACTIVE = {
    "standalone": {"SUBMITTED", "RUNNING", "RELAUNCHING", "UNKNOWN"},
    "yarn": {"NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING"},
    "k8s": {"PENDING", "RUNNING"},
}
#: of those, the states of a driver still waiting for the cluster's resources (the start timeout's)
_WAITING = {
    "standalone": {"SUBMITTED"},
    "yarn": {"NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED"},
    "k8s": {"PENDING"},
}
_SUCCEEDED = {"standalone": {"FINISHED"}, "yarn": {"SUCCEEDED"}, "k8s": {"SUCCEEDED"}}

_HTTP_TIMEOUT = 10.0


@dataclass(frozen=True)
class SubmittedDriver:
    """What identifies a driver submitted in cluster deploy mode (JSON-serialisable: it travels in
    the trigger's kwargs and the task's ``next_kwargs``).

    :param cluster_manager: ``standalone``, ``yarn`` or ``k8s``.
    :param driver_id: the standalone driver id, the YARN application id, or ``<namespace>/<pod>``.
    :param status_urls: where the state is asked (standalone: one per master; YARN: the application's
        ResourceManager URL); empty for Kubernetes.
    :param result_uri: the app's result file.
    :param submitted_at: epoch seconds of the submission (the start timeout counts from it).
    :param secret_file: the object-store settings file shipped with the driver, deleted once it ended.
    """

    cluster_manager: str
    driver_id: str
    result_uri: str
    submitted_at: float
    status_urls: tuple[str, ...] = field(default_factory=tuple)
    secret_file: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "status_urls": list(self.status_urls)}

    @classmethod
    def from_dict(cls, data: dict) -> SubmittedDriver:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "status_urls": tuple(known.get("status_urls") or ())})

    def describe(self) -> str:
        kind = {"standalone": "Spark driver", "yarn": "YARN application", "k8s": "driver pod"}[self.cluster_manager]
        return f"{kind} {self.driver_id}"


def discard_secret_file(driver: SubmittedDriver) -> None:
    """Delete the object-store settings file shipped with the driver, when it is on this machine."""
    if driver.secret_file:
        try:
            os.unlink(driver.secret_file)
        except OSError:  # another worker's file, or already gone
            pass


def is_active(driver: SubmittedDriver, state: str) -> bool:
    return state in _ACTIVE[driver.cluster_manager]


def is_waiting(driver: SubmittedDriver, state: str) -> bool:
    return state in _WAITING[driver.cluster_manager]


def is_succeeded(driver: SubmittedDriver, state: str) -> bool:
    return state in _SUCCEEDED[driver.cluster_manager]


def _http_json(url: str, method: str = "GET", body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT) as response:
        return json.loads(response.read() or b"{}")


def driver_state(driver: SubmittedDriver) -> str:
    """The driver's state now (blocking; the trigger runs it in a thread).

    :raises OSError: the cluster manager cannot be asked (every address failed).
    """
    if driver.cluster_manager == "k8s":
        return _pod_phase(driver)
    last: OSError = OSError(f"no address to ask for {driver.describe()}")
    unknown = False
    for url in driver.status_urls:
        try:
            reply = _http_json(url)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                unknown = True
                continue
            last = OSError(f"{url}: HTTP {e.code}")
            continue
        except (OSError, ValueError) as e:  # unreachable, timed out, not JSON: try the next master
            last = OSError(f"{url}: {e}")
            continue
        if driver.cluster_manager == "standalone":
            if not reply.get("success", True) and not reply.get("driverState"):
                unknown = True  # "Driver ... not found", or a standby master: the next one may know
                continue
            return str(reply.get("driverState") or "UNKNOWN").upper()
        app = reply.get("app") or {}
        state = str(app.get("state") or "").upper()
        if state in ("FINISHED", "FAILED", "KILLED"):
            return str(app.get("finalStatus") or state).upper()  # FINISHED says nothing without it
        return state or "UNKNOWN"
    if unknown:  # asked, and no master (or ResourceManager) knows the driver
        return NOT_FOUND
    raise last


def _pod_phase(driver: SubmittedDriver) -> str:
    try:
        from airflow.providers.cncf.kubernetes import kube_client
    except ImportError as e:
        raise OSError("following a driver pod needs apache-airflow-providers-cncf-kubernetes") from e
    namespace, _, pod = driver.driver_id.partition("/")
    try:
        client = kube_client.get_kube_client()
        phase = client.read_namespaced_pod(pod, namespace, _request_timeout=_HTTP_TIMEOUT).status.phase
    except kube_client.ApiException as e:
        if e.status == 404:
            return NOT_FOUND
        raise OSError(f"Kubernetes API: {e.status} {e.reason}") from e
    except Exception as e:  # configuration, connection (urllib3): the unreachable timeout applies
        raise OSError(f"Kubernetes API: {e}") from e
    return str(phase or "PENDING").upper()


def kill_driver(driver: SubmittedDriver) -> str | None:
    """Ask the cluster manager to stop the driver (best effort); what failed, or None."""
    try:
        if driver.cluster_manager == "standalone":
            problem = "no master address"
            for url in driver.status_urls:
                try:
                    reply = _http_json(url.replace("/v1/submissions/status/", "/v1/submissions/kill/"), "POST")
                except (OSError, ValueError) as e:
                    problem = str(e)
                    continue
                if reply.get("success"):
                    return None
                problem = str(reply.get("message") or "the master did not kill it")  # e.g. a standby master
            return problem
        if driver.cluster_manager == "yarn":
            _http_json(driver.status_urls[0] + "/state", "PUT", {"state": "KILLED"})
            return None
        from airflow.providers.cncf.kubernetes import kube_client

        namespace, _, pod = driver.driver_id.partition("/")
        kube_client.get_kube_client().delete_namespaced_pod(pod, namespace, _request_timeout=_HTTP_TIMEOUT)
        return None
    except Exception as e:
        return str(e)
