"""Fake nodes for the process kubelet: registration with full status, and the
node Lease heartbeat.

Called by :mod:`devcluster.kubelet` at start and from its heartbeat thread.
A Node's status can only be set when it is created (the kubelet normally owns
it), so the whole status goes into the create call; every ``nodeInfo`` field is
filled because clients' models reject a partial one.
"""

from __future__ import annotations

import datetime

from kubernetes import client

from .podenv import drain

GPU_RESOURCE = "nvidia.com/gpu"
LEASE_SECONDS = 40


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes timestamps (seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_manifest(name: str, *, cpu: str, memory: str, pods: int, gpus: int, kubelet_port: int = 0) -> dict:
    """Return a Node with Ready status, ``gpus`` of ``nvidia.com/gpu`` capacity and its kubelet's log
    endpoint on ``kubelet_port`` (0: none)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi", GPU_RESOURCE: str(gpus)}
    now = now_rfc3339()
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": f"KubeletHas{r}",
            "message": m,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for t, r, m in (
            ("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "process kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true" if gpus else "false",
                "kubetune.io/devcluster": "true",
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
                "kernelVersion": "process",
                "osImage": "devcluster process kubelet",
                "containerRuntimeVersion": "process://1",
                "kubeletVersion": "v0.0.0-process",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def register_node(core: client.CoreV1Api, manifest: dict) -> None:
    """Create the Node, replacing a stale one of the same name (status is only settable at create)."""
    name = manifest["metadata"]["name"]
    try:
        drain(core.delete_node(name, grace_period_seconds=0, _preload_content=False))
    except client.ApiException as exc:
        if exc.status != 404:
            raise
    drain(core.create_node(manifest, _preload_content=False))


def renew_lease(coord: client.CoordinationV1Api, node: str) -> None:
    """Create or renew the node's Lease in ``kube-node-lease``."""
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_now()},
    }
    try:
        drain(coord.patch_namespaced_lease(node, "kube-node-lease", {"spec": body["spec"]}, _preload_content=False))
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        drain(coord.create_namespaced_lease("kube-node-lease", body, _preload_content=False))
