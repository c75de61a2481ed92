"""The SDK's and the ``kubetune`` command's access to the cluster: Experiments and Trials by name.

Owns every Kubernetes API call made from a user's machine (kubeconfig loading, create, read,
suspend, resume, delete, listing an Experiment's Trials and reading a trial pod's log) and
:func:`follow`, the loop that shows an Experiment's progress until it ends. Called by
:mod:`kubetune.tuner` and :mod:`kubetune.cli`. Uses the official ``kubernetes`` client (the ``sdk``
extra); nothing here runs in a trial pod.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

GROUP, VERSION = "kubetune.io", "v1alpha1"
EXPERIMENTS, TRIALS = "experiments", "trials"
#: Experiment phases after which nothing more happens.
FINAL_PHASES = ("Succeeded", "Failed")


class InvalidExperiment(ValueError):
    """The operator refused the Experiment (``Ready=False/InvalidSpec``); the message is its reason."""


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

    @classmethod
    def connect(cls, context: str | None = None, namespace: str | None = None) -> "Cluster":
        """Load the kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``; in-cluster config inside a pod),
        read when called (the client library reads ``$KUBECONFIG`` once, at import).

        Raises:
            kubernetes.config.ConfigException: no usable configuration.
        """
        import os

        from kubernetes import client, config

        path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            config.load_kube_config(config_file=path, context=context)
            _, active = config.list_kube_config_contexts(config_file=path)
            default = (active or {}).get("context", {}).get("namespace") or "default"
        except config.ConfigException as exc:
            if context or "KUBERNETES_SERVICE_HOST" not in os.environ:
                raise config.ConfigException(f"cannot load the kubeconfig {path}: {exc}") from exc
            config.load_incluster_config()
            default = "default"
        api = client.ApiClient()
        return cls(namespace or default, client.CustomObjectsApi(api), client.CoreV1Api(api))

    def create(self, body: dict) -> dict:
        """Create the Experiment ``body``; return it as stored (with its ``uid``).

        Raises:
            kubernetes.client.ApiException: refused, e.g. 409 when the name is taken or 422 from the
                CRD schema.
        """
        return self.objects.create_namespaced_custom_object(GROUP, VERSION, self.namespace, EXPERIMENTS, body)

    def get(self, name: str) -> dict:
        """Return the Experiment ``name``. Raises ``ApiException`` (404) when absent."""
        return self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, EXPERIMENTS, name)

    def list(self) -> list[dict]:
        """Return every Experiment of the namespace."""
        return self.objects.list_namespaced_custom_object(GROUP, VERSION, self.namespace, EXPERIMENTS)["items"]

    def trials(self, experiment: dict) -> list[dict]:
        """Return the Trials owned by ``experiment`` (by its uid), in index order."""
        uid = experiment["metadata"]["uid"]
        items = self.objects.list_namespaced_custom_object(GROUP, VERSION, self.namespace, TRIALS)["items"]
        owned = [t for t in items if any(o.get("uid") == uid for o in t["metadata"].get("ownerReferences") or ())]
        return sorted(owned, key=lambda t: t["spec"].get("index", 0))

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
        kubernetes.client.ApiException: the Experiment vanished (404) or the API failed.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        experiment = cluster.get(name)
        trials = cluster.trials(experiment)
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
