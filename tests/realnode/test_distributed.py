"""Trials that are gangs of pods on the real node (``pytest -m distributed``; ``make test`` runs them with the
real-node suite): the headless Service's DNS names and the rendezvous variables carry a real exchange between
the pods, a worker killed mid-run restarts the whole gang from its checkpoint, the scheduler's gang scheduling
(the devcluster enables it) never binds part of a gang that cannot fit, and no more pods run than the gangs
admitted.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from tests.realnode.conftest import wait_finished
from tests.realnode.test_realnode import GROUP, VERSION, _run, result_lines, trials_of

pytestmark = pytest.mark.distributed
ROOT = Path(__file__).resolve().parents[2]

#: A data-parallel step without a collective library: every rank sends its share to rank 0 over TCP
#: (MASTER_ADDR:MASTER_PORT, the gang's DNS name), rank 0 sums and sends the sum back, as an all-reduce does.
SOURCE = """
import json, os, socket, tempfile, time
import kubetune


def _connect(host, port, deadline):
    while True:
        try:
            return socket.create_connection((host, port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _lines(sock):
    buffer = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("the peer went away")
        buffer += chunk
        while b"\\n" in buffer:
            line, buffer = buffer.split(b"\\n", 1)
            yield json.loads(line)


def train(config):
    ctx = kubetune.get_context()
    rank, size = ctx.get_world_rank(), ctx.get_world_size()
    start = 0
    checkpoint = kubetune.get_checkpoint()
    if checkpoint:
        with open(os.path.join(checkpoint.path, "step.json")) as f:
            start = json.load(f)["step"]
    deadline = time.monotonic() + 180
    port = int(os.environ["MASTER_PORT"])
    if rank == 0:
        server = socket.create_server(("0.0.0.0", port))
        server.settimeout(180)
        peers = [server.accept()[0] for _ in range(size - 1)]
        readers = [_lines(p) for p in peers]
    else:
        peer = _connect(os.environ["MASTER_ADDR"], port, deadline)
        reader = _lines(peer)
    for step in range(start + 1, config["steps"] + 1):
        time.sleep(config["step_s"])
        share = (rank + 1) * step
        if rank == 0:
            total = share + sum(next(r)["share"] for r in readers)
            for p in peers:
                p.sendall(json.dumps({"total": total}).encode() + b"\\n")
        else:
            peer.sendall(json.dumps({"share": share}).encode() + b"\\n")
            total = next(reader)["total"]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.json"), "w") as f:
                json.dump({"step": step}, f)
            kubetune.report(
                {"allreduced": total, "world": size, "host": os.environ.get("MASTER_ADDR", "")},
                checkpoint=kubetune.Checkpoint.from_directory(d),
            )
"""


def gang_experiment(node_cluster, name, *, steps, replicas=2, worker_cpu="100m", samples=1, **spec):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "trainable": {"source": SOURCE, "name": "train"},
            "config": {"steps": steps, "step_s": 1.0},
            "numSamples": samples,
            "maxConcurrentTrials": 1,
            "metric": "allreduced",
            "mode": "max",
            "failure": {"maxFailures": 0},
            "resourcesPerTrial": {
                "cpu": "100m",
                "memory": "256Mi",
                "workers": {"replicas": replicas, "cpu": worker_cpu, "memory": "256Mi"},
            },
            "storage": {
                "uri": f"s3://{S3_BUCKET}/gangs",
                "endpoint": node_cluster.s3_endpoint,
                "credentialsSecret": "s3-creds",
            },
            **spec,
        },
    }


def expected_total(step: int, size: int) -> int:
    return sum((rank + 1) * step for rank in range(size))


class PodCount:
    """Samples the Experiment's pods that hold resources (Pending or Running) every 0.2 s, in a thread."""

    def __init__(self, core, namespace, experiment):
        self.core, self.namespace, self.experiment = core, namespace, experiment
        self.most, self.bound_most, self._stop = 0, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _run(self):
        while not self._stop.wait(0.2):
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=f"kubetune.io/experiment={self.experiment}"
            ).items
            holding = [p for p in pods if p.status.phase in ("Pending", "Running")]
            self.most = max(self.most, len(holding))
            self.bound_most = max(self.bound_most, sum(1 for p in holding if p.spec.node_name))


def test_a_gangs_pods_exchange_values_over_its_service_and_only_rank_0_reports(node_cluster, core, custom, s3, team):
    started = time.monotonic()
    with PodCount(core, team, "gang") as count:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, team, "experiments", gang_experiment(node_cluster, "gang", steps=4, samples=2)
        )
        status = wait_finished(custom, team, "gang", timeout=420)
    print(f"\n[realnode] two gangs of 3 pods, 4 steps each, one after the other: {time.monotonic() - started:.1f} s")
    assert status["phase"] == "Succeeded", status
    for name, trial in trials_of(custom, team, "gang").items():
        assert trial["phase"] == "Succeeded" and trial["gang"]["total"] == 3, trial
        lines = result_lines(s3, "gangs", team, "gang", name)
        assert [line["training_iteration"] for line in lines] == [1, 2, 3, 4]  # rank 0's reports only
        assert [line["allreduced"] for line in lines] == [expected_total(s, 3) for s in (1, 2, 3, 4)]
        assert lines[0]["host"].startswith("rank-0.g-") and lines[0]["host"].endswith(f".{team}.svc")
    assert count.most <= 3, count.most  # one gang at a time (maxConcurrentTrials 1), never the next beside it
    services = core.list_namespaced_service(team, label_selector="kubetune.io/experiment=gang").items
    assert services == []  # each ended attempt's Service went with it


def test_a_worker_killed_mid_run_restarts_the_whole_gang_from_its_checkpoint(node_cluster, core, custom, s3, team):
    custom.create_namespaced_custom_object(
        GROUP, VERSION, team, "experiments", gang_experiment(node_cluster, "kill", steps=12)
    )

    def trial_at(step):
        trials = trials_of(custom, team, "kill")
        return next((t for t in trials.values() if (t.get("iteration") or 0) >= step), None)

    with PodCount(core, team, "kill") as count:
        wait_for(lambda: trial_at(4), timeout=300, interval=0.5, what="the gang at iteration 4")
        killed = time.monotonic()
        core.delete_namespaced_pod("kill-00000-0-w2", team, grace_period_seconds=0)
        status = wait_finished(custom, team, "kill", timeout=420)
    assert status["phase"] == "Succeeded", status
    (trial,) = trials_of(custom, team, "kill").values()
    print(f"\n[realnode] a worker killed at iteration 4: the gang finished {time.monotonic() - killed:.1f} s later")
    assert trial["attempt"] >= 1 and not trial.get("failures"), trial  # a disruption, not a failure
    lines = result_lines(s3, "gangs", team, "kill", "kill-00000")
    assert [line["training_iteration"] for line in lines] == list(range(1, 13))  # continuous from the checkpoint
    assert [line["allreduced"] for line in lines] == [expected_total(s, 3) for s in range(1, 13)]
    assert count.most <= 3, count.most  # the retry waited for the killed attempt's pods to go
    events = [e.message for e in core.list_namespaced_event(team).items if e.reason == "TrialDisrupted"]
    assert any("worker rank 2 (pod kill-00000-0-w2)" in m for m in events), events


def test_a_gang_that_cannot_fit_never_holds_part_of_the_node(node_cluster, core, custom, team):
    body = gang_experiment(node_cluster, "toobig", steps=1, worker_cpu="64")
    custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)
    with PodCount(core, team, "toobig") as count:
        wait_for(
            lambda: len(core.list_namespaced_pod(team, label_selector="kubetune.io/experiment=toobig").items) == 3,
            timeout=120,
            interval=0.5,
            what="the gang's 3 pods",
        )
        time.sleep(20)  # the scheduler has had its chances
    (trial,) = trials_of(custom, team, "toobig").values()
    print(
        f"\n[realnode] a gang that cannot fit: trial {trial.get('phase')}/{trial.get('reason')}: {trial.get('message')}"
    )
    assert count.bound_most == 0, count.bound_most  # not even the head, which would fit alone
    assert trial["phase"] == "Pending" and trial["gang"]["ready"] == 0, trial
    custom.delete_namespaced_custom_object(GROUP, VERSION, team, "experiments", "toobig")


def run_data_parallel(node_cluster, custom, s3, team, name, replicas):
    """examples/distributed/experiment.yaml, shortened, with ``replicas`` workers (0: one pod per trial); return
    ``{lr: (reason, iteration, [mean_accuracy of each iteration, 3 decimals])}`` and the seconds it took."""
    manifest = yaml.safe_load((ROOT / "examples" / "distributed" / "experiment.yaml").read_text())
    manifest["metadata"]["name"] = name
    spec = manifest["spec"]
    spec["config"]["epochs"] = 6
    spec["scheduler"]["params"].update(max_t=6, grace_period=2)
    spec["resourcesPerTrial"] = {"cpu": "250m", "memory": "1Gi"}
    if replicas:
        spec["resourcesPerTrial"]["workers"] = {"replicas": replicas, "cpu": "250m", "memory": "1Gi"}
    spec["storage"]["endpoint"] = node_cluster.s3_endpoint
    started = time.monotonic()
    node_cluster.kubectl("apply", "-n", team, "-f", "-", input=yaml.safe_dump(manifest))
    status = wait_finished(custom, team, name, timeout=600)
    assert status["phase"] == "Succeeded", status
    trials = custom.list_namespaced_custom_object(
        GROUP, VERSION, team, "trials", label_selector=f"kubetune.io/experiment={name}"
    )["items"]
    assert all(t["status"]["lastResult"]["world_size"] == 1 + replicas for t in trials)
    outcome = {}
    for t in trials:
        lines = result_lines(s3, "experiments", team, name, t["metadata"]["name"])
        assert [line["training_iteration"] for line in lines] == list(range(1, t["status"]["iteration"] + 1))
        accuracies = [round(line["mean_accuracy"], 3) for line in lines]
        outcome[t["spec"]["config"]["lr"]] = (t["status"]["reason"], t["status"]["iteration"], accuracies)
    return outcome, time.monotonic() - started


def test_the_data_parallel_example_tuned_with_asha_on_two_pods_trains_the_one_pod_model(node_cluster, custom, s3, team):
    gangs, gang_s = run_data_parallel(node_cluster, custom, s3, team, "dp-gang", replicas=1)
    single, single_s = run_data_parallel(node_cluster, custom, s3, team, "dp-single", replicas=0)
    print(
        f"\n[realnode] data-parallel example, 4 trials, ASHA: 2 pods per trial {gang_s:.1f} s, 1 pod {single_s:.1f} s"
    )
    print(f"[realnode] per lr (reason, iteration, accuracies): gangs {gangs}; single pods {single}")
    assert sorted(gangs) == sorted(single) == [0.05, 0.2, 0.5, 1]
    for lr, (_, iterations, accuracies) in gangs.items():
        _, single_iterations, single_accuracies = single[lr]
        common = min(iterations, single_iterations)
        assert accuracies[:common] == single_accuracies[:common], lr  # the same model, epoch by epoch
        # ASHA decides on the same numbers, so a gang never stops earlier; it may stop later when the operator's
        # answer comes after the runtime's decision wait (the trial trains on, as kubetune.runtime documents)
        assert iterations >= single_iterations, (lr, iterations, single_iterations)
    assert max(max(accuracies) for _, _, accuracies in gangs.values()) > 0.85
    assert any(iteration < 6 for _, iteration, _ in single.values())  # ASHA stopped someone at a rung


def test_an_rllib_style_trainable_gets_its_extra_cpu_workers_as_pods_and_drives_them(
    node_cluster, core, custom, team, sdk_env
):
    from examples.distributed.rollouts import BanditDriver

    started = time.monotonic()
    analysis = _run(
        BanditDriver,
        team,
        "bandit",
        node_cluster,
        config={"num_workers": 1, "episodes_per_worker": 100, "lr": 4.0},
        stop={"training_iteration": 15},
        metric="episode_reward_mean",
        mode="max",
    )
    print(f"\n[realnode] RLlib-style driver with 1 rollout worker pod, 15 steps: {time.monotonic() - started:.1f} s")
    (trial,) = trials_of(custom, team, "bandit").values()
    assert trial["phase"] == "Succeeded" and trial["gang"]["total"] == 2, trial
    assert analysis.best_result["episode_reward_mean"] > 0.3, analysis.best_result
    assert analysis.best_result["best_arm_prob"] > 0.5, analysis.best_result
    spec = custom.get_namespaced_custom_object(GROUP, VERSION, team, "experiments", "bandit")["spec"]
    assert spec["resourcesPerTrial"]["workers"]["replicas"] == 1  # from default_resource_request's extra_cpu
