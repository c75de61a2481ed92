"""Benchmark of the operator at scale: an Experiment of N trials whose trainable
finishes at once, on its own local cluster.

Prints the time from apply to all Trials and to all pods created (pods/s, goal
>= 50; the node is cordoned until every pod exists, because on this one machine
trial processes would otherwise take the operator's CPU, which they never share
in a real cluster); then, with every pod still waiting, SIGKILLs the operator and
times a new one from process start to its log line that it resumed the
Experiment (goal < 10 s at 10,000 trials); the Experiment object's size at the
end (goal < 16 KiB), the operator's peak RSS, and, as the baseline measured in the same invocation, the
rate at which a plain client with the same thread-pool size creates the same
Trial and pod manifests (the API server's own ceiling on this machine).

With ``--slots K`` it instead runs the N trials K at a time on an uncordoned node (issue 13's scale
run) and prints the per-slot turnaround (K / trials completed per second) over the first and the last
thousand completions, which must not grow with the trial count, the operator's peak RSS and the
Experiment object's size at the end.

Run: ``.venv/bin/python bench/bench_operator_scale.py [--trials 1000] [--slots 8]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from devcluster import Cluster, ClusterConfig  # noqa: E402
from devcluster.cluster import S3_BUCKET  # noqa: E402
from devcluster.operator import OperatorProcess  # noqa: E402
from kubetune_operator.builders import build_pod, build_trial  # noqa: E402
from kubetune_operator.settings import Settings  # noqa: E402

GROUP, VERSION = "kubetune.io", "v1alpha1"
NODE = "devcluster-node-0"
SOURCE = (
    "import kubetune\nclass Quick(kubetune.Trainable):\n    def step(self):\n"
    "        return {'score': self.config['x'], 'done': True}\n"
)


def experiment(name: str, trials: int, cluster: Cluster) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "trainable": {"source": SOURCE, "name": "Quick"},
            "image": "bench",
            "numSamples": trials,
            "config": {"x": {"uniform": [0, 1]}},
            "metric": "score",
            "mode": "max",
            "maxConcurrentTrials": trials,
            "checkpoint": {"atEnd": False},
            "resourcesPerTrial": {"cpu": "10m"},
            "storage": {"uri": f"s3://{S3_BUCKET}/bench", "endpoint": cluster.s3_endpoint, "credentialsSecret": "s3"},
        },
    }


def count_added(
    api: client.ApiClient,
    namespace: str,
    plural: str | None,
    target: int,
    started: float,
    out: dict,
    ready: threading.Event,
) -> None:
    """Watch ``namespace`` and record when the ``target``-th object was added (seconds since ``started``)."""
    if plural is None:
        resp = client.CoreV1Api(api).list_namespaced_pod(
            namespace, watch=True, _preload_content=False, timeout_seconds=900
        )
    else:
        resp = client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, watch=True, _preload_content=False, timeout_seconds=900
        )
    ready.set()
    seen: set[str] = set()
    for line in resp:
        if not line.strip():
            continue
        event = json.loads(line)
        if event["type"] == "ADDED":
            seen.add(event["object"]["metadata"]["name"])
            if len(seen) == 1:
                out["first"] = time.monotonic() - started
            if len(seen) >= target:
                out["all"] = time.monotonic() - started
                break
    resp.release_conn()


def baseline(api: client.ApiClient, cluster: Cluster, trials: int) -> float:
    """Seconds for a plain 16-thread client to create ``trials`` Trials and their pods (pods never scheduled)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": "baseline"}})
    exp = custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        "baseline",
        "experiments",
        {
            **experiment("base", trials, cluster),
            "spec": {**experiment("base", trials, cluster)["spec"], "suspend": True},
        },
    )
    settings = Settings()

    def one(i: int) -> None:
        trial = custom.create_namespaced_custom_object(
            GROUP, VERSION, "baseline", "trials", build_trial(exp, i, {"x": 0.5}, str(i))
        )
        pod = build_pod(exp, trial, 0, settings)
        pod["spec"]["nodeSelector"] = {"kubetune.io/bench": "nowhere"}
        core.create_namespaced_pod("baseline", pod, _preload_content=False)

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(trials)))
    took = time.monotonic() - started
    core.delete_namespace("baseline")
    while True:  # gone before the operator starts, so it neither sees nor cleans up after the baseline
        try:
            core.read_namespace("baseline")
        except client.ApiException as exc:
            if exc.status == 404:
                return took
            raise
        time.sleep(1)


def restart(operator: OperatorProcess, trials: int) -> tuple[float, float]:
    """SIGKILL the operator while every trial's pod waits, start a new one, and return the seconds from its
    start to its log line saying it resumed the Experiment (with ``trials`` Trials), and its peak RSS then.

    Raises:
        RuntimeError: it did not resume within 300 s.
    """
    operator.kill()
    offset = operator.log.stat().st_size if operator.log.exists() else 0
    started = time.monotonic()
    operator.start()
    deadline = started + 300
    while time.monotonic() < deadline:
        with open(operator.log, "rb") as f:
            f.seek(offset)
            line = next(
                (
                    raw
                    for raw in f.read().decode(errors="replace").splitlines()
                    if f"resumed with {trials} trials" in raw
                ),
                None,
            )
        if line:
            took = time.monotonic() - started
            print(
                f"restart at {trials} trials: resumed {took:.1f} s after the new operator process started; "
                f"its own account: {line.split('resumed with', 1)[1].strip()}"
            )
            return took, peak_rss_mib(operator.proc.pid)
        time.sleep(0.2)
    raise RuntimeError("the restarted operator did not resume within 300 s")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def completions(api: client.ApiClient, namespace: str, target: int, out: list, ready: threading.Event) -> None:
    """Watch the Trials of ``namespace`` and append the monotonic time at which each one Succeeded or Failed,
    until ``target`` have."""
    resp = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "trials", watch=True, _preload_content=False, timeout_seconds=7200
    )
    ready.set()
    ended: set[str] = set()
    for line in resp:
        if not line.strip():
            continue
        trial = json.loads(line)["object"]
        if (trial.get("status") or {}).get("phase") in ("Succeeded", "Failed") and trial["metadata"][
            "name"
        ] not in ended:
            ended.add(trial["metadata"]["name"])
            out.append(time.monotonic())
            if len(ended) >= target:
                break
    resp.release_conn()


def run_slots(cluster: Cluster, api: client.ApiClient, n: int, slots: int) -> None:
    """Run ``n`` one-step trials ``slots`` at a time and print the per-slot turnaround at the first and the
    last thousand completions, the operator's peak RSS and the Experiment object's size."""
    custom = client.CustomObjectsApi(api)
    operator = OperatorProcess(cluster, Path(tempfile.mkdtemp()) / "operator.log")
    operator.start()
    try:
        ended: list[float] = []
        ready = threading.Event()
        watcher = threading.Thread(target=completions, args=(api, "scale", n, ended, ready), daemon=True)
        watcher.start()
        ready.wait()
        spec = experiment("scale", n, cluster)
        spec["spec"]["maxConcurrentTrials"] = slots
        started = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, "scale", "experiments", spec)
        watcher.join(timeout=7200)
        while True:  # the last Trial's end comes before the Experiment's
            exp = custom.get_namespaced_custom_object(GROUP, VERSION, "scale", "experiments", "scale")
            if exp.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(0.5)
        rss = peak_rss_mib(operator.proc.pid)
    finally:
        operator.stop()
    window = min(1000, n // 2)
    first = window / (ended[window - 1] - started)
    last = window / (ended[-1] - ended[-window - 1])
    print(
        f"{n} one-step trials, {slots} at a time: {exp['status']['phase']} after {ended[-1] - started:.0f} s "
        f"({n / (ended[-1] - started):.2f} trials/s) {exp['status']['trials']}"
    )
    print(
        f"per-slot turnaround: first {window} trials {slots / first:.3f} s, last {window} {slots / last:.3f} s "
        f"(ratio last/first {first / last:.2f}; must not grow with the trial count)"
    )
    print(
        f"operator peak RSS {rss:.0f} MiB (goal <= 300 at 10,000 trials); Experiment object "
        f"{len(json.dumps(exp, separators=(',', ':')))} bytes (goal < 16384)"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--node-pods", type=int, default=24, help="pods running at once (each is a Python process)")
    parser.add_argument(
        "--slots",
        type=int,
        default=0,
        help="run the trials this many at a time and time the per-slot turnaround instead",
    )
    parser.add_argument(
        "--stop-after-restart",
        action="store_true",
        help="end after the restart is timed, without running the trials (for 10,000 trials)",
    )
    args = parser.parse_args()
    n = args.trials
    crds = [str(p) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    with Cluster(ClusterConfig(nodes=1, gpus_per_node=0, node_pods=args.node_pods, crds=crds)) as cluster:
        api = cluster.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        base_s = 0.0 if args.slots else baseline(api, cluster, n)
        core.create_namespace({"metadata": {"name": "scale"}})
        env = cluster.env()
        core.create_namespaced_secret(
            "scale",
            {
                "metadata": {"name": "s3"},
                "stringData": {
                    "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
                    "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
                },
            },
        )
        if args.slots:
            run_slots(cluster, api, n, args.slots)
            return 0
        operator = OperatorProcess(cluster, Path(tempfile.mkdtemp()) / "operator.log")
        operator.start()
        try:
            trials_at, pods_at = {}, {}
            ready = [threading.Event(), threading.Event()]
            started = time.monotonic()
            watchers = [
                threading.Thread(target=count_added, args=(api, "scale", "trials", n, started, trials_at, ready[0])),
                threading.Thread(target=count_added, args=(api, "scale", None, n, started, pods_at, ready[1])),
            ]
            for w in watchers:
                w.start()
            for r in ready:
                r.wait()
            core.patch_node(NODE, {"spec": {"unschedulable": True}})
            started_apply = time.monotonic()
            custom.create_namespaced_custom_object(
                GROUP, VERSION, "scale", "experiments", experiment("scale", n, cluster)
            )
            for w in watchers:
                w.join()
            offset = started_apply - started
            first_rss = peak_rss_mib(operator.proc.pid)  # the operator that created every Trial and pod
            resumed_s, restart_rss = restart(operator, n)
            if args.stop_after_restart:
                exp = custom.get_namespaced_custom_object(GROUP, VERSION, "scale", "experiments", "scale")
                print(
                    f"operator: {n / (pods_at['all'] - offset):.0f} pods/s; baseline {n / base_s:.0f} pods/s; "
                    f"Experiment object {len(json.dumps(exp, separators=(',', ':')))} bytes"
                )
                print(
                    f"operator peak RSS after creating every Trial and pod: {first_rss:.0f} MiB "
                    "(goal <= 300 MiB at 10,000 trials)"
                )
                print(
                    f"restart with every trial's pod waiting: resumed in {resumed_s:.1f} s (goal < 10 s at "
                    f"10,000 trials), peak RSS of the restarted operator then {restart_rss:.0f} MiB "
                    "(goal <= 300 MiB at 10,000 trials)"
                )
                return 0
            core.patch_node(NODE, {"spec": {"unschedulable": False}})
            print(
                f"{n} trials: all Trials created {trials_at['all'] - offset:.1f} s after apply, "
                f"all pods {pods_at['all'] - offset:.1f} s after apply"
            )
            deadline = time.monotonic() + 1800
            while time.monotonic() < deadline:
                exp = custom.get_namespaced_custom_object(GROUP, VERSION, "scale", "experiments", "scale")
                if exp.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    break
                time.sleep(2)
            finished = time.monotonic() - started_apply
            size = len(json.dumps(exp, separators=(",", ":")))
            rss = peak_rss_mib(operator.proc.pid)
        finally:
            operator.stop()
    pods_per_s = n / (pods_at["all"] - offset)
    base_per_s = n / base_s
    print(f"experiment {exp['status']['phase']} after {finished:.0f} s: {exp['status']['trials']}")
    print(f"operator: {pods_per_s:.0f} pods/s (Trial + pod each; goal >= 50)")
    print(f"baseline: plain 16-thread client creating the same Trials and pods: {base_per_s:.0f} pods/s")
    print(f"ratio operator / baseline: {pods_per_s / base_per_s:.2f}")
    print(f"Experiment object at the end: {size} bytes (goal < 16384)")
    print(
        f"operator peak RSS: {first_rss:.0f} MiB after creating every Trial and pod; {rss:.0f} MiB for the "
        "restarted one at the end (goal <= 300 at 10,000 trials)"
    )
    print(
        f"restart with every trial's pod waiting: resumed in {resumed_s:.1f} s (goal < 10 s at 10,000 trials), "
        f"peak RSS of the restarted operator then {restart_rss:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
