"""Gangs: a trial whose attempts are several pods (``spec.resourcesPerTrial.workers``).

Owns what makes a trial's pod a gang: the names of its members and of its headless Service and
PodGroup, the manifests of both and of the worker pods (:func:`build_gang`, from the head's manifest that
:func:`kubetune_operator.builders.build_pod` makes), the rendezvous variables, and :func:`fold`, which
sees an attempt's pods as one :class:`kubetune_operator.podview.PodView` so that the controller's
lifecycle (``lifecycle.py``) decides for the gang as it does for one pod. Called by the controller's
pass (``controller.py``) and, for the objects' API calls, by ``kube.py``.

An attempt is all or nothing: it runs when every member runs; it fails when any member fails; a member
evicted, preempted or deleted disrupts it; the head's outcome (rank 0, the pod that reports and checkpoints)
is the attempt's (a container trial's: the head's output is read, each member restores the checkpoint folder, the
head's sidecar saves it). The rendezvous follows ``torchrun`` and Kubeflow's PyTorchJob (``MASTER_ADDR``,
``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK``; one process per pod) and
``jax.distributed.initialize`` (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``).
Each member's DNS name is ``rank-<r>.<service>.<namespace>.svc``: the pod's ``hostname`` and ``subdomain``
under a headless Service, as Kubernetes' DNS for Pods resolves them.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Mapping

from kubetune.env import HOSTS, RANK, WORLD_SIZE

from .builders import LABEL_KUEUE_QUEUE, pod_resources
from .container_trials import METRICS_SIDECAR
from .labels import (
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_RANK,
    LABEL_TRIAL,
    LABEL_WORLD_SIZE,
    MAX_LABEL_LENGTH,
    _bounded,
)
from .podview import GangView, PodView

#: Port of the head's ``MASTER_ADDR`` (``torchrun``'s default).
MASTER_PORT = 29500
#: Port of the head's JAX coordinator.
JAX_COORDINATOR_PORT = 29501
#: API group and version of the scheduler's PodGroup (KEP-4671, alpha in Kubernetes 1.36).
PODGROUP_API = ("scheduling.k8s.io", "v1alpha2", "podgroups")
#: Kueue's pod-group label and total-count annotation (pods of one group are admitted together).
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
#: Kueue's annotation that a group's failed pods are not replaced within the group: its Workload then
#: ends (and gives back its quota) once no member runs, instead of waiting for every member to succeed.
#: Each attempt is a group of its own; the operator retries with a new attempt.
KUEUE_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"


def world_size(spec: Mapping) -> int:
    """Pods per attempt of a trial of the Experiment ``spec``: 1 + ``resourcesPerTrial.workers.replicas``."""
    return 1 + int((((spec.get("resourcesPerTrial") or {}).get("workers") or {}).get("replicas") or 0))


def gang_name(head: str) -> str:
    """The name of the headless Service and PodGroup of the attempt whose head pod is ``head``: ``g-<head>``
    (a DNS-1035 label: it starts with a letter), cut and hashed past 63 characters."""
    return _bounded(f"g-{head}", "", MAX_LABEL_LENGTH)


def member_name(head: str, rank: int) -> str:
    """The pod name of ``rank`` of the attempt whose head pod is ``head``: ``head`` itself for rank 0, else
    ``<head>-w<rank>`` (cut and hashed past 63 characters)."""
    return head if rank == 0 else _bounded(head, f"-w{rank}", MAX_LABEL_LENGTH)


def hosts(head: str, namespace: str, size: int) -> list[str]:
    """Each rank's DNS name, index = rank."""
    return [f"rank-{r}.{gang_name(head)}.{namespace}.svc" for r in range(size)]


def rendezvous_env(head: str, namespace: str, rank: int, size: int) -> list[dict]:
    """The variables of ``rank``'s container (``kubetune.env``'s rank and hosts, and the launchers')."""
    names = hosts(head, namespace, size)
    values = {
        RANK: rank,
        WORLD_SIZE: size,
        HOSTS: ",".join(names),
        "MASTER_ADDR": names[0],
        "MASTER_PORT": MASTER_PORT,
        "WORLD_SIZE": size,
        "RANK": rank,
        "NODE_RANK": rank,
        "LOCAL_RANK": 0,
        "LOCAL_WORLD_SIZE": 1,
        "JAX_COORDINATOR_ADDRESS": f"{names[0]}:{JAX_COORDINATOR_PORT}",
        "JAX_NUM_PROCESSES": size,
        "JAX_PROCESS_ID": rank,
    }
    return [{"name": k, "value": str(v)} for k, v in values.items()]


@dataclasses.dataclass
class Gang:
    """What an attempt of a gang needs besides its head pod, created before the head (``kube.py``)."""

    service: dict
    workers: list[dict]
    podgroup: dict | None = None


def build_gang(head: dict, resources: Mapping, podgroups: bool) -> Gang:
    """Make ``head`` (a pod manifest of :func:`kubetune_operator.builders.build_pod`) the head of a gang and
    return the rest of it.

    Args:
        head: the attempt's pod; its env, labels, hostname and subdomain are set here (changed in place).
        resources: ``spec.resourcesPerTrial`` (with ``workers``).
        podgroups: whether the cluster serves the scheduler's PodGroup: the gang then gets one with
            ``gang.minCount`` = its size, and each pod's ``schedulingGroup`` names it.

    Returns:
        The headless Service (``publishNotReadyAddresses``: ranks resolve while they start), the worker pods
        and the PodGroup, each labelled as the head and owned as it is (by the Trial).
    """
    meta, namespace = head["metadata"], head["metadata"]["namespace"]
    name, size = meta["name"], 1 + int(resources["workers"]["replicas"])
    group = gang_name(name)
    labels = {k: v for k, v in meta["labels"].items() if k.startswith("kubetune.io/") or k == LABEL_MANAGED_BY}
    worker_resources = pod_resources({"gpuResourceName": resources.get("gpuResourceName"), **resources["workers"]})
    if LABEL_KUEUE_QUEUE in meta["labels"]:
        meta["labels"][KUEUE_POD_GROUP] = group
        meta.setdefault("annotations", {}).update({KUEUE_POD_GROUP_COUNT: str(size), KUEUE_RETRIABLE_IN_GROUP: "false"})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": group,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": copy.deepcopy(meta["ownerReferences"]),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_TRIAL: meta["labels"][LABEL_TRIAL], LABEL_ATTEMPT: meta["labels"][LABEL_ATTEMPT]},
        },
    }
    podgroup = None
    if podgroups:
        podgroup = {
            "apiVersion": f"{PODGROUP_API[0]}/{PODGROUP_API[1]}",
            "kind": "PodGroup",
            "metadata": copy.deepcopy(service["metadata"]),
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        }
    workers, base = [], copy.deepcopy(head)
    for rank in range(size):
        pod = head if rank == 0 else copy.deepcopy(base)
        pod["metadata"]["name"] = member_name(name, rank)
        pod["metadata"]["labels"][LABEL_RANK] = str(rank)
        pod["metadata"]["labels"][LABEL_WORLD_SIZE] = str(size)
        spec = pod["spec"]
        spec["hostname"], spec["subdomain"] = f"rank-{rank}", group
        if podgroups:
            spec["schedulingGroup"] = {"podGroupName": group}
        container = spec["containers"][0]
        container["env"] = rendezvous_env(name, namespace, rank, size) + container.get("env", [])
        if rank:
            container["resources"] = copy.deepcopy(worker_resources)
            # a container trial's worker restores the checkpoint folder too; only the head's sidecar reports
            init = [c for c in spec.get("initContainers") or () if c["name"] != METRICS_SIDECAR]
            if init:
                spec["initContainers"] = init
            else:
                spec.pop("initContainers", None)
            workers.append(pod)
    return Gang(service=service, workers=workers, podgroup=podgroup)


def fold(pods: Mapping[str, PodView]) -> dict[str, PodView]:
    """The pods of each attempt as one view, by head pod name: one-pod trials' pods as they are, a gang's
    members summed up by the module's rules.

    A gang's view has the head's name, trial, attempt, owner and outcome (``message``, ``exit_code``) and
    ``gang`` (a :class:`GangView`). It is the head's once the head succeeded. Else it is Failed with
    ``disruption`` when a worker was evicted, preempted, deleted or is missing (even when the head then
    failed: it lost a peer); else Failed with the failure that came first (a worker's reason, and its rank and
    message in ``message``, or the head's own, by the containers' ``finishedAt``); else Running when every
    member runs (a worker that returned counts), else Pending (a waiting member's cause). Workers whose head
    does not exist yet (it is created last) are left out.
    """
    out: dict[str, PodView] = {}
    groups: dict[tuple[str, int], list[PodView]] = {}
    for view in pods.values():
        if view.rank is None:
            out[view.name] = view
        else:
            groups.setdefault((view.trial, view.attempt), []).append(view)
    for members in groups.values():
        members.sort(key=lambda v: v.rank)
        if members[0].rank == 0:
            out[members[0].name] = _fold(members[0], members)
    return out


def _fold(head: PodView, members: list[PodView]) -> PodView:
    present = [m for m in members if not m.gone]
    bound = [m.scheduled_at for m in present if m.scheduled_at]
    view = dataclasses.replace(
        head,
        gang=GangView(
            total=head.world_size,
            ready=sum(1 for m in present if m.ready),
            scheduled=sum(1 for m in present if m.scheduled),
            active=tuple(m.name for m in present if m.phase in _ACTIVE and not m.deleting),
            scheduled_at=min(bound) if bound else None,
        ),
    )
    if head.phase == "Succeeded":
        return view  # the head's outcome is the attempt's
    workers = members[1:]
    ended = next((m for m in workers if m.disruption or m.gone or (m.deleting and not head.deleting)), None)
    if ended is not None:  # before the head's own end: a head whose peer went fails for that reason
        message = f"worker rank {ended.rank} (pod {ended.name}) was ended by {ended.disruption or 'its deletion'}"
        return dataclasses.replace(view, phase="Failed", disruption=ended.disruption or "PodDeleted", message=message)
    if len(members) < head.world_size and not head.deleting:  # deleted while this operator was away
        missing = min(set(range(head.world_size)) - {m.rank for m in members})
        message = f"worker rank {missing} (pod {member_name(head.name, missing)}) disappeared"
        return dataclasses.replace(view, phase="Failed", disruption="PodDeleted", message=message)
    failed = [m for m in workers if m.phase == "Failed" and not m.deleting]
    first = min(failed, key=lambda m: (m.finished_at or "~", m.rank)) if failed else None
    head_ended = head.phase == "Failed" or head.gone
    if first is not None and (not head_ended or (first.finished_at or "~") < (head.finished_at or "~")):
        message = f"worker rank {first.rank} (pod {first.name}) failed: {first.message or first.reason}"
        return dataclasses.replace(
            view, phase="Failed", reason=first.reason, exit_code=first.exit_code, message=message
        )
    if head_ended:
        return view  # the head failed first, or alone
    if all(m.phase == "Running" or m.phase == "Succeeded" for m in members):
        return dataclasses.replace(view, phase="Running")
    waiting = next((m for m in members if m.phase == "Pending" and m.waiting), None)
    cause = (waiting.waiting[0], f"pod {waiting.name}: {waiting.waiting[1]}") if waiting else None
    return dataclasses.replace(view, phase="Pending", waiting=cause)


_ACTIVE = ("Pending", "Running")
