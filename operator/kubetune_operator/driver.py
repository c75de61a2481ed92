"""The Experiment's driver pod (``spec.driver``): where the callbacks and the searcher Ray runs in its driver run,
in the user's image.

Owns the driver pod's manifest and its token Secret (:func:`build_driver_pod`, :func:`build_driver_secret`), what
the driver's pods say (:class:`DriverPods`: done, failed for good, the next to create), what a pass does about them
(:meth:`DriverPods.plan`: the next pod, or nothing) and the events the collector serves the pod
(:func:`driver_events`, the protocol of ``kubetune.env.DRIVER_EVENTS_PATH``). Called by the controller's pass and
by the collector. Pure.

The operator never runs the callbacks: the pod (``python -m kubetune.runtime.driver``) reads the journal's entries
through the collector, calls the callbacks in that order and saves its place in the experiment's storage before it
asks for more, so the operator may forget what it was given (:meth:`kubetune_operator.journal.Journal.delivered`).
A pod that dies is replaced (at most :data:`MAX_FAILURES` times, evictions and deletions not counted) and goes on
from its saved place; a callback that raises fails the Experiment (``DriverFailed``), as Ray's run raises. The
Experiment ends only once the pod has called ``on_experiment_end`` and exited 0 (docs/api.md, "The driver pod").
"""

from __future__ import annotations

import json
from typing import Mapping

from kubetune.env import (
    DRIVER,
    DRIVER_CALLBACK_FAILED_EXIT,
    STORAGE_ENDPOINT,
    STORAGE_REGION,
    TERMINATION_MESSAGE_PATH,
    TOKEN,
)
from kubetune.storage import join_uri

from .builders import (
    _POD_SPEC_FIELDS,
    SCRATCH_DIR,
    SCRATCH_VOLUME,
    TOKEN_SECRET_KEY,
    _storage,
    owner_reference,
    pod_security,
    token_secret,
    token_secret_name,
)
from .container_trials import kubetune_security
from .labels import (
    LABEL_ATTEMPT,
    LABEL_EXPERIMENT,
    LABEL_MANAGED_BY,
    LABEL_TRIAL,
    MANAGED_BY,
    TRIAL_CONTAINER,
    label_value,
    pod_name,
)
from .podview import PodView
from .settings import Settings
from .tokens import mint_token

__all__ = [
    "DRIVER_TRIAL",
    "DriverPods",
    "build_driver_pod",
    "build_driver_secret",
    "driver_events",
    "driver_subject",
    "split_driver_pods",
]

#: The trial label of a driver pod: no Trial has an empty name.
DRIVER_TRIAL = ""
#: Driver pods that may fail (not by an eviction, a preemption or a deletion) before the Experiment fails.
MAX_FAILURES = 3
#: What the driver pod runs.
DRIVER_COMMAND = ("python", "-m", "kubetune.runtime.driver")
#: The driver pod's requests: it waits on the collector and calls the callbacks (more with ``spec.driver.resources``).
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}}
#: Fields of ``spec.template`` the driver pod takes: where it runs, as whom, from which registry (a trial pod's, but
#: its volumes and scheduling gates, which are the trials').
_TEMPLATE_FIELDS = tuple(f for f in _POD_SPEC_FIELDS if f not in ("volumes", "schedulingGates"))
#: Journal entry kinds the driver turns into callback calls.
_EVENT_KINDS = ("add", "suggested", "results", "checkpoint", "end")
#: Events served per request at most.
MAX_EVENTS = 1000


def driver_subject(experiment: str) -> str:
    """The ``trial`` claim of the driver's token (``<experiment>/driver``): no Trial's name has a slash, so a
    driver's token is never worth a trial's results, nor a trial's the driver's events."""
    return f"{experiment}/driver"


def split_driver_pods(pods: Mapping[str, PodView]) -> tuple[dict[str, PodView], dict[str, PodView]]:
    """``(trial pods, driver pods)`` of an Experiment's pods by name."""
    trials, drivers = {}, {}
    for name, pod in pods.items():
        (drivers if pod.trial == DRIVER_TRIAL else trials)[name] = pod
    return trials, drivers


def state_uri(experiment: Mapping, settings: Settings) -> str:
    """Where the driver pod saves its place: ``<storage>/<namespace>/<experiment>/sdk/driver-<uid[:8]>.json``,
    beside what the SDK uploaded for the run (an Experiment created again under the name starts afresh)."""
    meta = experiment["metadata"]
    uri, _, _ = _storage(experiment["spec"], settings)
    return join_uri(uri, meta["namespace"], meta["name"], "sdk", f"driver-{meta['uid'][:8]}.json")


def build_driver_pod(experiment: Mapping, attempt: int, settings: Settings) -> dict:
    """The manifest of the Experiment's ``attempt``-th driver pod (``<experiment>-driver-<attempt>``).

    It runs ``python -m kubetune.runtime.driver`` in the experiment's image with ``kubetune.env.DRIVER``, the token
    of :func:`build_driver_secret`, the storage's endpoint and region (``KUBETUNE_STORAGE_ENDPOINT`` and
    ``KUBETUNE_STORAGE_REGION``, as the trial pods: a callback's ``open_storage`` reaches it) and the storage
    ``credentialsSecret``; ``spec.template``'s env, envFrom,
    securityContext and placement fields (:data:`_TEMPLATE_FIELDS`, its service account among them) apply as they
    do to the trial pods. It meets the *restricted* Pod Security Standard, has a read-only root filesystem with
    ``/tmp`` (also ``HOME``) writable, no service-account token (as the trial pods: it calls no API), and never
    restarts (a new pod, :class:`DriverPods`, takes over).

    Raises:
        ValueError: no storage URI, or an Experiment without ``metadata.uid``.
    """
    spec, meta = experiment["spec"], experiment["metadata"]
    template = spec.get("template") or {}
    name = pod_name(f"{meta['name']}-driver", attempt)
    uri, endpoint, region = _storage(spec, settings)
    described = {
        "namespace": meta["namespace"],
        "experiment": meta["name"],
        "collectorURL": settings.collector.base_url(),
        "callbacksURI": spec["driver"].get("callbacksPickleURI"),
        "searcherURI": spec["driver"].get("searcherPickleURI"),
        "stateURI": state_uri(experiment, settings),
        "storageEndpoint": endpoint,
        "storageRegion": region,
        "stop": spec.get("stop") or {},
        "numSamples": spec.get("numSamples"),
    }
    env = [
        {"name": DRIVER, "value": json.dumps(described, sort_keys=True)},
        {
            "name": TOKEN,
            "valueFrom": {"secretKeyRef": {"name": token_secret_name(name, meta["uid"]), "key": TOKEN_SECRET_KEY}},
        },
        *({"name": k, "value": v} for k, v in ((STORAGE_ENDPOINT, endpoint), (STORAGE_REGION, region)) if v),
        *(template.get("env") or []),
    ]
    if not any(e.get("name") == "HOME" for e in template.get("env") or ()):
        env.insert(2, {"name": "HOME", "value": SCRATCH_DIR})
    container = {
        "name": TRIAL_CONTAINER,
        "image": spec.get("image") or settings.trials.default_image,
        "command": list(DRIVER_COMMAND),
        "env": env,
        "resources": spec["driver"].get("resources") or DEFAULT_RESOURCES,
        "securityContext": kubetune_security(),
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}],
    }
    secret = (spec.get("storage") or {}).get("credentialsSecret")
    env_from = ([{"secretRef": {"name": secret}}] if secret else []) + (template.get("envFrom") or [])
    if env_from:
        container["envFrom"] = env_from
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": settings.trials.termination_grace_period_s,
        "securityContext": pod_security(settings, template),
        "containers": [container],
        "volumes": [{"name": SCRATCH_VOLUME, "emptyDir": {}}],
        **{k: template[k] for k in _TEMPLATE_FIELDS if template.get(k)},
    }
    labels = {
        LABEL_EXPERIMENT: label_value(meta["name"]),
        LABEL_TRIAL: DRIVER_TRIAL,
        LABEL_ATTEMPT: str(attempt),
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    metadata = {
        "name": name,
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [owner_reference(experiment)],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def build_driver_secret(pod: Mapping, experiment: Mapping, token: str) -> dict:
    """The Secret holding the driver ``pod``'s collector token (key ``token``), owned by the Experiment."""
    return token_secret(pod, experiment, {TOKEN_SECRET_KEY: token})


class DriverPods:
    """What the Experiment's driver pods say, as of the last :meth:`observe`.

    Attributes:
        done: a driver pod exited 0: it called ``on_experiment_end`` (the Experiment may end).
        failure: why the driver failed for good (a callback raised, or :data:`MAX_FAILURES` pods failed), or None.
        next_attempt: the attempt of the pod to create next, or None while one is pending or running.
        waiting: why the current driver pod cannot start (``"<reason>: <message>"``: an image that cannot be pulled,
            no node that fits), or None.
        pending: the attempt of the pod asked for and not seen yet (it is not asked for twice), or None.
    """

    def __init__(self):
        self.done = False
        self.failure: str | None = None
        self.failure_told = False
        self.next_attempt: int | None = None
        self.waiting: str | None = None
        self.pending: int | None = None
        self.pending_name: str | None = None

    def plan(self, plan, experiment: Mapping, settings: Settings, key: bytes) -> None:
        """Add to ``plan`` the next driver pod and its token Secret when one is due, and a ``DriverFailed``
        Warning event once the driver failed for good."""
        if self.failure is not None and not self.failure_told:
            self.failure_told = True
            plan.events.append((None, "Warning", "DriverFailed", self.failure))
        if self.next_attempt is None or self.next_attempt == self.pending:
            return
        meta = experiment["metadata"]
        pod = build_driver_pod(experiment, self.next_attempt, settings)
        token = mint_token(key, meta["namespace"], driver_subject(meta["name"]), self.next_attempt, meta["uid"])
        plan.create_pods.append(pod)
        plan.token_secrets[pod["metadata"]["name"]] = build_driver_secret(pod, experiment, token)
        runs = " and ".join(
            what
            for key, what in (("callbacksPickleURI", "callbacks"), ("searcherPickleURI", "searcher"))
            if experiment["spec"]["driver"].get(key)
        )
        created = f"created driver pod {pod['metadata']['name']} (spec.driver's {runs})"
        plan.events.append((None, "Normal", "DriverPodCreated", created))
        self.pending, self.pending_name = self.next_attempt, pod["metadata"]["name"]

    def not_created(self, name: str) -> None:
        """The create of pod ``name`` failed or was not sent: a driver pod is asked for again next pass."""
        if name == self.pending_name:
            self.pending = self.pending_name = None

    def observe(self, pods: Mapping[str, PodView]) -> None:
        """Take the driver pods of the Experiment (:func:`split_driver_pods`), deleted ones' last state included."""
        latest = max(pods.values(), key=lambda p: p.attempt, default=None)
        self.next_attempt = None
        self.waiting = f"{latest.name}: {': '.join(latest.waiting)}" if latest is not None and latest.waiting else None
        if self.pending is not None and latest is not None and latest.attempt >= self.pending:
            self.pending = None  # the pod asked for is seen
        if self.done or self.failure is not None:
            return
        if latest is None:
            self.next_attempt = 0
            return
        if latest.phase == "Succeeded":
            self.done = True
            return
        if latest.phase == "Failed" and latest.exit_code == DRIVER_CALLBACK_FAILED_EXIT and not latest.disruption:
            # the pod's message is the hook's and error's line, then the traceback (kubetune.runtime.driver)
            self.failure = f"a callback raised in driver pod {latest.name}: {_line(latest.message, 0)}"
            return
        failed = [p for p in pods.values() if p.phase == "Failed" and not p.disruption and not p.deleting]
        if len(failed) >= MAX_FAILURES:
            last = max(failed, key=lambda p: p.attempt)
            self.failure = (
                f"{len(failed)} driver pods failed, the last ({last.name}, exit code {last.exit_code}): "
                f"{_line(last.message or last.reason, -1)}"
            )
            return
        if latest.phase == "Failed" or latest.gone or latest.deleting:
            self.next_attempt = latest.attempt + 1


def _line(message: str | None, index: int) -> str:
    """Line ``index`` of ``message``'s non-blank lines (0: the first, -1: the last, a traceback's error), cut."""
    lines = [line for line in (message or "").splitlines() if line.strip()]
    return lines[index].strip()[:500] if lines else "no message"


def driver_events(journal, after: int, trial_info, finished: bool, asked: str | None = None) -> dict:
    """The answer to the driver's request for the entries after ``after`` (``kubetune.env.DRIVER_EVENTS_PATH``):
    ``{"events", "next", "finished", "suggest"}``.

    Args:
        journal: the Experiment's :class:`kubetune_operator.journal.Journal`, keeping the driver's entries.
        after: the last entry the driver has saved (-1 at first).
        trial_info: ``trial name -> {"config", "path"}`` for an ``add`` event.
        finished: the Experiment would end now but for its driver (every trial ended, the search is over).
        asked: the new trial the operator asks the driver's searcher a config for (its ``suggest``), or None.

    Raises:
        LookupError: entries after ``after`` were forgotten (the driver asked from before what it said it saved).
    """
    journal.delivered(after)
    events, last = [], after
    for seq, stored in journal.feed_after(after, MAX_EVENTS):
        last = seq
        kind = stored[0]
        if kind not in _EVENT_KINDS:
            continue
        event = {"seq": seq, "kind": kind, "trial": stored[1]}
        if kind == "add":
            event.update(trial_info(stored[1]))
        elif kind == "results":
            event.update(attempt=stored[2], results=stored[3])
        elif kind == "suggested":
            event.update(suggestion=stored[2])
        elif kind == "checkpoint":
            event.update(attempt=stored[2], uri=stored[3], iteration=stored[4])
        else:
            event.update(result=stored[2], how=stored[3])
        events.append(event)
    finished = finished and journal.clean and last == journal.durable_seq - 1
    return {"events": events, "next": last, "finished": finished, "suggest": None if finished else asked}
