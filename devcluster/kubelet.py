"""The process kubelet: runs the containers of pods bound to its fake nodes as
local processes and reports pod status the way a kubelet does.

Started by :mod:`devcluster.cluster` as ``python -m devcluster.kubelet``; one
process serves every fake node. It registers the nodes, renews their Leases,
watches pods, and gives each bound pod a :class:`devcluster.pod.PodWorker`
thread, and serves container logs (:mod:`devcluster.logserver`, so ``kubectl logs``
works). It writes ``<workdir>/kubelet.ready`` once the nodes are registered and the watch
is established.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from pathlib import Path

from kubernetes import client, config

from . import nodes
from .logserver import LogServer
from .pod import GpuAllocator, MountPoints, PodWorker, can_isolate_mounts

log = logging.getLogger("devcluster.kubelet")


class ProcessKubelet:
    """Watches pods on ``node_names`` and runs them.

    Args:
        api: an ApiClient with rights over nodes, leases, pods, secrets, configmaps, tokens.
        workdir: the cluster's work directory; pod folders and logs go under ``workdir/pods``.
        api_port: the API server port, given to containers as ``KUBERNETES_SERVICE_PORT``.
    """

    def __init__(self, api: client.ApiClient, workdir: Path, node_gpus: dict[str, int], api_port: int):
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.workdir = workdir
        self.node_names = set(node_gpus)
        self.gpus = {n: GpuAllocator(g) for n, g in node_gpus.items()}
        self.api_port = api_port
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.isolate_mounts = can_isolate_mounts()
        self.mount_points = MountPoints()  # host paths the pods' mounts created, removed after them

    def heartbeat(self) -> None:
        """Renew every node's Lease each 10 s until :meth:`shutdown` (runs on its own thread)."""
        while not self.stopping.wait(10):
            for node in self.node_names:
                try:
                    nodes.renew_lease(self.coord, node)
                except Exception as exc:  # noqa: BLE001 - a missed beat is retried in 10 s
                    log.warning("lease renewal for %s failed: %s", node, exc)

    def handle(self, pod: dict, event: str) -> None:
        """React to one watch event for a pod (any node; others are ignored)."""
        node = pod["spec"].get("nodeName")
        if node not in self.node_names:
            return
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            if event == "DELETED":
                if worker:
                    worker.terminate(0)
                self.workers.pop(uid, None)
                return
            if worker is None:
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") and not pod["metadata"].get(
                    "deletionTimestamp"
                ):
                    return
                worker = PodWorker(self, pod, self.gpus[node])
                self.workers[uid] = worker
                worker.start()
        if pod["metadata"].get("deletionTimestamp"):
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            worker.terminate(30 if grace is None else grace)

    def container_running(self, namespace: str, pod: str, container: str) -> bool:
        """Whether ``container`` of pod ``namespace/pod`` runs here and has not exited (for followed logs)."""
        with self.lock:
            workers = list(self.workers.values())
        return any(
            w.meta["namespace"] == namespace and w.meta["name"] == pod and not c.exited
            for w in workers
            for c in [*w.init_containers, *w.containers]
            if c.name == container
        )

    def forget(self, uid: str) -> None:
        """Drop the worker of pod ``uid`` (called by the worker when it ends)."""
        with self.lock:
            self.workers.pop(uid, None)

    def watch(self, on_ready) -> None:
        """List, then watch pods forever (re-listing after a 410 Gone)."""
        while not self.stopping.is_set():
            listing = json.loads(self.core.list_pod_for_all_namespaces(_preload_content=False).data)
            for pod in listing["items"]:
                self.handle(pod, "ADDED")
            rv = listing["metadata"]["resourceVersion"]
            on_ready()
            while not self.stopping.is_set():
                resp = self.core.list_pod_for_all_namespaces(
                    watch=True,
                    resource_version=rv,
                    timeout_seconds=300,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                )
                gone = False
                for line in resp:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        gone = obj.get("code") == 410
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.handle(obj, event["type"])
                resp.release_conn()
                if gone:
                    break

    def shutdown(self) -> None:
        """Stop every pod process (SIGTERM, then SIGKILL after 10 s)."""
        self.stopping.set()
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.kill_processes(grace=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.kubelet")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--node-gpus", default="4", help="GPUs of each node, comma-separated (one entry a node)")
    parser.add_argument("--cpu", default="32")
    parser.add_argument("--memory", default="128Gi")
    parser.add_argument("--pods", type=int, default=110)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = client.Configuration()
    config.load_kube_config(str(args.workdir / "kubeconfig"), client_configuration=cfg)
    cfg.connection_pool_maxsize = 64
    api = client.ApiClient(cfg)
    node_gpus = {f"devcluster-node-{i}": int(g) for i, g in enumerate(args.node_gpus.split(","))}
    port = int(cfg.host.rsplit(":", 1)[1])
    kubelet = ProcessKubelet(api, args.workdir, node_gpus, port)
    logs = LogServer(args.workdir / "pods", kubelet.container_running, args.workdir / "pki")
    logs.start()
    core = client.CoreV1Api(api)
    for name, gpus in node_gpus.items():
        nodes.register_node(
            core,
            nodes.node_manifest(
                name, cpu=args.cpu, memory=args.memory, pods=args.pods, gpus=gpus, kubelet_port=logs.port
            ),
        )
        nodes.renew_lease(client.CoordinationV1Api(api), name)
    log.info("registered nodes %s (mount isolation: %s)", node_gpus, kubelet.isolate_mounts)

    def on_signal(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    threading.Thread(target=kubelet.heartbeat, daemon=True, name="heartbeat").start()
    ready = args.workdir / "kubelet.ready"
    try:
        kubelet.watch(on_ready=lambda: ready.touch())
    except SystemExit:
        pass
    finally:
        kubelet.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
