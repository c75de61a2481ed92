"""The SDK's and the ``kubetune`` command's access to the cluster: Experiments and Trials by name.

Owns every Kubernetes API call made from a user's machine (kubeconfig loading, the pre-flight
check of the cluster and kubetune's CRDs, create, read, suspend, resume, delete, listing an
Experiment's Trials, a namespace's Trials and kubetune Events (the dashboard's notes) and reading a trial
pod's log or its last lines) and :func:`follow`, the loop that shows an
Experiment's progress until it ends. Called by :mod:`kubetune.sdk.tuner` and :mod:`kubetune.sdk.cli`. Uses
the official ``kubernetes`` client (the ``sdk`` extra); nothing here runs in a trial pod.

Failures to reach or use the cluster are :class:`ClusterUnavailable`, an Experiment that is not there
(or went away while followed) is :class:`ExperimentNotFound`: both carry one line that says what to
do, and neither chains the client library's exceptions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

GROUP, VERSION = "kubetune.io", "v1alpha1"
EXPERIMENTS, TRIALS = "experiments", "trials"
#: Experiment phases after which nothing more happens.
FINAL_PHASES = ("Succeeded", "Failed")


#: Seconds to connect to, then to hear from, the API server in the pre-flight check.
CHECK_TIMEOUT_S = (5.0, 10.0)
#: Seconds to connect to, then to hear from, the API server for each read of the dashboard's notes
#: (:meth:`Cluster.list_trials`, :meth:`Cluster.list_events`, :meth:`Cluster.log_tail`).
READ_TIMEOUT_S = (5.0, 20.0)
#: Most bytes of a pod's log :meth:`Cluster.log_tail` asks for (the kubelet's ``limitBytes``).
LOG_TAIL_BYTES = 64 * 1024
#: The container of a trial pod that runs the trainable (its log is the user's output).
TRIAL_CONTAINER = "trial"
#: How long :func:`follow` keeps polling through API errors before it gives up, in seconds.
FOLLOW_OUTAGE_S = 60.0


class InvalidExperiment(ValueError):
    """The operator refused the Experiment (``Ready=False/InvalidSpec``); the message is its reason."""


class ClusterUnavailable(ConnectionError):
    """The cluster cannot be used: no kubeconfig, an unknown context, the API server unreachable or refusing
    the request, or kubetune's CRDs not installed. The message is one line that says what to do."""


class ExperimentNotFound(LookupError):
    """The Experiment is not in the namespace (or was deleted while it was followed)."""


class ExperimentExists(ValueError):
    """A new run's Experiment name is taken in the namespace; the message names the ways on (Ray would run into the
    experiment folder of that name: a kubetune Experiment is one object, and its name is the run's)."""


def api_message(exc: Any) -> str:
    """The API server's own one-line message of an ``ApiException`` (its Status ``message``), else its status."""
    import json

    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{exc.status} {exc.reason}"


def _unreachable(server: str, exc: BaseException) -> ClusterUnavailable:
    """A :class:`ClusterUnavailable` for a request that got no answer from ``server``."""
    cause = getattr(exc, "reason", None) or exc
    text = str(cause).split("Failed to establish a new connection: ")[-1]
    return ClusterUnavailable(
        f"cannot reach the API server {server}: {text} (is the cluster up? `kubectl cluster-info` "
        "checks the same kubeconfig)"
    )


@dataclass
class Cluster:
    """A connection to the cluster of one kubeconfig context.

    Attributes:
        namespace: the namespace used when a call gives none (the context's, else ``default``).
        objects: a ``kubernetes.client.CustomObjectsApi``.
        core: a ``kubernetes.client.CoreV1Api``.
    """

    namespace: str
    objects: Any
    core: Any
    server: str = ""
    """The API server's URL, for messages."""

    @classmethod
    def connect(cls, context: str | None = None, namespace: str | None = None) -> "Cluster":
        """Load the kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``; in-cluster config inside a pod),
        read when called (the client library reads ``$KUBECONFIG`` once, at import). Makes no request.

        Raises:
            ClusterUnavailable: no kubeconfig, ``context`` is not one of its contexts, or it cannot be used.
        """
        import os

        from kubernetes import client, config

        path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            config.load_kube_config(config_file=path, context=context)
            contexts, active = config.list_kube_config_contexts(config_file=path)
            if context:
                active = next((c for c in contexts if c.get("name") == context), active)
            default = (active or {}).get("context", {}).get("namespace") or "default"
        except config.ConfigException as exc:
            if context or "KUBERNETES_SERVICE_HOST" not in os.environ:
                raise ClusterUnavailable(_config_problem(path, context, exc)) from None
            config.load_incluster_config()
            default = "default"
        api = client.ApiClient()
        return cls(
            namespace or default, client.CustomObjectsApi(api), client.CoreV1Api(api), api.configuration.host or ""
        )

    def check(self) -> None:
        """The pre-flight check: one request (``GET /apis/kubetune.io/v1alpha1``, bounded by
        :data:`CHECK_TIMEOUT_S`) that the API server answers and serves Experiments and Trials.

        Raises:
            ClusterUnavailable: the API server cannot be reached, refuses the request, or kubetune's CRDs
                are not installed.
        """
        from kubernetes.client import ApiException

        try:
            resources = self.objects.get_api_resources(GROUP, VERSION, _request_timeout=CHECK_TIMEOUT_S)
        except ApiException as exc:
            if exc.status == 404:
                raise ClusterUnavailable(_NO_CRDS.format(server=self.server)) from None
            raise ClusterUnavailable(f"the API server {self.server} refused the request: {api_message(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - urllib3's and the socket's errors: no answer
            raise _unreachable(self.server, exc) from None
        served = {r.name for r in resources.resources or ()}
        if not {EXPERIMENTS, TRIALS} <= served:
            raise ClusterUnavailable(_NO_CRDS.format(server=self.server))

    def create(self, body: dict) -> dict:
        """Create the Experiment ``body``; return it as stored (with its ``uid``).

        Raises:
            ExperimentExists: an Experiment of its name is in the namespace (409).
            kubernetes.client.ApiException: refused otherwise, e.g. 422 from the CRD schema.
        """
        from kubernetes.client import ApiException

        try:
            return self.objects.create_namespaced_custom_object(GROUP, VERSION, self.namespace, EXPERIMENTS, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            name = body["metadata"]["name"]
            raise ExperimentExists(
                f"an Experiment named {name!r} is already in namespace {self.namespace}: follow it (resume=True in "
                f"tune.run, Tuner.restore({name!r}), kubetune watch {name}), delete it first to run afresh (kubetune "
                f"delete {name}), or give this run another name"
            ) from None

    def get(self, name: str, timeout_s: Any = None) -> dict:
        """Return the Experiment ``name``; ``timeout_s``: seconds to connect, then to hear from the API server (a
        number or a pair; None waits). Raises ``ApiException`` (404) when absent."""
        return self.objects.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, EXPERIMENTS, name, _request_timeout=timeout_s
        )

    def list(self, namespace: str | None = None) -> list[dict]:
        """Return every Experiment of ``namespace`` (default :attr:`namespace`).

        Raises:
            kubernetes.client.ApiException: refused, e.g. 403 where the identity may not list Experiments there.
        """
        return self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace or self.namespace, EXPERIMENTS)[
            "items"
        ]

    def list_all_namespaces(self) -> list[dict]:
        """Return every Experiment of every namespace (one cluster-wide list).

        Raises:
            kubernetes.client.ApiException: refused, e.g. 403 where the identity may not list them cluster-wide.
        """
        return self.objects.list_cluster_custom_object(GROUP, VERSION, EXPERIMENTS)["items"]

    def trials(self, experiment: dict) -> list[dict]:
        """Return the Trials owned by ``experiment`` (by its uid; in its namespace), in index order."""
        uid = experiment["metadata"]["uid"]
        namespace = experiment["metadata"].get("namespace") or self.namespace
        items = self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, TRIALS)["items"]
        owned = [t for t in items if any(o.get("uid") == uid for o in t["metadata"].get("ownerReferences") or ())]
        return sorted(owned, key=lambda t: t["spec"].get("index", 0))

    def list_trials(self, namespace: str, timeout_s: Any = READ_TIMEOUT_S) -> list[dict]:
        """Return every Trial of ``namespace`` as the API returns it (one list; the caller groups them by owner).

        Args:
            namespace: the namespace.
            timeout_s: seconds to connect, then to hear from the API server (a number or a pair).

        Raises:
            kubernetes.client.ApiException: refused (403 where the identity may not list Trials there).
            Exception: urllib3's errors when the API server does not answer within ``timeout_s``.
        """
        return self.objects.list_namespaced_custom_object(
            GROUP, VERSION, namespace, TRIALS, _request_timeout=timeout_s
        )["items"]

    def list_events(self, namespace: str, timeout_s: Any = READ_TIMEOUT_S) -> list[dict]:
        """Return the Events of ``namespace`` about kubetune's objects (``involvedObject.apiVersion`` kubetune.io's:
        Experiments and Trials), as the API returns them (camelCase keys: ``involvedObject``, ``lastTimestamp``...).

        Args:
            namespace: the namespace.
            timeout_s: seconds to connect, then to hear from the API server (a number or a pair).

        Raises:
            kubernetes.client.ApiException: refused (403 where the identity may not list Events there).
            Exception: urllib3's errors when the API server does not answer within ``timeout_s``.
        """
        import json

        response = self.core.list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.apiVersion={GROUP}/{VERSION}",
            _request_timeout=timeout_s,
            _preload_content=False,
        )
        return json.loads(response.data).get("items") or []

    def log_tail(
        self,
        namespace: str,
        pod: str,
        lines: int,
        container: str = TRIAL_CONTAINER,
        timeout_s: Any = READ_TIMEOUT_S,
    ) -> str:
        """Return the last ``lines`` lines of container ``container`` of pod ``pod`` (at most
        :data:`LOG_TAIL_BYTES` bytes of them; undecodable bytes replaced).

        Raises:
            kubernetes.client.ApiException: 404 when the pod is gone, 400 while its container has not started,
                403 where the identity may not read pods' logs.
            Exception: urllib3's errors when the API server does not answer within ``timeout_s``.
        """
        response = self.core.read_namespaced_pod_log(
            pod,
            namespace,
            container=container,
            tail_lines=lines,
            limit_bytes=LOG_TAIL_BYTES,
            _request_timeout=timeout_s,
            _preload_content=False,
        )
        return response.data.decode(errors="replace")

    def trial(self, name: str) -> dict:
        """Return the Trial ``name``. Raises ``ApiException`` (404) when absent."""
        return self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, TRIALS, name)

    def set_suspend(self, name: str, suspend: bool) -> dict:
        """Set ``spec.suspend`` of Experiment ``name`` (suspend: running trials checkpoint and stop)."""
        return self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, EXPERIMENTS, name, {"spec": {"suspend": suspend}}
        )

    def delete(self, name: str) -> None:
        """Delete Experiment ``name`` (its Trials and pods go with it; storage is kept)."""
        self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, EXPERIMENTS, name)

    def pod_log(self, pod: str, follow: bool = False) -> Any:
        """Return the log of trial pod ``pod``: a string, or with ``follow`` a stream of byte lines."""
        if follow:
            response = self.core.read_namespaced_pod_log(pod, self.namespace, follow=True, _preload_content=False)
            return response.stream()
        response = self.core.read_namespaced_pod_log(pod, self.namespace, _preload_content=False)
        return response.data.decode(errors="replace")


_NO_CRDS = (
    "kubetune's CRDs are not installed in the cluster at {server}: install the operator "
    "(helm install kubetune helm/kubetune, or kubectl apply -f crds/ for the CRDs alone)"
)


def _config_problem(path: str, context: str | None, exc: Exception) -> str:
    """One line saying why the kubeconfig at ``path`` cannot be used, and what to do."""
    import os

    from kubernetes import config

    if not os.path.exists(path):
        return f"no kubeconfig at {path}: set KUBECONFIG to one, or run where ~/.kube/config reaches a cluster"
    if context:
        try:
            names = [c.get("name") for c in config.list_kube_config_contexts(config_file=path)[0]]
        except config.ConfigException:
            names = None
        if names is not None and context not in names:
            return f"no context {context!r} in {path}; its contexts: {', '.join(map(str, names)) or 'none'}"
    return f"cannot use the kubeconfig {path}: {exc}"


def invalid_reason(experiment: dict) -> str | None:
    """Return the operator's message when it refused ``experiment`` (``Ready=False/InvalidSpec``), else None."""
    for condition in (experiment.get("status") or {}).get("conditions") or ():
        if (
            condition.get("type") == "Ready"
            and condition.get("status") == "False"
            and condition.get("reason") == "InvalidSpec"
        ):
            return condition.get("message") or "InvalidSpec"
    return None


def follow(
    cluster: Cluster,
    name: str,
    show: Callable[[dict, list[dict]], None] | None = None,
    poll_interval_s: float = 1.0,
    timeout_s: float | None = None,
) -> tuple[dict, list[dict]]:
    """Poll Experiment ``name`` and its Trials until it ends, calling ``show(experiment, trials)`` each time.

    Args:
        cluster: the connection.
        name: the Experiment.
        show: called after every poll (the live table), and once more with the final state.
        poll_interval_s: seconds between polls.
        timeout_s: give up after this long; None waits for the end.

    Returns:
        The final Experiment and Trials.

    Raises:
        InvalidExperiment: the operator refused the spec.
        TimeoutError: ``timeout_s`` passed first.
        ExperimentNotFound: the Experiment was deleted (or never was).
        ClusterUnavailable: the API server refused a request (401, 403...), or did not answer or answered 5xx
            or 429 for :data:`FOLLOW_OUTAGE_S`.
    """
    from kubernetes.client import ApiException
    from urllib3.exceptions import HTTPError

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    failing_since = None
    while True:
        try:
            experiment = cluster.get(name)
            trials = cluster.trials(experiment)
            failing_since = None
        except ApiException as exc:
            if exc.status == 404:
                raise ExperimentNotFound(
                    f"experiment {cluster.namespace}/{name} is gone (deleted while it was followed); its results "
                    "stay in storage"
                ) from None
            failing_since = failing_since or time.monotonic()
            if (exc.status or 0) < 500 and exc.status != 429 or time.monotonic() - failing_since > FOLLOW_OUTAGE_S:
                refused = f"the API server {cluster.server} refused the request: {api_message(exc)}"
                raise ClusterUnavailable(refused) from None
            time.sleep(poll_interval_s)
            continue
        except (HTTPError, OSError) as exc:  # no answer
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > FOLLOW_OUTAGE_S:
                raise _unreachable(cluster.server, exc) from None
            time.sleep(poll_interval_s)
            continue
        if show:
            show(experiment, trials)
        reason = invalid_reason(experiment)
        if reason:
            raise InvalidExperiment(reason)
        if (experiment.get("status") or {}).get("phase") in FINAL_PHASES:
            return experiment, trials
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"experiment {cluster.namespace}/{name} did not end within {timeout_s:g} s")
        time.sleep(poll_interval_s)
