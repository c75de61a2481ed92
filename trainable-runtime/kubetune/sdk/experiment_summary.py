"""An Experiment in a few words, as ``kubectl get experiments`` shows it: phase, trials by phase, best value, age.

Owns reading those out of an Experiment as the Kubernetes API returns it (a dict): its ``status.phase``,
``status.trials`` counts, ``status.bestTrial`` and ``metadata.creationTimestamp`` (and the API's times,
:func:`parse_time`). Reads nothing from the cluster
and imports nothing beyond the standard library. Callers: the ``kubetune get`` command (:mod:`kubetune.sdk.cli`,
the AGE column) and the dashboard's experiment list (:mod:`kubetune.sdk.experiment_studies`, each study's
attributes and note).
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping

__all__ = ["TRIAL_PHASES", "age", "parse_time", "summary", "trials_by_phase"]

#: The keys of ``status.trials`` that count trials by phase, in the order a trial goes through them.
TRIAL_PHASES = ("pending", "running", "paused", "succeeded", "failed")


def parse_time(timestamp: str) -> datetime.datetime:
    """An RFC 3339 time as the API writes it (``2026-01-02T03:04:05Z``), timezone-aware.

    Raises:
        ValueError: ``timestamp`` is not an ISO 8601 time.
    """
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def age(timestamp: str | None, now: datetime.datetime | None = None) -> str:
    """How long ago ``timestamp`` was, as kubectl's AGE column writes it, in its largest whole unit.

    Args:
        timestamp: an RFC 3339 time as the API writes it (``2026-01-02T03:04:05Z``), or None.
        now: the time to count to (timezone-aware); default the current time.

    Returns:
        ``"45s"``, ``"12m"``, ``"3h"``, ``"2d"``; ``"-"`` without a timestamp.

    Raises:
        ValueError: ``timestamp`` is not an ISO 8601 time.
    """
    if not timestamp:
        return "-"
    created = parse_time(timestamp)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def trials_by_phase(status: Mapping[str, Any]) -> str:
    """The trials of an Experiment's ``status`` counted by phase, e.g. ``"2 running, 5 succeeded, 1 failed"``.

    Returns:
        The phases of :data:`TRIAL_PHASES` with at least one trial, in that order; ``"none"`` before any trial.
    """
    counts = status.get("trials") or {}
    return ", ".join(f"{counts[phase]} {phase}" for phase in TRIAL_PHASES if counts.get(phase)) or "none"


def summary(experiment: Mapping[str, Any], now: datetime.datetime | None = None) -> dict[str, Any]:
    """The few words of ``experiment`` (module docstring).

    Args:
        experiment: the Experiment as the API returns it.
        now: the time its age is counted to; default the current time.

    Returns:
        ``{"phase": str, "trials": str, "age": str, "best_value": float, "best_trial": str}``: the phase
        (``Pending`` before the operator wrote one), :func:`trials_by_phase`, :func:`age`; the best trial's
        value of ``spec.metric`` and its name only once there is one.
    """
    status = experiment.get("status") or {}
    out: dict[str, Any] = {
        "phase": status.get("phase") or "Pending",
        "trials": trials_by_phase(status),
        "age": age(experiment["metadata"].get("creationTimestamp"), now),
    }
    best = status.get("bestTrial") or {}
    if best.get("metricValue") is not None:
        out["best_value"] = best["metricValue"]
        out["best_trial"] = best.get("name")
    return out
