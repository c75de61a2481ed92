"""What the operator sees of a trial pod: :class:`PodView`, made by :func:`pod_view` from a pod body, and the
pod-side constants that go with it.

Owns the summary of one pod (its phase, why it waits or ended, its gang rank), the gang summary on a folded
view (:class:`GangView`, made by :func:`kubetune_operator.gang.fold`), the waiting causes a user must act on
(:data:`WAITING_CAUSES`) and the order of the runtime's decisions (:data:`DECISION_RANK`). Called by the pod
watch (``podwatch.py``, a view per pod event), the gang fold (``gang.py``), the collector (``collector.py``,
the strongest decision of a batch) and the controller's pass. Pure: it imports only the label names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from .labels import (
    LABEL_ATTEMPT,
    LABEL_RANK,
    LABEL_TRIAL,
    LABEL_WORLD_SIZE,
    METRICS_SIDECAR,
    RESTORE_CONTAINER,
    TRIAL_CONTAINER,
)

#: Why a pod cannot start that a user must act on: the scheduler's verdict, and container waiting reasons.
WAITING_CAUSES = (
    "Unschedulable",
    "SchedulingGated",
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
)
#: The runtime's decisions, weakest first: a batch's decision is the strongest of its results'.
DECISION_RANK = {"continue": 0, "checkpoint": 1, "pause": 2, "stop": 3}


@dataclass(frozen=True)
class GangView:
    """An attempt's members, on its folded :class:`PodView` (``PodView.gang``).

    Attributes:
        total: the gang's size.
        ready: members whose Ready condition is True.
        scheduled: members bound to a node.
        active: names of members still Pending or Running and not being deleted: what ending the attempt deletes.
        scheduled_at: when its first member was bound to a node (RFC 3339), or None while none is.
    """

    total: int
    ready: int
    scheduled: int
    active: tuple[str, ...]
    scheduled_at: str | None


@dataclass
class PodView:
    """What the operator needs of one trial pod (:class:`kubetune_operator.podwatch.PodWatch` keeps these)."""

    name: str
    trial: str
    attempt: int
    phase: str
    deleting: bool = False
    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None
    owner_uid: str | None = None
    disruption: str | None = None  # why Kubernetes ended the pod (eviction, preemption, a drain), if it did
    waiting: tuple[str, str] | None = None  # (reason, message) why a Pending pod cannot start, if a user must act
    gone: bool = False  # deleted: its last state as the watch's DELETED event carried it (PodWatch.TOMBSTONE_S)
    rank: int | None = None  # its rank in its trial's gang (0: the head); None for a one-pod trial's pod
    world_size: int = 1  # pods in its gang
    ready: bool = False  # its Ready condition is True
    scheduled: bool = False  # bound to a node
    scheduled_at: str | None = None  # when it was bound to a node: its PodScheduled condition's time (RFC 3339)
    finished_at: str | None = None  # the trial container's terminated.finishedAt (RFC 3339)
    gang: GangView | None = None  # a gang's members, on the head's view as gang.fold makes it
    lingering: bool = False  # the trial container ended but other containers of the pod still run (it is deleted)
    restored_iteration: int | None = None  # a container trial's checkpoint folder was restored at it (0: nothing)
    restore_failed: bool = False  # that restore failed: the trial's container never ran, and printed nothing
    sidecar_exit: int | None = None  # a container trial's metrics sidecar ended with it (0: its last batch was taken)


def _ran(status: dict) -> bool:
    """Whether a container of the pod had started (a terminated or running state with its start time)."""
    for cs in status.get("containerStatuses") or ():
        state = cs.get("state") or {}
        if (state.get("terminated") or state.get("running") or {}).get("startedAt"):
            return True
    return False


def pod_view(pod: Mapping) -> PodView:
    """Summarise a pod body (dict) as a :class:`PodView`."""
    meta, status = pod["metadata"], pod.get("status") or {}
    view = PodView(
        name=meta["name"],
        trial=meta["labels"][LABEL_TRIAL],
        attempt=int(meta["labels"][LABEL_ATTEMPT]),
        phase=status.get("phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        reason=status.get("reason"),
        message=status.get("message"),
        owner_uid=next((ref.get("uid") for ref in meta.get("ownerReferences") or ()), None),
    )
    if LABEL_RANK in meta["labels"]:
        view.rank, view.world_size = int(meta["labels"][LABEL_RANK]), int(meta["labels"].get(LABEL_WORLD_SIZE, 1))
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    view.ready = (conditions.get("Ready") or {}).get("status") == "True"
    bound = conditions.get("PodScheduled") or {}
    view.scheduled = bound.get("status") == "True"
    view.scheduled_at = bound.get("lastTransitionTime") if view.scheduled else None
    target = next(
        (
            c
            for c in status.get("conditions") or ()
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )
    if target is not None:  # KEP-3329: set by eviction, preemption, taint manager and kubelet shutdown
        view.disruption = target.get("reason") or "DisruptionTarget"
    elif status.get("reason") in ("Evicted", "Preempting", "Shutdown", "Terminated", "NodeShutdown"):
        view.disruption = status["reason"]
    elif status.get("reason") == "UnexpectedAdmissionError" and _ran(status):
        # a running pod the kubelet admitted again after its restart and refused (its device plugin had not
        # registered again yet: "no healthy devices"): the node ended it, as an eviction would. A pod refused
        # at its first admission never ran, and fails as it is (a node that keeps refusing would loop).
        view.disruption = status["reason"]
    scheduled = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        view.waiting = ("Unschedulable", scheduled.get("message") or "no node fits the pod")
    gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or ()]
    if gates and view.phase == "Pending":  # the scheduler sets no condition until it sees the pod
        view.waiting = ("SchedulingGated", f"waiting for admission: held by scheduling gates {', '.join(gates)}")
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if cs.get("name") == TRIAL_CONTAINER and waiting.get("reason") in WAITING_CAUSES:
            view.waiting = (waiting["reason"], waiting.get("message") or waiting["reason"])
        term = (cs.get("state") or {}).get("terminated")
        if cs.get("name") == TRIAL_CONTAINER and term:
            view.exit_code, view.message = term.get("exitCode"), term.get("message") or view.message
            view.finished_at = term.get("finishedAt")
            view.reason = term.get("reason") if term.get("reason") not in (None, "Completed", "Error") else view.reason
    for cs in status.get("initContainerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if cs.get("name") == METRICS_SIDECAR and term:  # kubetune.runtime.sidecar exits 0 once its "done" was taken
            view.sidecar_exit = term.get("exitCode")
        if cs.get("name") != RESTORE_CONTAINER or not term:
            continue
        if term.get("exitCode") == 0:  # its message: {"uri", "iteration"} (kubetune.runtime.checkpoint_folder)
            try:
                view.restored_iteration = int(json.loads(term.get("message") or "{}").get("iteration") or 0)
            except (ValueError, TypeError, AttributeError):
                view.restored_iteration = 0
        elif view.exit_code is None:  # the trial's container never started: the restore's reason is the attempt's
            view.exit_code, view.message = term.get("exitCode"), term.get("message") or "the checkpoint restore failed"
            view.finished_at, view.restore_failed = term.get("finishedAt"), True
    others_alive = any(
        cs.get("name") != TRIAL_CONTAINER and not (cs.get("state") or {}).get("terminated")
        for cs in status.get("containerStatuses") or []
    )
    if view.exit_code is not None and others_alive and view.phase in ("Pending", "Running"):
        # another container (template.containers: a mesh proxy) holds the pod: the attempt ended all the same. A pod
        # whose containers all ended but whose phase the kubelet has not written yet still holds its resources.
        view.phase, view.lingering = "Succeeded" if view.exit_code == 0 else "Failed", True
    return view
