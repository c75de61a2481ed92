"""What one reconcile pass wants done: :class:`Plan`, which the controller's pure pass returns and the daemon
carries out.

Owns :class:`Plan` (the Trials, pods, gangs and token Secrets to create, the pods to delete, the statuses to write,
the events to post and the ended attempts' objects to collect), :func:`created_event` and :func:`now_iso`. Made by
:meth:`kubetune_operator.controller.ExperimentController.plan` and the objects it is made of; carried out by
``kube.py`` (``Kube.execute``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from . import status as st
from .gang import Gang


@dataclass
class Plan:
    """What one reconcile pass wants done; the daemon carries it out (409 on create is success).

    Attributes:
        create_trials: Trial manifests.
        create_pods: Pod manifests.
        token_secrets: ``{pod name: manifest}`` of each new pod's token Secret, created before the pod.
        delete_pods: ``(pod name, grace seconds)`` to delete gracefully.
        trial_status: ``{trial name: status merge patch}`` for trials whose status should be written now.
        events: ``(trial name or None for the Experiment, type, reason, message)``.
        experiment_status: the Experiment's status merge patch, or None if nothing need be written now.
        collect_pods: ``(pod name, trial name)`` of ended pods that ``spec.podRetentionPolicy`` deletes;
            deleted only after the trial's status in this plan is written.
        collect_secrets: ``(Secret name, trial name)`` of the token Secrets of ended attempts, deleted as
            ``collect_pods``.
        end_event: ``(type, reason, message)`` of the event announcing the Experiment's end, when
            ``experiment_status`` makes it Succeeded or Failed: posted once (under a name of its own) before
            that status is written, which ends the daemon.
        gangs: ``{head pod name: Gang}`` of the pods in ``create_pods`` that head a gang: its Service,
            PodGroup and workers are created after the token Secret and before the head.
        collect_gangs: ``(gang name, trial name)`` of ended attempts whose Service and PodGroup go, as
            ``collect_secrets``.
    """

    create_trials: list[dict] = field(default_factory=list)
    create_pods: list[dict] = field(default_factory=list)
    delete_pods: list[tuple[str, int]] = field(default_factory=list)
    trial_status: dict[str, dict] = field(default_factory=dict)
    events: list[tuple[str | None, str, str, str]] = field(default_factory=list)
    experiment_status: dict | None = None
    collect_pods: list[tuple[str, str]] = field(default_factory=list)
    token_secrets: dict[str, dict] = field(default_factory=dict)
    collect_secrets: list[tuple[str, str]] = field(default_factory=list)
    end_event: tuple[str, str, str] | None = None
    gangs: dict[str, Gang] = field(default_factory=dict)
    collect_gangs: list[tuple[str, str]] = field(default_factory=list)


def created_event(names: list[str]) -> tuple[None, str, str, str]:
    """The Experiment's ``TrialsCreated`` event for the Trials ``names`` (in creation order) of one pass."""
    span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
    return (None, "Normal", "TrialsCreated", f"created {len(names)} trial{'s' * (len(names) > 1)}: {span}")


def now_iso(now: float) -> str:
    """``now`` (seconds since the epoch) as the API's RFC 3339 time."""
    return st.format_time(datetime.fromtimestamp(now, timezone.utc))
