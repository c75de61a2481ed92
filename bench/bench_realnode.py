"""Benchmark of the real node against the process kubelet: pod created -> container running over
trial-shaped pods, created one at a time (each once the one before runs) and in a burst (20 ms
apart), on each node in turn in one invocation, with the ratios; and the images' sizes and build
times (the last build of each from the build log; an unchanged tree's, measured here).

Run (as root, after ``make node``): ``.venv/bin/python bench/bench_realnode.py [--pods 100]``.
A pod is the shape of a trial pod: the runtime image, ``restricted`` security settings, a CPU and
memory request, no service-account token; its command imports kubetune and sleeps. "Running" is the
first watch event with the container's ``state.running``. The machine is shared and noisy: compare
the two figures of one run, not figures of different runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client  # noqa: E402

from bench.bench_devcluster import pct  # noqa: E402
from devcluster import Cluster, ClusterConfig, images  # noqa: E402

COMMAND = ["python", "-c", "import kubetune, time; time.sleep(20)"]


def _watch(core: client.CoreV1Api, namespace: str, count: int, out: dict, ready: threading.Event) -> None:
    resp = core.list_namespaced_pod(namespace, watch=True, _preload_content=False, timeout_seconds=600)
    ready.set()
    for line in resp:
        if not line.strip():
            continue
        pod = json.loads(line)["object"]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if any((s.get("state") or {}).get("running") for s in statuses):
            out.setdefault(pod["metadata"]["name"], time.monotonic())
        if len(out) >= count:
            break
    resp.release_conn()


def pod_start_latencies(cluster: Cluster, image: str, pods: int, one_at_a_time: bool) -> list[float]:
    """Create ``pods`` trial-shaped pods, 20 ms apart (a burst) or each once the one before runs; return
    created -> running seconds of each, and delete the pods."""
    core = client.CoreV1Api(cluster.api_client())
    namespace = "one-at-a-time" if one_at_a_time else "burst"
    core.create_namespace({"metadata": {"name": namespace}})
    running: dict[str, float] = {}
    ready = threading.Event()
    watcher = threading.Thread(target=_watch, args=(core, namespace, pods, running, ready), daemon=True)
    watcher.start()
    ready.wait()
    created = {}
    for i in range(pods):
        name = f"trial-{i:03d}"
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "trial",
                            "image": image,
                            "command": COMMAND,
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        }
                    ],
                },
            },
            _preload_content=False,
        )
        created[name] = time.monotonic()
        if one_at_a_time:
            deadline = time.monotonic() + 120
            while name not in running and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            time.sleep(0.02)
    watcher.join(timeout=600)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    return [running[n] - created[n] for n in created if n in running]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=100)
    args = parser.parse_args()

    last_build = {}
    log = images.images_dir() / "builds.jsonl"
    if log.is_file():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            last_build[entry["step"]] = entry["seconds"]
    started = time.monotonic()
    built = images.build_images()
    cached_s = time.monotonic() - started

    results = {}
    for label, config in (
        ("process kubelet", ClusterConfig(nodes=1, node_pods=args.pods + 10)),
        ("real node", ClusterConfig(real_node=True, gpus_per_node=0)),
    ):
        with Cluster(config) as cluster:
            for one_at_a_time in (True, False):
                mode = "one at a time" if one_at_a_time else "burst, 20 ms apart"
                latencies = pod_start_latencies(cluster, built["runtime"].ref, args.pods, one_at_a_time)
                results[label, mode] = latencies
                print(
                    f"{label}, {mode}: created -> running, {len(latencies)}/{args.pods} pods: "
                    f"p50 {1000 * pct(latencies, 50):.0f} ms, p99 {1000 * pct(latencies, 99):.0f} ms",
                    flush=True,
                )
                time.sleep(10)  # the deleted pods' containers go before the next round
    for mode in ("one at a time", "burst, 20 ms apart"):
        real, proc = results["real node", mode], results["process kubelet", mode]
        print(
            f"ratio real node / process kubelet, {mode}: p50 {pct(real, 50) / pct(proc, 50):.1f}x, "
            f"p99 {pct(real, 99) / pct(proc, 99):.1f}x"
        )
    for name, image in built.items():
        print(
            f"image {name}: {image.archive.stat().st_size / 2**20:.1f} MiB (docker archive), "
            f"last build {last_build.get(name, '?')} s (build log)"
        )
    print(f"base image build: {last_build.get('base', '?')} s; all again with an unchanged tree: {cached_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
