"""kubetune on a real node: the chart's operator pod and trial containers from images built here.

What the process kubelet cannot show: images and their users, ``restricted`` Pod Security enforced
by the kubelet, read-only root filesystems, the memory limit's OOM kill, image pulls that fail,
Service networking and DNS between trial pods and the operator, and ``kubectl logs`` from the
kubelet. The digits example runs through both user paths: ``kubectl apply`` of its manifest and
``tune.run`` with a cloudpickled trainable.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from devcluster.cluster import S3_BUCKET
from devcluster.realnode import NODE_NAME
from devcluster.testkit import wait_for
from kubetune.callback import Callback
from tests.integration.support import trial_prefix
from tests.integration.trainables import Counter
from tests.realnode.conftest import SYSTEM, experiment_status, wait_finished

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "kubetune.io", "v1alpha1"


def trials_of(custom, namespace: str, experiment: str) -> dict[str, dict]:
    items = custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "trials", label_selector=f"kubetune.io/experiment={experiment}"
    )["items"]
    return {t["metadata"]["name"]: t.get("status") or {} for t in items}


def keys(s3, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_the_node_runs_the_charts_operator_in_its_image_under_restricted_settings(node_cluster, core, release):
    node = core.read_node(NODE_NAME)
    assert node.status.allocatable["nvidia.com/gpu"] == "2"  # from the device plugin, through the device manager
    assert node.status.node_info.container_runtime_version.startswith("containerd://2.")
    (pod,) = [p for p in core.list_namespaced_pod(SYSTEM).items if p.status.phase == "Running"]
    (container,) = pod.status.container_statuses
    assert container.ready and container.image.endswith(node_cluster.node.image("operator").split("/", 1)[1])
    assert (
        pod.spec.security_context.run_as_non_root and pod.spec.containers[0].security_context.read_only_root_filesystem
    )
    # admitted where "restricted" is enforced: no privilege escalation, no capabilities, RuntimeDefault seccomp
    assert core.read_namespace(SYSTEM).metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    context = pod.spec.containers[0].security_context
    assert context.allow_privilege_escalation is False and context.capabilities.drop == ["ALL"]
    # the kubelet serves the operator's log to kubectl
    logs = node_cluster.kubectl("logs", "-n", SYSTEM, pod.metadata.name).stdout
    assert "collector listening on 0.0.0.0:8080" in logs, logs[-2000:]


def test_the_digits_manifest_runs_to_succeeded_in_containers_reporting_through_the_service(
    node_cluster, core, custom, s3, team
):
    manifest = yaml.safe_load((ROOT / "examples" / "digits" / "experiment.yaml").read_text())
    spec = manifest["spec"]
    spec.update(numSamples=4, maxConcurrentTrials=2, stop={"training_iteration": 4})
    spec["checkpoint"]["frequency"] = 2
    spec["resourcesPerTrial"] = {"cpu": "500m", "memory": "512Mi", "gpu": 1}
    spec["storage"]["endpoint"] = node_cluster.s3_endpoint
    node_cluster.kubectl("apply", "-n", team, "-f", "-", input=yaml.safe_dump(manifest))

    # a running trial's log comes from the kubelet, as for any pod
    pod = wait_for(
        lambda: next((p for p in core.list_namespaced_pod(team).items if p.status.phase == "Running"), None),
        timeout=180,
        interval=0.5,
        what="a running trial pod",
    )
    assert pod.spec.containers[0].image == node_cluster.node.image("examples")
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"

    def logged():  # the runtime's first line, read from the kubelet as for any pod
        for p in core.list_namespaced_pod(team).items:
            out = node_cluster.kubectl("logs", "-n", team, p.metadata.name, check=False).stdout
            if f"trial {team}/digits/" in out:
                return out
        return None

    wait_for(logged, timeout=120, interval=0.5, what="a trial pod's log through kubectl logs")
    status = wait_finished(custom, team, "digits", timeout=420)
    assert status["phase"] == "Succeeded", status
    trials = trials_of(custom, team, "digits")
    assert len(trials) == 4 and all(t["phase"] == "Succeeded" for t in trials.values()), trials
    assert all(t["lastResult"]["training_iteration"] == 4 for t in trials.values())
    assert 0.5 < status["bestTrial"]["metricValue"] <= 1.0, status["bestTrial"]
    stored = keys(s3, f"experiments/{team}/digits/")
    assert any("/checkpoint_" in k for k in stored), stored[:20]
    assert any("events.out.tfevents" in k for k in stored), stored[:20]


def test_a_config_at_the_size_limit_reaches_the_trial_container_whole(node_cluster, custom, s3, team):
    """A config of exactly the limit kubetune states (192 KiB as compact JSON), over Linux's 128 KiB for one
    environment string: it travels in the attempt's Secret volume."""
    from kubetune.limits import MAX_FIELD_BYTES, SpecTooLarge, check_spec_sizes, json_size

    manifest = yaml.safe_load((ROOT / "examples" / "digits" / "experiment.yaml").read_text())
    manifest["metadata"]["name"] = "bigconfig"
    spec = manifest["spec"]
    spec["config"]["blob"] = ""  # DigitsTrainable ignores keys it does not know
    blob = "x" * (MAX_FIELD_BYTES - json_size(spec["config"]))
    spec["config"]["blob"] = blob
    assert json_size(spec["config"]) == MAX_FIELD_BYTES
    with pytest.raises(SpecTooLarge):  # one byte more is refused
        check_spec_sizes({"config": {**spec["config"], "blob": blob + "x"}})
    spec.update(numSamples=1, stop={"training_iteration": 1})
    spec["resourcesPerTrial"] = {"cpu": "250m", "memory": "512Mi"}
    spec["storage"]["endpoint"] = node_cluster.s3_endpoint
    node_cluster.kubectl("apply", "--server-side", "-n", team, "-f", "-", input=yaml.safe_dump(manifest))
    status = wait_finished(custom, team, "bigconfig", timeout=240)
    assert status["phase"] == "Succeeded", status
    (name,) = trials_of(custom, team, "bigconfig")
    key = f"{trial_prefix(s3, S3_BUCKET, 'experiments', team, 'bigconfig', name)}/result.json"
    first = json.loads(s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read().decode().splitlines()[0])
    assert first["config"]["blob"] == blob


def _allocate(config):
    """Allocates ``config["mib"]`` MiB, reporting after each 16 MiB (runs in the trial's container)."""
    import kubetune

    held = []
    for i in range(config["mib"] // 16):
        held.append(bytearray(16 * 2**20))
        kubetune.report({"score": float(i)})


def _writes(config):
    """Writes where a program may on a read-only root: /tmp and $HOME; reports whether / refused."""
    import kubetune

    Path("/tmp/scratch.txt").write_text("ok")
    home = Path(os.environ["HOME"])
    (home / ".cache").mkdir(parents=True, exist_ok=True)
    (home / ".cache" / "x").write_text("ok")
    try:
        Path("/app/not-allowed").write_text("x")
        refused = 0.0
    except OSError:
        refused = 1.0
    kubetune.report({"score": 1.0, "root_refused": refused, "uid": float(os.getuid())})


def _run(fn, namespace: str, name: str, cluster, **kwargs):
    import kubetune as tune

    return tune.run(
        fn,
        name=name,
        namespace=namespace,
        storage={
            "uri": f"s3://{S3_BUCKET}/sdk",
            "endpoint": cluster.s3_endpoint,
            "region": "us-east-1",
            "credentialsSecret": "s3-creds",
        },
        verbose=0,
        raise_on_failed_trial=False,
        **kwargs,
    )


def _run_in_background(fn, namespace: str, name: str, cluster, **kwargs):
    """:func:`_run` in a thread: return the thread, started, and the dict that gets ``analysis`` or ``error``."""
    outcome = {}

    def run():
        try:
            outcome["analysis"] = _run(fn, namespace, name, cluster, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the caller asserts on it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _climb(config):
    import kubetune

    for step in range(1, 4):
        kubetune.report({"score": config["x"] * step})


class _Calls(Callback):
    """Writes one object per ``on_trial_result`` call, and one at ``on_experiment_end``, under ``where``."""

    def __init__(self, where: str):
        self.where = where

    def setup(self, **info):
        from kubetune.storage import open_storage

        self.storage = open_storage(self.where)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        body = json.dumps({"score": result["score"], "uid": os.getuid()}).encode()
        self.storage.put_bytes(f"{self.where}/{trial.trial_id}-{result['training_iteration']}.json", body)

    def on_experiment_end(self, trials, **info):
        self.storage.put_bytes(f"{self.where}/end.json", json.dumps(sorted(t.trial_id for t in trials)).encode())


def test_callbacks_run_in_the_driver_pod_in_the_image_under_restricted_settings(
    node_cluster, core, custom, s3, team, sdk_env
):
    """The driver pod from the runtime image on containerd: admitted where ``restricted`` is enforced, its root
    read-only and no service-account token, it reaches the operator's collector through the Service and the
    storage from its network, and its callback's calls are all made before ``tune.run`` returns."""
    prefix = f"driver-calls/{team}"
    analysis = _run(
        _climb,
        team,
        "called",
        node_cluster,
        config={"x": {"grid_search": [1, 2]}},
        metric="score",
        mode="max",
        callbacks=[_Calls(f"s3://{S3_BUCKET}/{prefix}")],
    )
    trials = sorted(t.trial_id for t in analysis.trials)
    expected = sorted([f"{prefix}/{t}-{step}.json" for t in trials for step in (1, 2, 3)] + [f"{prefix}/end.json"])
    assert sorted(keys(s3, prefix + "/")) == expected
    ended = json.loads(s3.get_object(Bucket=S3_BUCKET, Key=f"{prefix}/end.json")["Body"].read())
    assert ended == trials
    first = json.loads(s3.get_object(Bucket=S3_BUCKET, Key=f"{prefix}/{trials[0]}-1.json")["Body"].read())
    assert first["uid"] == 1000  # the chart's trials.runAsUser, as a trial pod's
    pod = core.read_namespaced_pod("called-driver-0", team)
    assert pod.status.phase == "Succeeded" and pod.spec.automount_service_account_token is False
    assert pod.spec.security_context.run_as_non_root
    assert pod.spec.containers[0].security_context.read_only_root_filesystem
    assert experiment_status(custom, team, "called")["phase"] == "Succeeded"


def test_a_trial_over_its_memory_limit_is_oomkilled_and_retried(node_cluster, custom, team, sdk_env):
    started = time.monotonic()
    _run(
        _allocate,
        team,
        "oom",
        node_cluster,
        config={"mib": 512},
        resources_per_trial={"cpu": "500m", "memory": "160Mi"},
        max_failures=1,
    )
    print(f"\n[realnode] OOM experiment to its end: {time.monotonic() - started:.1f} s")
    (trial,) = trials_of(custom, team, "oom").values()
    assert trial["phase"] == "Failed" and trial["reason"] == "OOMKilled", trial
    assert trial["failures"] == 2 and trial["attempt"] == 1, trial  # retried once, per max_failures=1
    assert "OOMKilled" in trial.get("message", "") or "memory" in trial.get("message", "").lower(), trial


def test_a_trial_on_a_read_only_root_writes_to_tmp_and_home(node_cluster, custom, team, sdk_env):
    _run(_writes, team, "rootfs", node_cluster, config={})
    (trial,) = trials_of(custom, team, "rootfs").values()
    assert trial["phase"] == "Succeeded", trial
    result = trial["lastResult"]
    assert result["root_refused"] == 1.0 and result["uid"] == 1000.0, result


def test_an_image_that_does_not_exist_is_the_trials_pending_cause(node_cluster, custom, core, team):
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": "noimage"},
        "spec": {
            "trainable": {"entrypoint": "examples.digits.trainable:DigitsTrainable"},
            "image": "docker.io/kubetune/does-not-exist:0",
            "config": {"lr": 0.01},
            "metric": "mean_accuracy",
            "mode": "max",
            "storage": {"uri": f"s3://{S3_BUCKET}/noimage", "endpoint": node_cluster.s3_endpoint},
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)

    def waiting():
        conditions = {c["type"]: c for c in experiment_status(custom, team, "noimage").get("conditions", [])}
        cond = conditions.get("TrialsWaiting")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(waiting, timeout=120, interval=1, what="TrialsWaiting on the Experiment")
    assert cond["reason"] in ("ErrImagePull", "ImagePullBackOff"), cond
    (trial,) = trials_of(custom, team, "noimage").values()
    assert trial["phase"] == "Pending" and trial["reason"] in ("ErrImagePull", "ImagePullBackOff"), trial
    assert "does-not-exist" in trial["message"], trial
    events = core.list_namespaced_event(team).items
    assert any(e.reason == "TrialWaiting" and "does-not-exist" in e.message for e in events)


def result_lines(s3, root: str, namespace: str, experiment: str, trial: str) -> list[dict]:
    key = f"{trial_prefix(s3, S3_BUCKET, root, namespace, experiment, trial)}/result.json"
    body = s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def result_iterations(s3, root: str, namespace: str, experiment: str, trial: str) -> list[int]:
    return [line["training_iteration"] for line in result_lines(s3, root, namespace, experiment, trial)]


def operator_pod(core):
    pods = [
        p
        for p in core.list_namespaced_pod(SYSTEM).items
        if p.status.phase == "Running" and not p.metadata.deletion_timestamp
    ]
    return pods[0] if len(pods) == 1 and all(c.ready for c in pods[0].status.container_statuses or []) else None


STEPS = 45


def test_trials_end_once_across_kubelet_and_containerd_restarts_a_new_operator_pod_and_a_drain(
    node_cluster, core, custom, s3, team, sdk_env
):
    """A cloudpickled class trainable (1 s a step, a checkpoint each step) through ``tune.run``, while the
    node's kubelet and containerd restart, the operator's pod is deleted, and the node is drained."""
    runner, outcome = _run_in_background(
        Counter,
        team,
        "faults",
        node_cluster,
        config={"x": 1, "sleep": 1.0},
        num_samples=2,
        stop={"training_iteration": STEPS},
        checkpoint_freq=1,
        resources_per_trial={"cpu": "250m", "memory": "256Mi", "gpu": 1},
    )

    def progressed(at_least: int):
        trials = trials_of(custom, team, "faults")
        its = [(t.get("lastResult") or {}).get("training_iteration", 0) for t in trials.values()]
        return len(its) == 2 and min(its) >= at_least and its

    base = wait_for(lambda: progressed(2), timeout=240, interval=1, what="both trials past iteration 2")
    node_cluster.node.restart("kubelet")  # containers keep running; the kubelet finds them again
    node_cluster.node.restart("containerd")  # shims keep the containers; containerd reconnects
    wait_for(lambda: progressed(max(base) + 2), timeout=120, interval=1, what="trials reporting after the restarts")

    old = operator_pod(core)
    core.delete_namespaced_pod(old.metadata.name, SYSTEM)  # the Deployment makes a new one
    wait_for(
        lambda: (p := operator_pod(core)) is not None and p.metadata.uid != old.metadata.uid,
        timeout=180,
        interval=1,
        what="a new operator pod, Ready",
    )
    mid = wait_for(
        lambda: progressed(max(base) + 4), timeout=180, interval=1, what="trials reporting to the new operator"
    )
    assert max(mid) < STEPS - 5, mid  # the drain below still finds both trials running

    # a drain evicts everything on the only node, the operator too; uncordoned, all comes back
    node_cluster.kubectl(
        "drain", NODE_NAME, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s", "--grace-period=20"
    )
    node_cluster.kubectl("uncordon", NODE_NAME)
    runner.join(timeout=600)
    assert not runner.is_alive() and "error" not in outcome, outcome
    status = experiment_status(custom, team, "faults")
    assert status["phase"] == "Succeeded", status
    for name, trial in trials_of(custom, team, "faults").items():
        assert trial["phase"] == "Succeeded" and trial.get("failures", 0) == 0, trial  # disruptions are not failures
        assert trial["attempt"] >= 1, trial  # the drain evicted it: resumed from its checkpoint in a new pod
        assert result_iterations(s3, "sdk", team, "faults", name) == list(range(1, STEPS + 1)), name


MAX_T = 6


def test_a_sigkilled_operator_container_stops_the_trials_an_uninterrupted_asha_stops(
    node_cluster, core, custom, s3, team, sdk_env
):
    """The fault suite's rule on the real node: the chart's operator container is SIGKILLed through containerd
    twice while ASHA runs trials one at a time (a cloudpickled trainable through ``tune.run``), and the kubelet
    restarts it in its pod. Every trial ends once with every iteration run once, ASHA stops exactly the trials
    it stops when fed the same results uninterrupted, and the scheduler a restarted operator rebuilds from the
    journal knows what the uninterrupted one knows."""
    import kubetune as tune
    from kubetune_operator.algorithms import create_scheduler
    from kubetune_operator.status import compact_result
    from tests.integration.test_faults import operator_scheduler

    params = {"time_attr": "training_iteration", "grace_period": 1, "reduction_factor": 2, "max_t": MAX_T}
    xs = [3, 1, 4, 2, 6, 5, 0.5]
    runner, outcome = _run_in_background(
        Counter,
        team,
        "storm",
        node_cluster,
        config={"x": tune.grid_search(xs), "sleep": 0.4},
        metric="score",
        mode="max",
        scheduler=tune.schedulers.ASHAScheduler(**params),
        max_concurrent_trials=1,
        stop={"training_iteration": MAX_T},
        resources_per_trial={"cpu": "250m", "memory": "256Mi"},
    )
    kills = 0
    for trials_seen in (2, 4):  # once the second trial reports, once the fourth does
        wait_for(
            lambda: sum(1 for t in trials_of(custom, team, "storm").values() if t.get("lastResult")) >= trials_seen,
            timeout=240,
            interval=0.5,
            what=f"{trials_seen} trials reporting",
        )
        pod = operator_pod(core)
        assert pod is not None
        restarts = pod.status.container_statuses[0].restart_count
        node_cluster.node.kill_container(pod.status.container_statuses[0].container_id)
        kills += 1
        wait_for(  # the kubelet restarts it in place (after its crash-loop back-off: 10 s, then 20 s)
            lambda: (p := operator_pod(core)) is not None and p.status.container_statuses[0].restart_count > restarts,
            timeout=120,
            interval=0.5,
            what="the operator container restarted and Ready",
        )
    runner.join(timeout=600)
    assert not runner.is_alive() and "error" not in outcome, outcome
    assert kills == 2 and experiment_status(custom, team, "storm")["phase"] == "Succeeded"
    found = custom.list_namespaced_custom_object(
        GROUP, VERSION, team, "trials", label_selector="kubetune.io/experiment=storm"
    )["items"]
    assert len(found) == len(xs)
    replay = create_scheduler("asha", "score", "max", **params)
    stops = 0
    for trial in sorted(found, key=lambda t: t["spec"]["index"]):
        name, status = trial["metadata"]["name"], trial["status"]
        replay.on_trial_add(name)
        lines = result_lines(s3, "sdk", team, "storm", name)
        assert [r["training_iteration"] for r in lines] == list(range(1, len(lines) + 1)), name  # each once
        decisions = []  # none of a trial's results after its stop reaches ASHA (its pod may train on, unheard)
        for r in lines:
            if r["training_iteration"] >= MAX_T or "stop" in decisions:
                break
            decisions.append(replay.on_trial_result(name, r))
        stops += "stop" in decisions
        if status["reason"] == "EarlyStopped":
            assert "stop" in decisions, (name, decisions)  # never stopped by a decision ASHA would not make
            replay.on_trial_remove(name)
        else:  # a trial may end before a stop reaches it (it trains on while the operator is down)
            assert status["reason"] == "Completed" and len(lines) == MAX_T, (name, status)
            final = lines[len(decisions) - 1] if "stop" in decisions else lines[-1]  # the result it was stopped at
            replay.on_trial_complete(name, compact_result(final, "score"))
    assert stops >= 2  # ASHA had decisions to make
    rebuilt = operator_scheduler(custom, core, team, "storm")
    assert json.dumps(rebuilt.get_state(), sort_keys=True) == json.dumps(replay.get_state(), sort_keys=True)


def test_the_digits_example_runs_through_tune_run_and_its_best_checkpoint_reproduces(
    node_cluster, custom, team, sdk_env
):
    from examples.digits.tune_digits import report, tune_digits

    storage = {
        "uri": f"s3://{S3_BUCKET}/sdk",
        "endpoint": node_cluster.s3_endpoint,
        "region": "us-east-1",
        "credentialsSecret": "s3-creds",
    }
    started = time.monotonic()
    analysis = tune_digits(namespace=team, storage=storage, name="tune-digits")
    print(f"\n[realnode] the digits example through tune.run: {time.monotonic() - started:.1f} s")
    assert experiment_status(custom, team, "tune-digits")["phase"] == "Succeeded"
    assert report(analysis) > 0.9  # the best checkpoint, downloaded and restored here, scores as reported


def test_helm_upgrade_to_a_new_operator_image_while_trials_run_then_uninstall(
    node_cluster, core, custom, helm, values_file, team, sdk_env, tmp_path
):
    """The operator image rebuilt by buildah (another image ID) and loaded into the node; ``helm upgrade`` to it
    while a trial runs: the trial keeps reporting across the operator's replacement (its collector key survives);
    ``helm uninstall`` then removes every operator object and leaves the Experiment and its Trials."""
    from devcluster import images
    from tests.realnode.conftest import CHART, RELEASE, chart_values

    node = node_cluster.node
    current = wait_for(lambda: operator_pod(core), timeout=120, interval=1, what="the operator pod Ready")
    old = current.status.container_statuses[0].image_id
    rebuilt = images.rebuild(node.images["operator"], f"upgrade-{uuid.uuid4().hex[:8]}", tmp_path)
    images.load_images({"operator": rebuilt}, node.bins["ctr"], node.socket)
    upgraded = rebuilt.ref
    runner, outcome = _run_in_background(
        Counter,
        team,
        "upgrade",
        node_cluster,
        config={"x": 1, "sleep": 1.0},
        stop={"training_iteration": 30},
        checkpoint_freq=5,
        resources_per_trial={"cpu": "250m", "memory": "256Mi"},
    )
    wait_for(
        lambda: [
            t
            for t in trials_of(custom, team, "upgrade").values()
            if (t.get("lastResult") or {}).get("training_iteration", 0) >= 3
        ],
        timeout=180,
        interval=1,
        what="the trial running",
    )
    values = tmp_path / "upgrade.yaml"
    values.write_text(yaml.safe_dump(chart_values(node_cluster, upgraded)))
    helm.run("upgrade", RELEASE, str(CHART), "-n", SYSTEM, "-f", str(values), "--wait", "--timeout", "180s")
    pod = wait_for(lambda: operator_pod(core), timeout=120, interval=1, what="the upgraded operator pod")
    assert pod.spec.containers[0].image == upgraded and pod.status.container_statuses[0].image_id != old
    runner.join(timeout=300)
    assert not runner.is_alive() and "analysis" in outcome, outcome
    (trial,) = trials_of(custom, team, "upgrade").values()
    assert trial["phase"] == "Succeeded" and trial["attempt"] == 0 and not trial.get("failures"), trial

    helm.run("uninstall", RELEASE, "-n", SYSTEM, "--wait", "--timeout", "120s")
    assert wait_for(lambda: not core.list_namespaced_pod(SYSTEM).items, timeout=120, what="no operator pod")
    for kind in ("services", "secrets", "serviceaccounts"):
        left = node_cluster.kubectl(
            "get", kind, "-n", SYSTEM, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name"
        )
        assert not left.stdout.strip(), (kind, left.stdout)
    assert experiment_status(custom, team, "upgrade")["phase"] == "Succeeded"  # the CRDs and Experiments stay
