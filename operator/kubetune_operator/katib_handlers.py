"""The kopf daemon that serves Katib's ``kubeflow.org/v1beta1`` Experiments (docs/katib.md, "Katib's API, served").

Registered by ``python -m kubetune_operator`` only when ``katib.enabled`` is set (the chart's ``katib.enabled``,
which also installs Katib's CRDs). One daemon per Katib Experiment, every :data:`PASS_INTERVAL_S` (longer for an
Experiment whose pass takes long: :data:`PASS_SHARE`):

1. converts it (:func:`kubetune_operator.katib_api.native_experiment`; a ``trialTemplate.configMap``'s template read
   from its ConfigMap first) and creates the native Experiment that runs it, under its name and owned by it; a
   Katib Experiment kubetune cannot run gets ``Failed`` with reason ``ExperimentRefused`` and the converter's
   reason, and a ``Refused`` event; its budget (``maxTrialCount``,
   ``parallelTrialCount``, ``maxFailedTrialCount``, as Katib's SDK ``edit_experiment_budget`` changes it) is
   carried to the native spec;
2. mirrors each native Trial as a Katib Trial (:func:`~kubetune_operator.katib_api.katib_trial`);
3. writes the Katib Experiment's status (:func:`~kubetune_operator.katib_api.katib_status`) when it changed.

The native Experiment is run by the operator as any other; this daemon only reads it. Every object it writes is
computed from the API's objects, so a restarted operator picks up where the last one was. The daemon ends once the
Katib Experiment's final status and every Trial's are written.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import kopf
from kubernetes import client

from . import katib_api as ka
from .kube import Kube, api_message
from .labels import EXPERIMENT_PLURAL, GROUP, VERSION

log = logging.getLogger("kubetune.katib")
#: Seconds between two passes of a Katib Experiment's daemon, ...
PASS_INTERVAL_S = 2.0
#: ... or this many times the last pass's duration, when longer.
PASS_SHARE = 5.0
#: Katib Trials written at once (a create and a status patch each), and at most this many in a pass: the Katib
#: Experiment's status is written between two such batches.
MIRROR_WORKERS = 8
MAX_WRITES_PER_PASS = 800
#: The native spec fields Katib's budget edits change.
_BUDGET = ("numSamples", "maxConcurrentTrials", "failure")


def _read(call, *args) -> dict | None:
    """The object a client read ``call(*args)`` answers (a dict), or None where it does not exist (404)."""
    try:
        resp = call(*args, _preload_content=False)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return json.loads(resp.data)


def _get(kube: Kube, group: str, version: str, namespace: str, plural: str, name: str) -> dict | None:
    return _read(kube.custom.get_namespaced_custom_object, group, version, namespace, plural, name)


def _list(kube: Kube, group: str, version: str, namespace: str, plural: str, selector: str) -> list[dict]:
    items, token = [], None
    while True:
        kwargs = {"_continue": token} if token else {}
        resp = kube.custom.list_namespaced_custom_object(
            group, version, namespace, plural, label_selector=selector, limit=500, _preload_content=False, **kwargs
        )
        page = json.loads(resp.data)
        items += page["items"]
        token = page["metadata"].get("continue")
        if not token:
            return items


def _patch_status(kube: Kube, namespace: str, plural: str, name: str, status: dict) -> None:
    kube.custom.patch_namespaced_custom_object_status(
        ka.KATIB_GROUP, ka.KATIB_VERSION, namespace, plural, name, {"status": status}, _preload_content=False
    )


def _refuse(kube: Kube, katib: dict, error: str, event: str, now: datetime, events: list) -> bool:
    """Write ``katib``'s refused status (:func:`~kubetune_operator.katib_api.refused_status`) and its ``Refused``
    event, once: nothing when that status is written already. True: the daemon is done with it."""
    status = ka.refused_status(katib, error, now)
    if status != katib.get("status"):
        _patch_status(kube, katib["metadata"]["namespace"], "experiments", katib["metadata"]["name"], status)
        events.append(("Warning", "Refused", event))
    return True


def _sync(
    kube: Kube, katib: dict, events: list[tuple[str, str, str]], mirrored: dict[str, dict], templates: dict
) -> bool | None:
    """One pass over ``katib`` (blocking API calls, on the pool); True once its final status and its Trials' are
    written, None when Katib Trials are left to write (more than :data:`MAX_WRITES_PER_PASS` were due). The events
    to post on ``katib`` go to ``events`` as (type, reason, message): the daemon posts them. ``mirrored`` is the
    daemon's cache of the Katib Trials' statuses by name, filled from the API when empty: later passes list only
    the native Trials (a cache that went wrong is emptied and filled again). ``templates``: the daemon's cache of
    the ConfigMap of a ``trialTemplate.configMap`` (read once: only the budget of a running Experiment is carried)."""
    namespace, name = katib["metadata"]["namespace"], katib["metadata"]["name"]
    now = datetime.now(timezone.utc)
    try:
        source, inline = ka.template_source(katib), katib
        if source is not None:
            if source not in templates:
                config_map_namespace, config_map = source
                templates[source] = _read(kube.core.read_namespaced_config_map, config_map, config_map_namespace)
            inline = ka.with_template(katib, templates[source])
        desired = ka.native_experiment(inline)
    except ka.KatibConversionError as exc:
        return _refuse(kube, katib, str(exc), f"kubetune cannot run this Experiment: {exc}", now, events)
    native = _get(kube, GROUP, VERSION, namespace, EXPERIMENT_PLURAL, name)
    if native is None:
        try:
            kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, EXPERIMENT_PLURAL, desired)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        events.append(("Normal", "Created", f"runs as the kubetune Experiment {namespace}/{name}"))
        return False
    if not ka.serves(native, katib):
        error = f"a kubetune Experiment {namespace}/{name} exists that does not run this Katib Experiment"
        return _refuse(kube, katib, error, error, now, events)
    budget = {k: desired["spec"].get(k) for k in _BUDGET if native["spec"].get(k) != desired["spec"].get(k)}
    if budget:
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, EXPERIMENT_PLURAL, name, {"spec": budget})
    trials, token = [], None
    while True:  # the native Experiment's Trials (Kube.list_trials: its label, owned by it), a page at a time
        page, token = kube.list_trials(namespace, name, native["metadata"]["uid"], token)
        trials += page
        if token is None:
            break
    if not mirrored:
        selector = f"{ka.LABEL_KATIB_EXPERIMENT}={name}"
        for t in _list(kube, ka.KATIB_GROUP, ka.KATIB_VERSION, namespace, "trials", selector):
            mirrored[t["metadata"]["name"]] = t.get("status") or {}
    wants = [ka.katib_trial(katib, trial) for trial in trials]
    due = [w for w in wants if mirrored.get(w["metadata"]["name"]) != w["status"]]

    def write(want: dict) -> None:  # on the pass's own threads: Katib Trials are written MIRROR_WORKERS at a time
        trial_name = want["metadata"]["name"]
        if trial_name not in mirrored:
            body = {k: v for k, v in want.items() if k != "status"}
            try:
                kube.custom.create_namespaced_custom_object(ka.KATIB_GROUP, ka.KATIB_VERSION, namespace, "trials", body)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
            mirrored[trial_name] = {}
        _patch_status(kube, namespace, "trials", trial_name, want["status"])
        mirrored[trial_name] = want["status"]

    try:
        with ThreadPoolExecutor(MIRROR_WORKERS, thread_name_prefix="katib-mirror") as pool:
            list(pool.map(write, due[:MAX_WRITES_PER_PASS]))
    except client.ApiException:
        mirrored.clear()  # a Katib Trial deleted or changed behind the cache: read them all again next pass
        raise
    status = ka.katib_status(katib, native, wants, now)
    if status != katib.get("status"):
        _patch_status(kube, namespace, "experiments", name, status)
    if len(due) > MAX_WRITES_PER_PASS:
        return None  # more Katib Trials to write: the next pass comes after PASS_INTERVAL_S, whatever this one took
    return "completionTime" in status


@kopf.daemon(ka.KATIB_GROUP, ka.KATIB_VERSION, "experiments", id="katib", cancellation_timeout=5.0)
async def serve_katib_experiment(namespace, name, stopped, memo: kopf.Memo, **_) -> None:
    """Keep a Katib Experiment, its native Experiment and the mirrored Trials in step until it ends."""
    kube: Kube = memo.kube
    failures, katib, mirrored, templates, took = 0, None, {}, {}, 0.0
    while not stopped:
        events: list[tuple[str, str, str]] = []
        started = time.monotonic()
        try:
            katib = await kube.call(_get, kube, ka.KATIB_GROUP, ka.KATIB_VERSION, namespace, "experiments", name)
            if katib is None or katib["metadata"].get("deletionTimestamp"):
                return
            done = await kube.call(_sync, kube, katib, events, mirrored, templates)
            failures, took = 0, 0.0 if done is None else time.monotonic() - started
        except client.ApiException as exc:
            done, failures = False, failures + 1
            log.warning("Katib Experiment %s/%s: %s (retried)", namespace, name, api_message(exc))
            if failures == 5 and katib is not None:
                events.append(("Warning", "APICallsFailed", api_message(exc)))
        for type_, reason, message in events:
            kopf.event(katib, type=type_, reason=reason, message=message)
        if done:
            return
        # a large Experiment's pass (it lists every Trial) takes at most a fifth of the daemon's time
        await stopped.wait(max(PASS_INTERVAL_S * min(2**failures, 16), PASS_SHARE * took))
