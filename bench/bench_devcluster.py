"""Benchmark of the local cluster: warm start time, and the bind-to-Running
latency the process kubelet adds, against spawning the same process directly.

Run: ``.venv/bin/python bench/bench_devcluster.py [--pods 40]``. Prints the
figures and the ratio kubelet-latency / direct-spawn-latency, both measured in
this invocation (the machine is shared and noisy; absolute times drift).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client  # noqa: E402

from devcluster import Cluster, ClusterConfig  # noqa: E402

COMMAND = [sys.executable, "-c", "import time; time.sleep(5)"]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def watch_latencies(core: client.CoreV1Api, namespace: str, count: int, out: dict, ready: threading.Event) -> None:
    """Record, per pod, when the watch first shows it bound and first shows it Running."""
    resp = core.list_namespaced_pod(namespace, watch=True, _preload_content=False, timeout_seconds=120)
    ready.set()
    for line in resp:
        if not line.strip():
            continue
        pod = json.loads(line)["object"]
        name, now = pod["metadata"]["name"], time.monotonic()
        entry = out.setdefault(name, {})
        if pod["spec"].get("nodeName") and "bound" not in entry:
            entry["bound"] = now
        if (pod.get("status") or {}).get("phase") == "Running" and "running" not in entry:
            entry["running"] = now
        if sum(1 for e in out.values() if "running" in e) >= count:
            break
    resp.release_conn()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=40)
    args = parser.parse_args()

    started = time.monotonic()
    with Cluster(ClusterConfig(nodes=1, gpus_per_node=4, node_pods=args.pods + 10)) as cluster:
        start_s = time.monotonic() - started
        core = client.CoreV1Api(cluster.api_client())
        core.create_namespace({"metadata": {"name": "bench"}})
        times: dict = {}
        ready = threading.Event()
        watcher = threading.Thread(target=watch_latencies, args=(core, "bench", args.pods, times, ready))
        watcher.start()
        ready.wait()
        for i in range(args.pods):
            core.create_namespaced_pod(
                "bench",
                {
                    "metadata": {"name": f"p{i}"},
                    "spec": {
                        "restartPolicy": "Never",
                        "automountServiceAccountToken": False,
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "main", "image": "bench", "command": COMMAND}],
                    },
                },
                _preload_content=False,
            )
            time.sleep(0.05)
        watcher.join(timeout=180)
        kubelet_ms = [1000 * (e["running"] - e["bound"]) for e in times.values() if {"bound", "running"} <= set(e)]

    spawn_ms = []
    for _ in range(args.pods):
        t = time.monotonic()
        proc = subprocess.Popen(COMMAND, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        spawn_ms.append(1000 * (time.monotonic() - t))
        proc.kill()
        proc.wait()

    p50, p90 = statistics.median(kubelet_ms), pct(kubelet_ms, 90)
    base = statistics.median(spawn_ms)
    print(f"cluster start (warm binaries): {start_s:.1f} s")
    print(f"bind-to-Running via process kubelet, {len(kubelet_ms)} pods: p50 {p50:.1f} ms, p90 {p90:.1f} ms")
    print(f"baseline: direct Popen of the same command: p50 {base:.1f} ms")
    print(
        f"ratio kubelet p50 / direct spawn p50: {p50 / base:.1f}x; kubelet overhead p50 {p50 - base:.1f} ms "
        f"(goal: under 200 ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
