"""Benchmark of the real node against the process kubelet: pod created -> container running over
trial-shaped pods, created one at a time (each once the one before runs) and in a burst (20 ms
apart), on each node in turn in one invocation, with the ratios; the operator pod's RSS and CPU under
the collector load of a 1,000-trial Experiment beside the same operator as a host process; and the
images' sizes and build times (the last build of each from the build log; an unchanged tree's,
measured here).

The collector load (``--phases collector``): the chart installed on the real node as ``python -m
devcluster up --real-node`` installs it (the operator in its image, its Deployment's CPU and memory
limits), an Experiment of ``--trials``
trials whose pods stay Pending (each asks for more memory than the node has, so that no trial process
takes the operator's CPU), and ``bench_collector``'s load generator reporting for every trial with the
token of its pod, through the operator's Service: a saturated slice (each connection sends its next
batch when the reply arrives) and a paced one (``--rate`` results/s offered). Each batch goes through
the whole path of a real result: token, checks, controller, the journal committed to the API server
before the reply, Trial status writes. The baseline, in the same invocation and against the same
Experiment: the Deployment scaled to 0 and the same operator started as a host process with the
Deployment's settings (it resumes the Experiment from its journal); then the pod again, so that a
drift over the run shows. Figures per slice: results/s, reply latency p50/p99, the operator's CPU
microseconds per result and cores used, its RSS and peak RSS (``VmHWM``), and the pod's CPU throttling
(its cgroup's ``cpu.stat``) against its CPU limit.

A pod is the shape of a trial pod: the runtime image, ``restricted`` security settings, a CPU and
memory request, no service-account token; its command imports kubetune and sleeps. "Running" is the
first watch event with the container's ``state.running``. The machine is shared and noisy: compare
the two figures of one run, not figures of different runs.

The overhead of a container trial (``--phases overhead``): the chart installed as above, ``--overhead-trials``
trials of the same work (4 results 0.5 s apart) run two at a time as container trials (a plain script in the runtime
image printing its lines, read by the operator from the pod's log) and as runtime trials (a function reporting
through the collector), alternating twice; per side, each trial's seconds from its ``startTime`` to its
``completionTime`` beyond the work, and the Experiments' makespan, with the ratio container / runtime.

Run (as root, after ``make node``): ``.venv/bin/python bench/bench_realnode.py [--pods 100]
[--phases pods,collector,overhead] [--trials 1000] [--rate 2000] [--duration 20] [--overhead-trials 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import glob
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
from kubernetes import client  # noqa: E402

from bench.bench_collector import PhaseStats, Server, TrialFeed, run_slice  # noqa: E402
from bench.bench_devcluster import pct  # noqa: E402
from devcluster import Cluster, ClusterConfig, images, install  # noqa: E402
from devcluster.cluster import S3_BUCKET  # noqa: E402
from devcluster.operator import OPERATOR_NAMESPACE, OperatorProcess  # noqa: E402
from devcluster.testkit import wait_for  # noqa: E402
from kubetune.env import COLLECTOR_RESULTS_PATH  # noqa: E402
from kubetune_operator.builders import trial_dir_uri  # noqa: E402
from kubetune_operator.status import parse_time  # noqa: E402

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


#: The chart's operator pods (its selector labels).
OPERATOR_PODS = f"app.kubernetes.io/component=operator,app.kubernetes.io/instance={install.RELEASE}"
#: Settings of the chart's Deployment that a host process takes its own of (where it listens).
HOST_SETTINGS = {f"KUBETUNE_OPERATOR_COLLECTOR_{k}" for k in ("BIND_HOST", "BIND_PORT", "URL")}
TEAM, EXPERIMENT = install.NAMESPACE, "load"
#: Each trial's memory request: more than the node has, so trial pods stay Pending (Unschedulable) and no
#: trial process takes the operator's CPU, which they never share in a real cluster.
UNSCHEDULABLE_MEMORY = "4Ti"


def load_experiment(cluster: Cluster, trials: int) -> dict:
    """``trials`` random ``lr`` samples all admitted at once, FIFO (the scheduler's own cost is
    ``bench_collector``'s subject), storage in the cluster's S3 with the credentials Secret that
    :func:`devcluster.install.install` makes."""
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": EXPERIMENT},
        "spec": {
            "trainable": {"entrypoint": "examples.digits.trainable:DigitsTrainable"},
            "config": {"lr": {"loguniform": [1e-5, 1e-1]}},
            "numSamples": trials,
            "maxConcurrentTrials": trials,
            "metric": "loss",
            "mode": "min",
            "searchAlgorithm": {"name": "basic", "seed": 7},
            "resourcesPerTrial": {"cpu": "10m", "memory": UNSCHEDULABLE_MEMORY},
            "storage": {
                "uri": f"s3://{S3_BUCKET}/load",
                "endpoint": cluster.s3_endpoint,
                "region": "us-east-1",
                "credentialsSecret": install.CREDENTIALS_SECRET,
            },
        },
    }


def feeds_of(cluster: Cluster, core: client.CoreV1Api, trials: int, timeout: float = 600) -> list[TrialFeed]:
    """Create the Experiment; once all its trial pods exist (Pending), one feed per trial with its pod's
    token (from the attempt's Secret, as the pod gets it).

    Raises:
        AssertionError: not every pod existed within ``timeout`` seconds.
    """
    custom = client.CustomObjectsApi(core.api_client)
    exp = custom.create_namespaced_custom_object(
        "kubetune.io", "v1alpha1", TEAM, "experiments", load_experiment(cluster, trials)
    )
    started = time.monotonic()
    pods = wait_for(
        lambda: len(items := core.list_namespaced_pod(TEAM).items) >= trials and items,
        timeout=timeout,
        interval=2,
        what=f"{trials} trial pods",
    )
    print(f"collector load: {trials} trials and their pods created in {time.monotonic() - started:.0f} s", flush=True)
    storage = exp["spec"]["storage"]["uri"]
    secrets = {s.metadata.name: s.data for s in core.list_namespaced_secret(TEAM).items}
    feeds = []
    for i, pod in enumerate(sorted(pods, key=lambda p: p.metadata.name)):
        ref = next(e for e in pod.spec.containers[0].env if e.name == "KUBETUNE_TOKEN").value_from.secret_key_ref
        token = base64.b64decode(secrets[ref.name][ref.key]).decode()
        trial, attempt = pod.metadata.name.rsplit("-", 1)
        feeds.append(
            TrialFeed(
                trial,
                int(attempt),
                10 ** -(1 + 4 * i / trials),
                token,
                namespace=TEAM,
                experiment=EXPERIMENT,
                trial_dir=trial_dir_uri(storage, TEAM, EXPERIMENT, exp["metadata"]["uid"], trial),
                rng=random.Random(i),
            )
        )
    return feeds


def operator_pod_cgroup(core: client.CoreV1Api) -> tuple[int, Path]:
    """The host pid of the chart's operator container and its cgroup folder of the ``cpu`` controller,
    once the pod is Ready.

    Raises:
        AssertionError: no Ready operator pod within 300 s, or its cgroup not found.
    """
    pod = wait_for(
        lambda: next(
            (
                p
                for p in core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_PODS).items
                if p.metadata.deletion_timestamp is None
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            ),
            None,
        ),
        timeout=300,
        interval=1,
        what="a Ready operator pod",
    )
    container = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    found = [
        Path(f)  # the v1 cpu controller's folder (not cgroup v2's cpu.stat), mounted alone or as cpu,cpuacct
        for f in glob.glob(f"/sys/fs/cgroup/cpu*/kubepods/**/{container}", recursive=True)
        if Path(f, "cpu.cfs_quota_us").is_file()
    ]
    assert found, f"no cpu cgroup of container {container}"
    folder = found[0]
    return int((folder / "cgroup.procs").read_text().split()[0]), folder


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of ``pid`` in KiB (``/proc/<pid>/status``)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM")}


def throttling(folder: Path | None) -> dict[str, int]:
    """The cgroup's ``cpu.stat`` (periods, throttled periods, throttled ns); ``{}`` for a host process."""
    if folder is None:
        return {}
    return {k: int(v) for k, v in (line.split() for line in (folder / "cpu.stat").read_text().splitlines())}


async def wait_adopted(server: Server, timeout: float = 300) -> None:
    """Wait until the collector takes a batch (it answers 503 until it has resumed the Experiment).

    Raises:
        TimeoutError: not within ``timeout`` seconds.
    """
    feed, deadline = server.feeds[0], time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.post(
                    server.url, data=feed.next_body(1), headers={"Authorization": f"Bearer {feed.token}"}
                ) as resp:
                    if resp.status == 200:
                        return
                    if resp.status != 503:  # 503: not resumed yet; anything else will not pass by waiting
                        raise RuntimeError(f"the collector answered {resp.status}: {await resp.text()}")
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(1)
    raise TimeoutError("the collector did not take results in time")


def measure_operator(label: str, pid: int, url: str, feeds: list[TrialFeed], cgroup: Path | None, args) -> dict:
    """One operator under the load: a saturated then a paced slice; its memory and CPU figures."""
    server = Server(label, SimpleNamespace(pid=pid), None, url, feeds)
    asyncio.run(wait_adopted(server))
    stats = {mode: PhaseStats(f"{label} {mode}") for mode in ("saturated", "paced")}
    before = throttling(cgroup)
    for mode, rate in (("saturated", None), ("paced", args.rate)):
        asyncio.run(run_slice(stats[mode], server, args.connections, 10, 2.0, args.duration, rate))
    after = throttling(cgroup)
    figures = {"stats": stats, **memory_kib(pid)}
    if after:
        periods = after["nr_periods"] - before["nr_periods"]
        figures["throttled"] = (after["nr_throttled"] - before["nr_throttled"]) / max(periods, 1)
    return figures


def operator_deployment(cluster: Cluster) -> client.V1Deployment:
    """The chart's operator Deployment."""
    apps = client.AppsV1Api(cluster.api_client())
    return apps.list_namespaced_deployment(OPERATOR_NAMESPACE, label_selector=OPERATOR_PODS).items[0]


def set_replicas(cluster: Cluster, replicas: int) -> None:
    """Scale the chart's Deployment; at 0, wait until its pods are gone (bounded: 120 s)."""
    apps = client.AppsV1Api(cluster.api_client())
    name = operator_deployment(cluster).metadata.name
    apps.patch_namespaced_deployment_scale(name, OPERATOR_NAMESPACE, {"spec": {"replicas": replicas}})
    if replicas == 0:
        core = client.CoreV1Api(cluster.api_client())
        wait_for(
            lambda: not core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_PODS).items,
            timeout=120,
            what="the operator pod to go",
        )


def process_operator(cluster: Cluster, log: Path) -> OperatorProcess:
    """The operator as a host process with the chart Deployment's settings (same key Secret, same intervals)."""
    settings = {
        e.name: e.value
        for e in operator_deployment(cluster).spec.template.spec.containers[0].env
        if e.name.startswith("KUBETUNE_OPERATOR_") and e.name not in HOST_SETTINGS and e.value is not None
    }
    operator = OperatorProcess(cluster, log, **settings)
    operator.start()
    return operator


def collector_load(cluster: Cluster, args) -> list[dict]:
    """The three slices (pod, host process, pod again) against one Experiment; returns their figures."""
    core = client.CoreV1Api(cluster.api_client())
    install.install(cluster, timeout_s=300)  # as `python -m devcluster up --real-node` installs it
    pid, cgroup = operator_pod_cgroup(core)
    feeds = feeds_of(cluster, core, args.trials)
    service = core.read_namespaced_service(f"{install.RELEASE}-operator", OPERATOR_NAMESPACE)
    port = next(p.port for p in service.spec.ports if p.name == "collector")
    pod_url = f"http://{service.spec.cluster_ip}:{port}{COLLECTOR_RESULTS_PATH}"
    runs = [measure_operator("pod", pid, pod_url, feeds, cgroup, args)]
    set_replicas(cluster, 0)
    operator = process_operator(cluster, cluster.workdir / "host-operator.log")
    try:
        process_url = f"{operator.url}{COLLECTOR_RESULTS_PATH}"
        runs.append(measure_operator("process", operator.proc.pid, process_url, feeds, None, args))
    finally:
        operator.stop()
    set_replicas(cluster, 1)
    pid, cgroup = operator_pod_cgroup(core)
    runs.append(measure_operator("pod again", pid, pod_url, feeds, cgroup, args))
    return runs


#: The work of one trial in the ``overhead`` phase, the same on both sides: 4 results, 0.5 s apart.
OVERHEAD_EPOCHS, OVERHEAD_SLEEP_S = 4, 0.5
_FUNCTION = f"""
import time
import kubetune

def train(config):
    for epoch in range(1, {OVERHEAD_EPOCHS} + 1):
        time.sleep({OVERHEAD_SLEEP_S})
        kubetune.report({{"loss": config["lr"] / epoch}})
"""
_SCRIPT = f"""
import sys, time
lr = float(sys.argv[1])
for epoch in range(1, {OVERHEAD_EPOCHS} + 1):
    time.sleep({OVERHEAD_SLEEP_S})
    print(f"epoch {{epoch}}: loss={{lr / epoch}}", flush=True)
"""


def overhead_experiment(cluster: Cluster, name: str, image: str, container: bool, trials: int) -> dict:
    """``trials`` trials of the same work, two at a time: a container trial running a plain script whose lines the
    operator reads, or a runtime trial running a function that reports through the collector."""
    trainable = (
        {"command": ["python", "-c", _SCRIPT], "args": ["${config.lr}"]}
        if container
        else {"source": _FUNCTION, "name": "train"}
    )
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "trainable": trainable,
            "image": image,
            "config": {"lr": {"uniform": [0.1, 1.0]}},
            "numSamples": trials,
            "maxConcurrentTrials": 2,
            "metric": "loss",
            "mode": "min",
            "resourcesPerTrial": {"cpu": "250m", "memory": "256Mi"},
            "storage": {
                "uri": f"s3://{S3_BUCKET}/overhead",
                "endpoint": cluster.s3_endpoint,
                "region": "us-east-1",
                "credentialsSecret": install.CREDENTIALS_SECRET,
            },
        },
    }


def trial_overhead(cluster: Cluster, image: str, trials: int) -> dict[str, dict]:
    """Run the container Experiment and the runtime one in turn (twice, alternating); per side, each trial's
    seconds from its start to its completion beyond the work itself, and each Experiment's makespan."""
    install.install(cluster, timeout_s=300)
    custom = client.CustomObjectsApi(cluster.api_client())
    out: dict[str, dict] = {"container": {"extra": [], "makespan": []}, "runtime": {"extra": [], "makespan": []}}
    work = OVERHEAD_EPOCHS * OVERHEAD_SLEEP_S
    for round_ in range(2):
        for side in ("container", "runtime"):
            name = f"overhead-{side}-{round_}"
            body = overhead_experiment(cluster, name, image, side == "container", trials)
            started = time.monotonic()
            custom.create_namespaced_custom_object("kubetune.io", "v1alpha1", "default", "experiments", body)
            deadline = started + 600
            while time.monotonic() < deadline:
                exp = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", "default", "experiments", name)
                if (exp.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    break
                time.sleep(1)
            out[side]["makespan"].append(time.monotonic() - started)
            items = custom.list_namespaced_custom_object(
                "kubetune.io", "v1alpha1", "default", "trials", label_selector=f"kubetune.io/experiment={name}"
            )["items"]
            for trial in items:
                status = trial.get("status") or {}
                if status.get("phase") != "Succeeded" or status.get("iteration") != OVERHEAD_EPOCHS:
                    raise RuntimeError(f"{trial['metadata']['name']}: {status}")
                spent = parse_time(status["completionTime"]).timestamp() - parse_time(status["startTime"]).timestamp()
                out[side]["extra"].append(spent - work)
    return out


def print_overhead(out: dict[str, dict], trials: int) -> None:
    work = OVERHEAD_EPOCHS * OVERHEAD_SLEEP_S
    for side, figures in out.items():
        extra = figures["extra"]
        print(
            f"overhead, {side} trials ({len(extra)} trials of {work:g} s of work, 2 at a time): seconds beyond the "
            f"work from a trial's start to its completion p50 {pct(extra, 50):.2f}, p99 {pct(extra, 99):.2f}; "
            f"makespan of {trials} trials {statistics.mean(figures['makespan']):.1f} s"
        )
    c, r = out["container"], out["runtime"]
    print(
        f"ratio container / runtime: per-trial overhead p50 {pct(c['extra'], 50) / pct(r['extra'], 50):.2f}x, "
        f"makespan {statistics.mean(c['makespan']) / statistics.mean(r['makespan']):.2f}x"
    )


def print_collector_load(runs: list[dict], args) -> None:
    """The figures of each slice and the ratios pod / host process."""
    print(
        f"{'collector load, ' + str(args.trials) + ' trials':<34}{'results/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'CPU µs/result':>15}{'cores':>7}{'RSS MiB':>9}{'peak MiB':>10}{'throttled':>11}"
    )
    for run in runs:
        for s in run["stats"].values():
            cpu = s.server_cpu * 1e6 / max(s.results, 1)
            throttled = f"{100 * run['throttled']:.0f}%" if "throttled" in run else "-"
            print(
                f"{s.label:<34}{s.results_per_s:>10.0f}{s.percentile(50):>9.1f}{s.percentile(99):>9.1f}"
                f"{cpu:>15.0f}{s.server_cpu / s.duration:>7.2f}{run['VmRSS'] / 1024:>9.0f}"
                f"{run['VmHWM'] / 1024:>10.0f}{throttled:>11}"
            )
    pods, process = [r for r in runs if "throttled" in r], next(r for r in runs if "throttled" not in r)
    for mode in ("saturated", "paced"):
        base = process["stats"][mode]
        mine = [r["stats"][mode] for r in pods]
        cpu = statistics.mean(s.server_cpu / max(s.results, 1) for s in mine) / (base.server_cpu / max(base.results, 1))
        print(
            f"ratio pod / host process, {mode}: results/s "
            f"{statistics.mean(s.results_per_s for s in mine) / base.results_per_s:.2f}, CPU per result {cpu:.2f}, "
            f"p99 {statistics.mean(s.percentile(99) for s in mine) / base.percentile(99):.2f}"
        )
    print(
        f"ratio pod / host process, peak RSS: {statistics.mean(r['VmHWM'] for r in pods) / process['VmHWM']:.2f}; "
        f"non-200 replies: {sum((s.errors for r in runs for s in r['stats'].values()), collections.Counter())}"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument(
        "--phases",
        default="pods,collector",
        help="pods (start latencies), collector (load), overhead (container trials against runtime trials)",
    )
    parser.add_argument("--overhead-trials", type=int, default=8, help="trials of each overhead Experiment")
    parser.add_argument("--trials", type=int, default=1000, help="trials of the collector load's Experiment")
    parser.add_argument("--rate", type=float, default=2000, help="results/s offered in the paced slices")
    parser.add_argument("--duration", type=float, default=20, help="measured seconds of each slice")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections of the load")
    args = parser.parse_args()
    phases = set(args.phases.split(","))

    last_build = {}
    log = images.images_dir() / "builds.jsonl"
    if log.is_file():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            last_build[entry["step"]] = entry["seconds"]
    started = time.monotonic()
    built = images.build_images()
    cached_s = time.monotonic() - started

    results, runs, overhead = {}, [], None
    nodes = (
        ("process kubelet", ClusterConfig(nodes=1, node_pods=args.pods + 10)),
        ("real node", ClusterConfig(real_node=True, gpus_per_node=0)),
    )
    for label, config in nodes if "pods" in phases else nodes[1:]:
        with Cluster(config) as cluster:
            for one_at_a_time in (True, False) if "pods" in phases else ():
                mode = "one at a time" if one_at_a_time else "burst, 20 ms apart"
                latencies = pod_start_latencies(cluster, built["runtime"].ref, args.pods, one_at_a_time)
                results[label, mode] = latencies
                print(
                    f"{label}, {mode}: created -> running, {len(latencies)}/{args.pods} pods: "
                    f"p50 {1000 * pct(latencies, 50):.0f} ms, p99 {1000 * pct(latencies, 99):.0f} ms",
                    flush=True,
                )
                time.sleep(10)  # the deleted pods' containers go before the next round
            if cluster.node is not None and "collector" in phases:
                runs = collector_load(cluster, args)
            if cluster.node is not None and "overhead" in phases:
                overhead = trial_overhead(cluster, built["runtime"].ref, args.overhead_trials)
    for mode in ("one at a time", "burst, 20 ms apart") if "pods" in phases else ():
        real, proc = results["real node", mode], results["process kubelet", mode]
        print(
            f"ratio real node / process kubelet, {mode}: p50 {pct(real, 50) / pct(proc, 50):.1f}x, "
            f"p99 {pct(real, 99) / pct(proc, 99):.1f}x"
        )
    if runs:
        print_collector_load(runs, args)
    if overhead:
        print_overhead(overhead, args.overhead_trials)
    for name, image in built.items():
        print(
            f"image {name}: {image.archive.stat().st_size / 2**20:.1f} MiB (docker archive), "
            f"last build {last_build.get(name, '?')} s (build log)"
        )
    print(f"base image build: {last_build.get('base', '?')} s; all again with an unchanged tree: {cached_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
