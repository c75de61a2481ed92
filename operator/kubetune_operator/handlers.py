"""Every kopf handler of the operator, and nothing else: each parses, calls a
function, and maps errors to conditions and events (docs/architecture.md, "Failures the operator
reports").

Imported by ``python -m kubetune_operator`` (``__main__.py``). Pods are
followed by :class:`kubetune_operator.podwatch.PodWatch` (started here, not a kopf
handler, so pods get no finalizers and a large pod count does not hold up the
daemons); one daemon per Experiment runs the level-based loop of
:class:`kubetune_operator.controller.ExperimentController`; create/resume/
update handlers only validate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from datetime import datetime, timezone

import kopf

from . import collector, explore_pool, metrics
from . import status as st
from .kube import EVENT_COMPONENT, Kube, api_message
from .labels import (
    API_VERSION,
    EXPERIMENT_PLURAL,
    FINALIZER,
    GROUP,
    KOPF_ANNOTATION_PREFIX,
    TRIAL_KIND,
    VERSION,
    label_value,
)
from .logstream import LogStreams
from .metricsauth import MetricsAuth
from .persistence import BoundedProgressStorage, DigestDiffBaseStorage
from .podwatch import PodWatch
from .registry import Registry
from .settings import Settings
from .spec_intake import InvalidSpec

log = logging.getLogger("kubetune.operator")
#: Passes of one Experiment start at least this far apart, in seconds (results and pod changes that come
#: meanwhile are taken together by the next pass), ...
MIN_PASS_INTERVAL_S = 0.2
#: ... except after a trial pod ended or went, when a slot may be free: then the next pass starts as soon
#: as the last one has been followed by this many times its planning time (at least SLOT_PASS_GAP_S), so
#: the next trial starts at once and a large Experiment's passes still leave the event loop mostly free.
SLOT_PASS_GAP_FACTOR = 3.0
SLOT_PASS_GAP_S = 0.01
IDLE_PASS_INTERVAL_S = 2.0
#: Back-off after a failed pass: doubles from the first value up to the second, in seconds.
BACKOFF_S = (1.0, 60.0)
#: Back-off while API calls of a pass fail (a quota's 403, a 429, a refused create): doubles up to this.
API_BACKOFF_MAX_S = 10.0
#: At most one APICallsFailed event per Experiment per this many seconds.
API_EVENT_INTERVAL_S = 30.0
TERMINAL = ("Succeeded", "Failed")
#: How long a pass waits for the first full list of trial pods before it reports ``Degraded``, seconds.
POD_LIST_WAIT_S = 60.0
#: How long a daemon told to stop (its Experiment finished or is being deleted) has to end on its own.
DAEMON_GRACE_S = 5.0


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    cfg = Settings.from_env()
    settings.persistence.finalizer = FINALIZER
    # kopf's own state stays a few hundred bytes per Experiment, whatever its size (persistence.py)
    settings.persistence.progress_storage = BoundedProgressStorage(prefix=KOPF_ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix=KOPF_ANNOTATION_PREFIX)
    settings.posting.level = logging.WARNING  # our own events are posted explicitly
    settings.posting.reporting_component = EVENT_COMPONENT  # as the end event's (Kube.announce_end)
    settings.watching.server_timeout = 300
    settings.batching.worker_limit = 1000
    kube = Kube()
    if cfg.trials.gang_scheduling == "auto":  # the scheduler's gang scheduling when the API server serves it
        served = await kube.call(kube.serves_podgroups)
        trials = dataclasses.replace(cfg.trials, gang_scheduling="podgroup" if served else "none")
        cfg = dataclasses.replace(cfg, trials=trials)
    log.info("gangs are admitted with: %s", cfg.trials.gang_scheduling)
    key = await kube.call(kube.load_or_create_key, cfg.collector.key_secret_namespace, cfg.collector.key_secret_name)
    memo.kube, memo.registry = kube, Registry(cfg, key, kube.write_journal)
    metrics_auth = MetricsAuth(kube.core.api_client, kube.call) if cfg.metrics.auth == "kubernetes" else None
    memo.collector = await collector.start(memo.registry, metrics_auth)
    memo.pods = PodWatch(kube.core, cfg.watch.namespaces, memo.registry.wake)
    memo.pods.start()
    pods = memo.pods
    memo.logs = LogStreams(
        kube.core.api_client.configuration, memo.registry, lambda ns, exp, pod: pods.pods(ns, label_value(exp)).get(pod)
    )
    # What is imported and built by now (kopf, the Kubernetes client, aiohttp: about 100,000 objects) lives as
    # long as the process: out of the cyclic collector's reach, a full collection no longer holds the event loop
    # (collector replies, passes, probes) the ~20 ms it took to walk them (bench/bench_collector.py).
    gc.freeze()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_) -> None:
    if getattr(memo, "pods", None) is not None:
        memo.pods.stop()
    if getattr(memo, "logs", None) is not None:
        await memo.logs.close()
    if getattr(memo, "collector", None) is not None:
        await memo.collector.cleanup()
    explore_pool.shutdown()


def _mark(kube: Kube, body, type_: str, reason: str, message: str) -> None:
    """Set condition ``type_`` on an Experiment that has no controller (its spec or its loading failed):
    ``Ready=False`` for ``InvalidSpec``, ``Degraded=True`` otherwise."""
    now = datetime.now(timezone.utc)
    gen = body.metadata.get("generation")
    conditions = st.set_condition(body.status.get("conditions"), type_, type_ != "Ready", reason, message, gen, now)
    conditions = st.kstatus_conditions(conditions, body.status.get("phase") or "Pending", gen, now)
    patch = st.status_patch(
        dict(body.status),
        {
            **dict(body.status),
            "conditions": conditions,
            "phase": body.status.get("phase") or "Pending",
            "observedGeneration": gen,
        },
    )
    if patch:
        kube.patch_experiment_status(body.metadata["namespace"], body.metadata["name"], patch)


@kopf.on.create(GROUP, VERSION, EXPERIMENT_PLURAL, id="validate")
@kopf.on.resume(GROUP, VERSION, EXPERIMENT_PLURAL, id="revalidate")
@kopf.on.update(GROUP, VERSION, EXPERIMENT_PLURAL, field="spec", id="spec-changed")
async def validate(body, namespace, name, memo: kopf.Memo, **_) -> None:
    if body.status.get("phase") in TERMINAL:
        return  # finished Experiments keep no controller in memory
    try:
        ctl = memo.registry.load(dict(body))
    except InvalidSpec as exc:
        kopf.warn(body, reason="InvalidSpec", message=str(exc)[:1000])
        await memo.kube.call(_mark, memo.kube, body, "Ready", "InvalidSpec", str(exc))
        return
    for warning in ctl.warnings[:5]:
        kopf.warn(body, reason="SuspiciousConfig", message=warning[:1000])
    memo.registry.wake(namespace, name)


def _event_target(ctl, trial: str | None) -> dict:
    if trial is None:
        return ctl.experiment
    return {
        "apiVersion": API_VERSION,
        "kind": TRIAL_KIND,
        "metadata": {"name": trial, "namespace": ctl.namespace, "uid": ctl.trials[trial].uid},
    }


@kopf.daemon(
    GROUP,
    VERSION,
    EXPERIMENT_PLURAL,
    id="reconcile",
    # The terminal status a pass writes stops the daemon (``when``): it is told to stop and given
    # DAEMON_GRACE_S to end its pass (the events of the trials that ended with the Experiment) before kopf
    # cancels it. The Experiment's end event itself goes out before that status (Kube.execute).
    cancellation_backoff=DAEMON_GRACE_S,
    cancellation_timeout=10,
    when=lambda status, **_: status.get("phase") not in ("Succeeded", "Failed"),
)
async def reconcile(stopped: kopf.DaemonStopped, body, namespace, name, memo: kopf.Memo, **_) -> None:
    """One level-based loop per Experiment until it Succeeds or Fails.

    Trials are the operator's own objects: it keeps their state in memory and reads them from the
    API once, when it (re)starts, instead of watching them (a watch would cost an event per status
    write). Pods are read from the operator's :class:`~kubetune_operator.podwatch.PodWatch`.
    """
    registry, kube = memo.registry, memo.kube
    wake, slot_freed = registry.event(namespace, name), registry.slot_freed(namespace, name)
    failures, api_failures, warned_at = 0, 0, -API_EVENT_INTERVAL_S
    try:
        while not stopped and not body.metadata.get("deletionTimestamp"):  # a deleting Experiment creates nothing
            ctl = registry.get(namespace, name)
            started = time.monotonic()
            try:
                if ctl is None:
                    try:
                        ctl = registry.load(dict(body))
                    except InvalidSpec:  # marked by validate(); wait for a spec change, or the deletion
                        await _sleep(wake, 30, stopped=stopped)
                        continue
                plan, errors, planned_s = await _pass(ctl, kube, registry, memo.pods, memo.logs)
            except Exception as exc:  # noqa: BLE001 - any failure: a condition, an event, back-off; never a crash loop
                failures += 1
                delay = min(BACKOFF_S[0] * 2 ** (failures - 1), BACKOFF_S[1])
                message = f"{type(exc).__name__}: {api_message(exc)}"[:1000]
                log.exception("experiment %s/%s: reconcile failed (retry in %.0f s)", namespace, name, delay)
                kopf.event(
                    body, type="Warning", reason="ReconcileFailed", message=f"{message} (retry in {delay:.0f} s)"
                )
                await _report_degraded(kube, body, ctl, message)
                await stopped.wait(delay)  # a back-off ends early when the daemon is told to stop
                continue
            failures = 0
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
            metrics.set_trial_counts(namespace, name, ctl.exp_status.get("trials") or {})
            for trial, kind, reason, message in plan.events:
                if trial is None or ctl.trials.get(trial) and ctl.trials[trial].uid:
                    kopf.event(_event_target(ctl, trial), type=kind, reason=reason, message=message[:1000])
            for error in errors[:5]:
                log.warning("experiment %s/%s: %s", namespace, name, error)
            if ctl.finished and not errors:
                return  # the last pass's writes all went out
            api_failures = api_failures + 1 if errors else 0
            if errors and time.monotonic() - warned_at >= API_EVENT_INTERVAL_S:
                warned_at = time.monotonic()
                kopf.event(
                    body,
                    type="Warning",
                    reason="APICallsFailed",
                    message=f"{len(errors)} API call(s) failed, retrying with back-off: {errors[0]}"[:1000],
                )
            if errors:  # back off (not cut short by wake-ups): a refused create is not sent five times a second
                await stopped.wait(min(MIN_PASS_INTERVAL_S * 2**api_failures, API_BACKOFF_MAX_S))
                continue
            if plan.create_trials:
                continue  # the new Trials' uids are known now: create their pods at once
            busy = bool(plan.create_pods)
            await _sleep(wake, MIN_PASS_INTERVAL_S if busy else IDLE_PASS_INTERVAL_S)
            await _sleep(slot_freed, max(0.0, MIN_PASS_INTERVAL_S - (time.monotonic() - started)), clear=False)
            if slot_freed.is_set():
                slot_freed.clear()
                elapsed = time.monotonic() - started
                await asyncio.sleep(max(SLOT_PASS_GAP_S, SLOT_PASS_GAP_FACTOR * planned_s - elapsed))
    finally:
        ctl = registry.get(namespace, name)
        if ctl is not None and ctl.finished:
            registry.forget(namespace, name)  # a terminal Experiment leaves memory
            explore_pool.forget(namespace, name)


async def _pass(ctl, kube: Kube, registry: Registry, pod_watch: PodWatch, logs: LogStreams):
    """One reconcile pass: adopt after a (re)start, plan, commit the journal, carry the plan out.

    Returns:
        ``(plan, errors, planned_s)``: the errors are API calls that failed (retried by the next pass);
        ``planned_s`` the seconds the pass spent planning (it sets the spacing after a slot is freed).

    Raises:
        Exception: anything else (the caller reports it as ``Degraded`` and backs off).
    """
    namespace, name = ctl.namespace, ctl.name
    if not await pod_watch.synced(POD_LIST_WAIT_S):  # a pass never plans from a partial view of the pods
        raise RuntimeError(pod_watch.error or f"trial pods not listed after {POD_LIST_WAIT_S:.0f} s")
    resuming = None if ctl.adopted else time.monotonic()
    if not ctl.restored:
        token, uid = None, ctl.experiment["metadata"].get("uid")
        while True:
            trials, token = await kube.call(kube.list_trials, namespace, name, uid, token)
            for trial in trials:
                ctl.observe_trial(trial)
            if token is None:
                break
        for _ in ctl.restore_steps(await kube.call(kube.list_journal, namespace, name)):
            await asyncio.sleep(0)  # a long journal does not hold up the probes or other Experiments
    explore_pool.step(ctl, lambda: registry.wake(namespace, name))  # PB2: explore steps in a worker process
    pods = pod_watch.pods(namespace, label_value(name))
    ctl.pass_failed(None)
    found = len(ctl.trials)
    planning = time.monotonic()
    plan = ctl.plan(pods)
    planned_s = time.monotonic() - planning
    if resuming is not None and found:
        log.info(
            "experiment %s/%s: resumed with %d trials and %d pods in %.2f s (Trials read, journal replayed, "
            "first pass planned)",
            namespace,
            name,
            found,
            len(pods),
            time.monotonic() - resuming,
        )
    try:
        await registry.commit(ctl)  # no decision of this pass leaves the operator before it is durable
    except Exception:
        ctl.plan_not_carried_out(plan)
        raise
    logs.follow(ctl, pods)  # container trials: their results are read from their pods' logs
    return plan, await kube.execute(ctl, plan), planned_s


async def _report_degraded(kube: Kube, body, ctl, message: str) -> None:
    """Write ``Degraded=True`` with ``message`` (best effort: the API server may be what failed)."""
    try:
        if ctl is None:
            await kube.call(_mark, kube, body, "Degraded", "ReconcileError", message)
            return
        ctl.pass_failed(message)
        conditions = ctl.health_conditions(ctl.exp_status.get("conditions"), datetime.now(timezone.utc))
        await kube.call(kube.patch_experiment_status, ctl.namespace, ctl.name, {"conditions": conditions})
        ctl.show_conditions(conditions)
    except Exception as exc:  # noqa: BLE001
        log.warning(
            "experiment %s/%s: cannot write the Degraded condition: %s",
            body.metadata["namespace"],
            body.metadata["name"],
            exc,
        )


async def _sleep(
    wake: asyncio.Event, timeout: float, clear: bool = True, stopped: kopf.DaemonStopped | None = None
) -> None:
    """Wait until ``wake`` is set, ``stopped`` (if given) is set or ``timeout`` seconds pass, then clear
    ``wake`` (unless ``clear`` is False)."""
    waits = [asyncio.ensure_future(wake.wait())]
    if stopped is not None:
        waits.append(asyncio.ensure_future(stopped.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    if clear:
        wake.clear()


@kopf.on.delete(GROUP, VERSION, EXPERIMENT_PLURAL, id="forget", optional=True)
async def forget(namespace, name, memo: kopf.Memo, **_) -> None:
    """Drop the in-memory controller; trials and pods go with their owner (garbage collector). A pass still
    under way creates nothing more (``ExperimentController.deleting``); nothing here writes to the API, so
    the finalizer goes even when the Experiment's status cannot be written. A coroutine: it runs on the event
    loop, with the registry and the daemons, not in kopf's thread pool."""
    ctl = memo.registry.get(namespace, name)
    if ctl is not None:
        ctl.mark_deleting()
    memo.registry.wake(namespace, name)  # a daemon waiting for its next pass sees the deletion now
    memo.registry.forget(namespace, name)
    metrics.forget(namespace, name)
    explore_pool.forget(namespace, name)
