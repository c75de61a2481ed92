"""Status math for Experiments and Trials: conditions, counts, the best trial, the phase, patches.

Pure functions over plain dicts (the shapes in ``crds/``), called by the
operator's reconcile loop and collector, which pass the current time in and
write what :func:`status_patch` returns. Conditions follow Kubernetes'
``metav1.Condition`` and Kueue's use of it: independent types with CamelCase
reasons, ``lastTransitionTime`` moved only when the status flips, bounded
messages. The Experiment status is bounded whatever the number of trials:
counts and one best trial (or, for several objectives, at most
:data:`MAX_PARETO_TRIALS` of the Pareto front and its size), never lists of every
trial (Katib #1847 hit etcd's object size limit with them);
:func:`experiment_status` enforces the bounds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence  # not typing's: isinstance on these is several times faster
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubetune import env
from kubetune.result import AUTO_RESULT_KEYS
from kubetune.resultkeys import finite_number, lookup, mode_sign, non_dominated

EXPERIMENT_PHASES = ("Pending", "Running", "Suspended", "Succeeded", "Failed")
TRIAL_PHASES = ("Pending", "Running", "Paused", "Succeeded", "Failed")
#: Condition types of an Experiment. ``Ready`` (spec accepted) is set by validation, the others by
#: :func:`experiment_conditions`.
CONDITION_TYPES = (
    "Ready",
    "Running",
    "Complete",
    "Failed",
    "Suspended",
    "Degraded",
    "TrialsWaiting",
    "TrialsStalled",
    "Reconciling",
    "Stalled",
)

#: Longest condition message, in UTF-8 bytes.
MAX_MESSAGE_BYTES = 512
#: Longest Trial ``status.message`` (the CRD's maxLength), in UTF-8 bytes; cut with :func:`truncate_message`.
MAX_TRIAL_MESSAGE_BYTES = 4096
#: Longest ``bestTrial.config`` kept in the Experiment status, as JSON bytes; a larger config is
#: left out (the Trial named by ``bestTrial.name`` has it).
MAX_BEST_CONFIG_BYTES = 4096
#: Longest ``lastResult`` of a Trial, as JSON bytes.
MAX_RESULT_BYTES = 2048
#: Most trials of the Pareto front shown in ``status.paretoFront.trials`` (``count`` says how many it has).
MAX_PARETO_TRIALS = 20
#: Most result keys of a Trial's ``status.metricRange`` (the metric first).
MAX_RANGE_KEYS = 16
#: Result keys a ``metricRange`` leaves out: Ray's auto-filled progress keys, ``done``, and what a compacted result
#: drops (``config``, ``trial_id``, ...).
_UNRANGED = frozenset({*AUTO_RESULT_KEYS, "done", *env.BOOKKEEPING_KEYS})
_REASON = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


def format_time(now: datetime) -> str:
    """Return ``now`` as a Kubernetes ``metav1.Time`` string (RFC 3339, UTC, seconds): ``2024-05-01T12:00:00Z``.

    Raises:
        ValueError: ``now`` is naive (no time zone).
    """
    if now.tzinfo is None:
        raise ValueError("pass an aware datetime (e.g. datetime.now(timezone.utc))")
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """Parse a Kubernetes ``metav1.Time`` string (:func:`format_time`'s form, or any RFC 3339 time).

    Raises:
        ValueError: ``text`` is not such a time.
    """
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def truncate_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """Return ``message`` cut to at most ``limit`` UTF-8 bytes, ending in ``...`` when cut."""
    data = message.encode()
    if len(data) <= limit:
        return message
    return data[: limit - 3].decode(errors="ignore") + "..."


def get_condition(conditions: Iterable[Mapping] | None, type_: str) -> Mapping | None:
    """Return the condition of type ``type_`` in ``conditions``, or None."""
    return next((c for c in conditions or () if c.get("type") == type_), None)


def set_condition(
    conditions: Iterable[Mapping] | None,
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    observed_generation: int | None,
    now: datetime,
) -> list[dict]:
    """Return a new condition list with condition ``type_`` set; the input is not changed.

    ``lastTransitionTime`` becomes ``now`` when the condition is new or its
    status flips, and is kept otherwise (``meta.SetStatusCondition`` of
    apimachinery). Other conditions keep their order; a new one is appended.

    Args:
        conditions: ``status.conditions`` (``metav1.Condition`` dicts) or None.
        type_: condition type, e.g. ``"Running"``.
        status: True/False, or ``"True"``, ``"False"``, ``"Unknown"``.
        reason: CamelCase reason, e.g. ``"GoalReached"``.
        message: human-readable detail; cut to :data:`MAX_MESSAGE_BYTES` bytes.
        observed_generation: the ``metadata.generation`` the condition was computed from.
        now: current time (aware datetime).

    Raises:
        ValueError: ``status`` is not one of the above or ``reason`` is not CamelCase.
    """
    if isinstance(status, bool):
        status = "True" if status else "False"
    if status not in ("True", "False", "Unknown"):
        raise ValueError(f"condition status must be True, False or Unknown, got {status!r}")
    if not _REASON.match(reason):
        raise ValueError(f"condition reason must be CamelCase, got {reason!r}")
    new = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": truncate_message(message),
        "lastTransitionTime": format_time(now),
    }
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    result, found = [], False
    for condition in conditions or ():
        if condition.get("type") != type_:
            result.append(dict(condition))
            continue
        found = True
        if condition.get("status") == status and condition.get("lastTransitionTime"):
            new["lastTransitionTime"] = condition["lastTransitionTime"]
        result.append(new)
    if not found:
        result.append(new)
    return result


def trial_counts(trial_phases: Iterable[str | None]) -> dict[str, int]:
    """Count trials per phase: ``{"total", "pending", "running", "paused", "succeeded", "failed"}``.

    Args:
        trial_phases: each Trial's ``status.phase``; None or ``""`` (no status yet) counts as Pending.

    Raises:
        ValueError: a phase not in :data:`TRIAL_PHASES`.
    """
    counts = dict.fromkeys(("total", "pending", "running", "paused", "succeeded", "failed"), 0)
    for phase in trial_phases:
        phase = phase or "Pending"
        if phase not in TRIAL_PHASES:
            raise ValueError(f"unknown trial phase {phase!r}")
        counts[phase.lower()] += 1
        counts["total"] += 1
    return counts


def metric_value(result: Mapping | None, metric: str) -> float | None:
    """Return ``result[metric]`` as a float, or None when absent, not a number, NaN or infinite.

    A metric ``a/b`` also finds ``result["a"]["b"]`` (Ray flattens nested results with ``/``).
    Booleans are not numbers here.
    """
    return finite_number(lookup(result, metric))


def trial_metric_value(trial: Mapping, metric: str, mode: str | None = None, scope: str = "last") -> float | None:
    """The metric value of a Trial object: ``status.metricValue``, else from ``status.lastResult``; with ``scope``
    ``all``, its best value at any iteration by ``mode`` (``status.metricRange``), else the last one (a Trial that has
    no range yet)."""
    status = trial.get("status") or {}
    if scope == "all":
        bounds = (status.get("metricRange") or {}).get(metric) or {}
        value = finite_number(bounds.get("max" if mode == "max" else "min"))
        if value is not None:
            return value
    value = finite_number(status.get("metricValue"))
    return value if value is not None else metric_value(status.get("lastResult"), metric)


def widen_range(ranges: Mapping[str, Mapping[str, float]] | None, results: Iterable[Mapping], metric: str) -> dict:
    """A Trial's ``status.metricRange`` after ``results``: each key's least and greatest value over every result.

    Keys are each result's finite numbers (nested keys flattened with ``/``, bools left out), Ray's auto-filled
    keys, ``done`` and the keys a compacted result drops (:data:`kubetune.env.BOOKKEEPING_KEYS`) left out,
    ``metric`` first, at most :data:`MAX_RANGE_KEYS`: a key first seen once that many are ranged is not. Taking a
    result again changes nothing (a re-sent batch, a journal replayed over a restored status), so the order results
    come in does not matter. Katib's ``observation`` (each metric's ``min``, ``max``, ``latest``) and
    ``spec.bestTrialScope: all`` (Ray's ``get_best_trial(scope="all")``) read it.

    Args:
        ranges: the range so far (``{key: {"min", "max"}}``), or None.
        results: the results to take.
        metric: the experiment's metric.

    Returns:
        A new ``{key: {"min": float, "max": float}}``; ``ranges`` is left as it was.
    """
    out = {key: dict(bounds) for key, bounds in (ranges or {}).items()}
    for result in results:
        if metric not in out:  # the metric first, wherever it is in the result
            found = lookup(result, metric)
            value = None if isinstance(found, bool) else finite_number(found)
            if value is not None:
                _widen(out, metric, value, value)
        _take_numbers(out, result, "")
    return out


def _widen(out: dict, key: str, low: float, high: float) -> None:
    """Widen ``out[key]`` to take ``low`` and ``high`` in; a new key only while ``out`` has fewer than
    :data:`MAX_RANGE_KEYS`."""
    bounds = out.get(key)
    if bounds is None:
        if len(out) < MAX_RANGE_KEYS:
            out[key] = {"min": low, "max": high}
        return
    if low < bounds["min"]:
        bounds["min"] = low
    if high > bounds["max"]:
        bounds["max"] = high


def _take_numbers(out: dict, result: Mapping, prefix: str) -> None:
    """Widen ``out`` (:func:`widen_range`) with the numbers of ``result``, its keys under ``prefix``."""
    for key, item in result.items():
        kind = type(item)
        if kind is float or kind is int:  # bools are not numbers here (type, not isinstance)
            name = f"{prefix}{key}" if prefix else key
            # ints are within 64 bits (kubetune_operator.podinput checks every result at the collector)
            if (prefix or name not in _UNRANGED) and math.isfinite(item):
                _widen(out, name, float(item), float(item))
        elif isinstance(item, Mapping) and (prefix or key not in _UNRANGED):
            _take_numbers(out, item, f"{prefix}{key}/")


def merge_ranges(a: Mapping[str, Mapping[str, float]] | None, b: Mapping[str, Mapping[str, float]] | None) -> dict:
    """The ``metricRange`` of the results of two ranges together (:func:`widen_range`): a restored Trial status's
    and a journal snapshot's. ``a``'s keys first, then ``b``'s, at most :data:`MAX_RANGE_KEYS`."""
    out = {key: dict(bounds) for key, bounds in (a or {}).items()}
    for key, bounds in (b or {}).items():
        _widen(out, key, bounds["min"], bounds["max"])
    return out


def best_trial(trials: Iterable[Mapping], metric: str, mode: str, scope: str = "last") -> dict | None:
    """Return ``status.bestTrial`` for ``trials``: the one whose last reported ``metric`` is best, or with ``scope``
    ``all`` its best value at any iteration (``spec.bestTrialScope``).

    Like Ray's ``ExperimentAnalysis.get_best_trial(metric, mode, scope)`` for ``"last"`` and ``"all"``:
    every trial with a finite metric value takes part, whatever its phase. Ties
    go to the lowest ``spec.index`` (the earliest trial, as Ray keeps the first
    of equal trials in creation order), then the name.

    Args:
        trials: Trial objects (dicts with ``metadata``, ``spec``, ``status``).
        metric: the experiment's ``spec.metric``.
        mode: ``"max"`` or ``"min"``.
        scope: ``"last"`` or ``"all"`` (:func:`trial_metric_value`).

    Returns:
        ``{"name", "metricValue", "iteration"?, "checkpoint"?, "config"?}``, or None when no
        trial has reported the metric. ``config`` is left out above :data:`MAX_BEST_CONFIG_BYTES`.

    Raises:
        ValueError: ``mode`` is not ``"max"`` or ``"min"``.
    """
    sign = mode_sign(mode)
    best, best_key = None, None
    for trial in trials:
        value = trial_metric_value(trial, metric, mode, scope)
        if value is None:
            continue
        key = (-sign * value, (trial.get("spec") or {}).get("index", math.inf), trial["metadata"]["name"])
        if best_key is None or key < best_key:
            best, best_key = trial, key
    if best is None:
        return None
    status = best.get("status") or {}
    out = {"name": best["metadata"]["name"], "metricValue": -sign * best_key[0]}
    if status.get("iteration") is not None:
        out["iteration"] = status["iteration"]
    if (status.get("checkpoint") or {}).get("uri"):
        out["checkpoint"] = status["checkpoint"]["uri"]
    config = (best.get("spec") or {}).get("config")
    if config is not None and _json_size(config) <= MAX_BEST_CONFIG_BYTES:
        out["config"] = config
    return out


def objective_values(trial: Mapping, metrics: Sequence[str]) -> list[float] | None:
    """A completed (Succeeded) Trial's last reported value of each of ``metrics``, or None when the trial is
    not Succeeded or a value is missing, not a number, NaN or infinite."""
    status = trial.get("status") or {}
    if status.get("phase") != "Succeeded":
        return None
    values = [metric_value(status.get("lastResult"), m) for m in metrics]
    return None if None in values else values


def pareto_front(trials: Iterable[Mapping], metrics: Sequence[str], modes: Sequence[str]) -> list[dict]:
    """The non-dominated completed trials of a multi-objective experiment, as Optuna's ``Study.best_trials``
    chooses them (Deb et al., NSGA-II, IEEE TEVC 2002: no other trial is at least as good in every objective
    and better in one), over what the status knows: each Succeeded Trial's last reported values
    (:func:`kubetune.resultkeys.non_dominated`).

    Trials with equal values dominate neither each other, so all of them are on the front. A trial whose
    value of some objective is missing, NaN or infinite takes no part (Kubernetes' JSON cannot hold
    NaN or infinities).

    Args:
        trials: Trial objects (dicts with ``metadata``, ``spec``, ``status``).
        metrics, modes: the experiment's objectives (``spec.metric``, ``spec.mode`` as lists).

    Returns:
        ``[{"trial": name, "values": [one per metric]}, ...]`` in trial index order (then name).

    Raises:
        ValueError: a mode is not ``"max"`` or ``"min"``.
    """
    points = []
    for trial in trials:
        values = objective_values(trial, metrics)
        if values is not None:
            key = ((trial.get("spec") or {}).get("index", math.inf), trial["metadata"]["name"])
            points.append((key, values))
    points.sort(key=lambda p: p[0])
    by_key = dict(points)
    return [{"trial": key[1], "values": by_key[key]} for key in non_dominated(points, modes)]


def pareto_status(front: Sequence[Mapping]) -> dict | None:
    """``status.paretoFront`` for a :func:`pareto_front`: ``{"count", "trials"}`` with its first
    :data:`MAX_PARETO_TRIALS` trials (by index); None when the front is empty."""
    if not front:
        return None
    return {"count": len(front), "trials": [dict(item) for item in front[:MAX_PARETO_TRIALS]]}


def parse_duration(text: str) -> float:
    """Return the seconds of a ``spec.timeBudget``: numbers with units h, m, s, e.g. ``1h30m``, ``1.5h``, ``90s``.

    Raises:
        ValueError: ``text`` is not such a duration.
    """
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration like 1h30m or 90s: {text!r}")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


@dataclass(frozen=True)
class PhaseDecision:
    """What :func:`experiment_phase` decided.

    Attributes:
        phase: one of :data:`EXPERIMENT_PHASES`.
        reason: CamelCase reason for the conditions.
        message: human-readable detail.
        stop_remaining: the experiment is ending: create no trials and stop every non-terminal one.
    """

    phase: str
    reason: str
    message: str
    stop_remaining: bool = False


def experiment_phase(
    counts: Mapping[str, int],
    *,
    suspended: bool = False,
    search_finished: bool = False,
    goal_reached: bool = False,
    time_budget_exhausted: bool = False,
    max_failed_trials: int | None = None,
    stoppers_stop_all: bool = False,
    metric_missing: str | None = None,
    exploring: str | None = None,
    driver_failure: str | None = None,
    driver_pending: bool = False,
    driver_waiting: str | None = None,
    driver_asked: str | None = None,
) -> PhaseDecision:
    """Decide an Experiment's phase from its trial counts and the end criteria.

    The experiment ends (docs/architecture.md, "When an Experiment ends") when a result lacked the metric
    (Failed, as Ray's run raises at such a result), when ``goal`` is reached, when
    ``timeBudget`` ran out, when more than ``maxFailedTrials`` trials failed, when a stopper says so,
    or when the searcher is finished, every trial is terminal and no PB2 explore step is open (Ray takes each step
    at its trial's result, before the run can end; kubetune's may outlive a trial that did not hear its pause). It keeps
    phase Running with ``stop_remaining`` until its last Pending, Running or
    Paused trial has stopped, then turns Succeeded (Failed when trials failed
    beyond ``maxFailedTrials``, or every trial failed). Succeeded and Failed
    are final: the caller stops reconciling the experiment. Otherwise it is
    Suspended while ``spec.suspend`` is true, Pending until some trial has left
    Pending, and Running after. With a driver pod (``spec.driver``), its failure ends the experiment (Failed, as
    Ray's run raises when a callback does), and an end stays Running until the pod has called
    ``on_experiment_end`` (Ray's run returns after it).

    Args:
        counts: :func:`trial_counts` of the experiment's trials.
        suspended: ``spec.suspend``.
        search_finished: the searcher will suggest no more configs.
        goal_reached: :func:`kubetune.resultkeys.goal_reached` of the best trial's value.
        time_budget_exhausted: ``timeBudget`` has passed since ``status.startTime``.
        max_failed_trials: ``spec.failure.maxFailedTrials`` (None: no limit).
        stoppers_stop_all: a stopper of ``spec.stoppers`` says the whole experiment should stop.
        metric_missing: why a trial's result did not count (it lacked the experiment's metric), or None.
        exploring: the trial whose PB2 explore step is being computed, or None.
        driver_failure: why the driver pod failed for good (``kubetune_operator.driver.DriverPods``), or None.
        driver_pending: the Experiment has a driver pod that has not exited 0 yet.
        driver_waiting: why that pod cannot start (``ImagePullBackOff: ...``), or None.
        driver_asked: the trial whose config the driver pod's searcher has not suggested yet, or None.
    """
    active = counts["pending"] + counts["running"] + counts["paused"]
    failed = counts["failed"]
    end = None
    if metric_missing:
        end = ("Failed", "MetricMissing", metric_missing)
    elif driver_failure:
        end = ("Failed", "DriverFailed", driver_failure)
    elif goal_reached:
        end = ("Succeeded", "GoalReached", "the best trial reached spec.goal")
    elif max_failed_trials is not None and failed > max_failed_trials:
        end = (
            "Failed",
            "MaxFailedTrialsExceeded",
            f"{failed} trials failed, more than maxFailedTrials={max_failed_trials}",
        )
    elif time_budget_exhausted:
        end = ("Succeeded", "TimeBudgetExhausted", "spec.timeBudget has passed")
    elif stoppers_stop_all:
        end = ("Succeeded", "StopperStoppedAll", "a stopper of spec.stoppers stopped the experiment")
    elif search_finished and active == 0 and exploring:
        return PhaseDecision(
            "Running", "Exploring", f"every trial ended; waiting for PB2's explore step of {exploring} to be journaled"
        )
    elif search_finished and active == 0:
        if failed and not counts["succeeded"]:
            end = ("Failed", "AllTrialsFailed", f"all {failed} trials failed")
        else:
            end = (
                "Succeeded",
                "AllTrialsCompleted",
                f"all {counts['total']} trials finished: {counts['succeeded']} succeeded, {failed} failed",
            )
    if end is not None:
        phase, reason, message = end
        if active:
            return PhaseDecision("Running", reason, f"{message}; stopping {active} trials", True)
        if driver_pending and not driver_failure:
            waiting = f" (it cannot start: {driver_waiting})" if driver_waiting else ""
            return PhaseDecision(
                "Running", reason, f"{message}; waiting for the driver pod's on_experiment_end{waiting}", True
            )
        return PhaseDecision(phase, reason, message, True)
    summary = (
        f"{counts['running']} running, {counts['pending']} pending, {counts['paused']} paused, "
        f"{counts['succeeded']} succeeded, {failed} failed"
    )
    if driver_asked and not suspended:
        waiting = f" (it cannot start: {driver_waiting})" if driver_waiting else ""
        summary += f"; waiting for the driver pod's searcher to suggest the config of {driver_asked}{waiting}"
    if suspended:
        return PhaseDecision("Suspended", "ExperimentSuspended", f"spec.suspend is true; {summary}")
    if counts["total"] == counts["pending"]:
        return PhaseDecision("Pending", "TrialsPending", summary)
    return PhaseDecision("Running", "TrialsRunning", summary)


def experiment_conditions(
    conditions: Iterable[Mapping] | None, decision: PhaseDecision, observed_generation: int | None, now: datetime
) -> list[dict]:
    """Return ``conditions`` with Running, Suspended, Complete and Failed set from ``decision``.

    Running and Suspended are always present (True or False, the decision's reason
    explaining either); Complete and Failed are added once true, like a Job's.
    ``Ready`` is left as it is.
    """
    result = set_condition(
        conditions, "Running", decision.phase == "Running", decision.reason, decision.message, observed_generation, now
    )
    suspended = decision.phase == "Suspended"
    result = set_condition(
        result,
        "Suspended",
        suspended,
        decision.reason if suspended else "NotSuspended",
        decision.message if suspended else "",
        observed_generation,
        now,
    )
    for type_, phase in (("Complete", "Succeeded"), ("Failed", "Failed")):
        if decision.phase == phase:
            result = set_condition(result, type_, True, decision.reason, decision.message, observed_generation, now)
    return result


def kstatus_conditions(
    conditions: Iterable[Mapping] | None, phase: str, observed_generation: int | None, now: datetime
) -> list[dict]:
    """Return ``conditions`` with the two that kstatus reads (``sigs.k8s.io/cli-utils/pkg/kstatus``, which
    Flux, kpt and cli-utils' appliers wait on), set from the others and ``phase``.

    ``Stalled`` is True while the latest spec is refused (``Ready=False``, its reason: ``InvalidSpec``...) or
    the Experiment Failed (the ``Failed`` condition's reason): kstatus' Failed. Otherwise ``Reconciling`` is
    True while it is Pending or Running, with the ``Running`` condition's reason: kstatus' InProgress, as a
    Job's until it completes. Both False otherwise (Succeeded, Suspended): kstatus' Current. kstatus also
    compares ``status.observedGeneration`` with ``metadata.generation`` (InProgress while they differ).
    """
    ready, failed = get_condition(conditions, "Ready"), get_condition(conditions, "Failed")
    if ready is not None and ready.get("status") == "False":
        stalled = ready
    elif phase == "Failed" and failed is not None:
        stalled = failed
    else:
        stalled = None
    gen = observed_generation
    if stalled is not None:
        result = set_condition(conditions, "Stalled", True, stalled["reason"], stalled.get("message") or "", gen, now)
    else:
        result = set_condition(conditions, "Stalled", False, "NotStalled", "", gen, now)
    running = get_condition(result, "Running")
    if stalled is None and phase in ("Pending", "Running"):
        reason = running["reason"] if running else f"Experiment{phase}"
        message = (running or {}).get("message") or phase
        return set_condition(result, "Reconciling", True, reason, message, gen, now)
    reason = "Stalled" if stalled is not None else f"Experiment{phase}"
    return set_condition(result, "Reconciling", False, reason, "", gen, now)


def experiment_status(
    *,
    phase: str,
    conditions: list,
    observed_generation: int | None,
    counts: Mapping[str, int],
    best: Mapping | None = None,
    pareto: Mapping | None = None,
    start_time: str | None = None,
    completion_time: str | None = None,
) -> dict:
    """Assemble an Experiment's ``status``; None fields are left out.

    Every part is bounded (conditions: the :data:`CONDITION_TYPES` with
    :data:`MAX_MESSAGE_BYTES` messages; ``bestTrial`` from :func:`best_trial`;
    ``paretoFront`` from :func:`pareto_status`, at most :data:`MAX_PARETO_TRIALS` trials), so
    the status stays under 16 KiB however many trials the experiment has. The
    searcher's and scheduler's state is not here but in the Experiment's journal
    (:mod:`kubetune_operator.journal`).

    Raises:
        ValueError: ``phase`` is unknown.
    """
    if phase not in EXPERIMENT_PHASES:
        raise ValueError(f"unknown experiment phase {phase!r}")
    status = {
        "phase": phase,
        "conditions": conditions,
        "observedGeneration": observed_generation,
        "trials": dict(counts),
        "bestTrial": dict(best) if best else None,
        "paretoFront": dict(pareto) if pareto else None,
        "startTime": start_time,
        "completionTime": completion_time,
    }
    return {k: v for k, v in status.items() if v is not None}


def compact_result(result: Mapping, metric: str | Sequence[str] | None = None) -> dict:
    """Return the part of a training result kept in a Trial's ``status.lastResult``: at most
    :data:`MAX_RESULT_BYTES` of JSON, the metric (each objective's) first (see
    :func:`kubetune.env.compact_result`)."""
    return env.compact_result(result, metric, MAX_RESULT_BYTES)


def status_patch(old: Mapping | None, new: Mapping | None) -> dict | None:
    """Return the JSON merge patch (RFC 7386) that turns status ``old`` into ``new``, or None if equal.

    ``new`` is the complete desired status: keys missing from it (or None) are
    deleted (None in the patch). Nested dicts are patched key by key; lists and
    other values are replaced whole. Apply it as ``{"status": patch}`` to the
    status subresource (kopf's ``patch.status.update(patch)``).
    """
    patch = _merge_diff(old or {}, new or {})
    return patch or None


def _merge_diff(old: Mapping, new: Mapping) -> dict:
    patch: dict[str, Any] = {}
    for key, value in old.items():
        if value is not None and new.get(key) is None:
            patch[key] = None
    for key, value in new.items():
        if value is None:
            continue
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = _merge_diff(before, value)
            if sub:
                patch[key] = sub
        elif isinstance(value, Mapping):
            patch[key] = _without_none(value)
        elif before != value or isinstance(before, bool) != isinstance(value, bool):
            patch[key] = value
    return patch


def _without_none(value: Mapping) -> dict:
    return {k: _without_none(v) if isinstance(v, Mapping) else v for k, v in value.items() if v is not None}


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())
