"""Container trials on the real node (issue 30): Experiments whose trial is the user's image and command, with no
kubetune inside, their results read by the operator from what the container prints.

The images are ``examples/container-trials``' (built by :mod:`devcluster.images`, loaded into the node):
``trial-python`` runs ``mnist.py`` with Debian's python3 alone and logs as Katib's pytorch-mnist example does;
``trial-shell`` has no Python at all, only busybox and ``train.sh``, whose loss is a function of ``--lr`` and the
epoch, so ASHA's decisions on it are known in advance. Each test proves one promise: parameters reach the
user's command in Katib's and kubetune's forms with nothing of kubetune's added to the pod; results stream while
the trial runs, so ASHA stops the trials it should by deleting their pods; a container that exits 0 without
ever printing the objective ends ``MetricMissing``, never a silent success; metrics a file, a push or TensorFlow
event files hold reach the scheduler through the native sidecar, which writes them to the trial's storage folder
too; and a trial whose pod is deleted goes on from
its checkpoint folder as an uninterrupted one would.
"""

from __future__ import annotations

import json
import time

from devcluster.cluster import S3_BUCKET
from kubetune.sdk.analysis import ExperimentAnalysis
from tests.realnode.conftest import wait_finished
from tests.realnode.test_realnode import GROUP, VERSION, trials_of
from tests.unit.test_container_trial_images import metrics

EPOCHS = 4
SHELL_EPOCHS = 6


def experiment(name: str, image: str, cluster, spec: dict) -> dict:
    """An Experiment manifest of a container trial with this suite's storage."""
    storage = {
        "uri": f"s3://{S3_BUCKET}/containers",
        "endpoint": cluster.s3_endpoint,
        "region": "us-east-1",
        "credentialsSecret": "s3-creds",
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {"image": image, "storage": storage, **spec},
    }


def configs_of(custom, namespace: str, name: str) -> dict[str, dict]:
    """``{trial name: its config}`` of the Experiment's Trials."""
    items = custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "trials", label_selector=f"kubetune.io/experiment={name}"
    )["items"]
    return {t["metadata"]["name"]: t["spec"]["config"] for t in items}


def pods_of(core, namespace: str, name: str) -> dict[str, object]:
    """``{trial name: its pod}`` of the Experiment's pods that are still there."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"kubetune.io/experiment={name}").items
    return {p.metadata.owner_references[0].name: p for p in pods}


def shell_loss(lr: float, epoch: int) -> float:
    """What ``train.sh --lr LR`` prints as the loss of ``epoch`` (rounded as it prints it)."""
    return round((1 + 100 * (lr - 0.1) ** 2) / epoch, 4)


def test_a_plain_python_image_runs_katibs_command_with_its_parameters_and_nothing_added(
    node_cluster, core, custom, team
):
    command = ["python3", "/app/mnist.py"]
    args = ["--lr=${trialParameters.lr}", "--momentum", "${config.momentum}", f"--epochs={EPOCHS}"]
    body = experiment(
        "mnist-katib-style",
        node_cluster.node.image("trial-python"),
        node_cluster,
        {
            "trainable": {"command": command, "args": args},
            "metricsCollector": {"kind": "StdOut", "format": "TEXT"},
            "metric": "loss",
            "mode": "min",
            "config": {"lr": {"uniform": [0.01, 0.1]}, "momentum": {"choice": [0.5, 0.9]}},
            "numSamples": 3,
            "maxConcurrentTrials": 3,
            "searchAlgorithm": {"name": "basic", "seed": 30},
            "resourcesPerTrial": {"cpu": "250m", "memory": "256Mi"},  # a request: 3 fit on a 2-core node
            "podRetentionPolicy": {"whenSucceeded": "Retain"},  # the pods are read below
        },
    )
    started = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)
    status = wait_finished(custom, team, "mnist-katib-style", timeout=300)
    print(f"\n[realnode] 3 container trials of mnist.py to Succeeded: {time.monotonic() - started:.1f} s")
    assert status["phase"] == "Succeeded", status

    trials, configs = trials_of(custom, team, "mnist-katib-style"), configs_of(custom, team, "mnist-katib-style")
    pods = pods_of(core, team, "mnist-katib-style")
    assert len(trials) == 3 and set(pods) == set(trials), (trials, list(pods))
    for name, trial in trials.items():
        assert trial["phase"] == "Succeeded" and trial["reason"] == "Completed", trial
        result = trial["lastResult"]
        assert result["training_iteration"] == EPOCHS, result  # one result per epoch's loss line
        pod, config = pods[name], configs[name]
        (container,) = pod.spec.containers
        assert not pod.spec.init_containers  # no sidecar, native or not
        assert container.image == node_cluster.node.image("trial-python")
        assert container.command == command  # never rewritten
        momentum = json.dumps(config["momentum"])
        assert container.args == [f"--lr={json.dumps(config['lr'])}", "--momentum", momentum, f"--epochs={EPOCHS}"]
        assert not [e.name for e in container.env or [] if e.name.startswith("KUBETUNE_")]
        # the kubelet's log holds Katib's lines; the last loss printed is the trial's last result
        log = node_cluster.kubectl("logs", "-n", team, pod.metadata.name).stdout
        losses = [metrics(line)["loss"] for line in log.splitlines() if "\tloss=" in line]
        assert len(losses) == EPOCHS and result["loss"] == losses[-1], (result, log[-2000:])
        assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    assert status["bestTrial"]["metricValue"] == min(t["lastResult"]["loss"] for t in trials.values())


def test_asha_stops_shell_trials_while_they_print_by_deleting_their_pods(node_cluster, custom, team):
    """Four trials one at a time, the best first: ASHA (reduction factor 2) records lr 0.1's loss at iteration 1,
    then every later trial's first loss is worse than the rung's cutoff, so each is stopped there; the script
    sleeps 2 s an epoch, so a stop has 10 s to land before the trial would complete. ``stop_last_trials`` is off:
    a trial that reaches ``max_t`` completes by itself (the script ends there) and is no stop of ASHA's."""
    lrs = [0.1, 0.2, 0.3, 0.4]
    body = experiment(
        "shell-asha",
        node_cluster.node.image("trial-shell"),
        node_cluster,
        {
            "trainable": {
                "command": ["/app/train.sh"],
                "args": ["--lr", "${config.lr}", "--epochs", str(SHELL_EPOCHS), "--sleep", "2"],
            },
            "metricsCollector": {"format": "TEXT", "iterationKey": "epoch"},
            "metric": "loss",
            "mode": "min",
            "config": {"lr": {"grid_search": lrs}},
            "maxConcurrentTrials": 1,
            "scheduler": {
                "name": "asha",
                "params": {
                    "time_attr": "training_iteration",
                    "grace_period": 1,
                    "max_t": SHELL_EPOCHS,
                    "reduction_factor": 2,
                    "stop_last_trials": False,
                },
            },
            "resourcesPerTrial": {"cpu": "100m", "memory": "64Mi"},
        },
    )
    started = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)
    status = wait_finished(custom, team, "shell-asha", timeout=300)
    print(f"\n[realnode] 4 shell trials under ASHA to the end: {time.monotonic() - started:.1f} s")
    assert status["phase"] == "Succeeded", status

    trials, configs = trials_of(custom, team, "shell-asha"), configs_of(custom, team, "shell-asha")
    by_lr = {configs[name]["lr"]: trial for name, trial in trials.items()}
    assert sorted(by_lr) == lrs, by_lr
    best = by_lr[0.1]
    assert best["phase"] == "Succeeded" and best["reason"] == "Completed", best
    assert best["lastResult"]["training_iteration"] == SHELL_EPOCHS
    stopped = [lr for lr, t in by_lr.items() if t["reason"] == "EarlyStopped"]
    assert stopped, by_lr
    for lr, trial in by_lr.items():
        result = trial["lastResult"]
        it = result["training_iteration"]
        assert result["epoch"] == it and result["loss"] == shell_loss(lr, it), (lr, result)  # iterationKey: epoch
        assert trial["phase"] == "Succeeded", (lr, trial)
        if trial["reason"] == "EarlyStopped":
            assert it < SHELL_EPOCHS, (lr, trial)  # stopped while it printed, not after it ended
        else:
            assert trial["reason"] == "Completed" and it == SHELL_EPOCHS, (lr, trial)
    assert status["bestTrial"]["metricValue"] == shell_loss(0.1, SHELL_EPOCHS)


def test_a_container_that_never_prints_the_metric_ends_metric_missing(node_cluster, core, custom, team):
    body = experiment(
        "no-metric",
        node_cluster.node.image("trial-shell"),
        node_cluster,
        {
            "trainable": {"command": ["/app/train.sh"], "args": ["--lr", "${trialParameters.lr}", "--epochs", "0"]},
            "metric": "loss",
            "mode": "min",
            "config": {"lr": 0.1},
            "failure": {"maxFailures": 0},
            "resourcesPerTrial": {"cpu": "100m", "memory": "64Mi"},
            "podRetentionPolicy": {"whenSucceeded": "Retain"},  # its pod Succeeded (exit 0): kept to be read
        },
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)
    wait_finished(custom, team, "no-metric", timeout=180)
    (trial,) = trials_of(custom, team, "no-metric").values()
    assert trial["phase"] == "Failed" and trial["reason"] == "MetricMissing", trial
    assert "loss" in trial.get("message", ""), trial  # it names the metric it never saw
    assert not trial.get("lastResult"), trial
    # the container itself succeeded: only the operator's reading tells this trial from a good one
    (pod,) = pods_of(core, team, "no-metric").values()
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    log = node_cluster.kubectl("logs", "-n", team, pod.metadata.name).stdout
    assert "training with lr 0.1 for 0 epochs" in log and not metrics(log)


RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
#: A container standing in for a service-mesh proxy: it runs until it is killed.
PROXY = {"name": "proxy", "command": ["sleep", "3600"], "securityContext": RESTRICTED}


def test_a_metrics_file_is_read_by_the_native_sidecar_and_a_proxy_beside_the_trial_never_holds_it(
    node_cluster, core, custom, team, monkeypatch
):
    """The shell trial writes its lines to a file (its own redirection), a second container sleeps for an hour as a
    service-mesh proxy would: the trial ends when train.sh ends, its results read from the file by the sidecar,
    which writes them to the trial's storage folder, where the SDK's analysis reads the trial's curve."""
    image = node_cluster.node.image("trial-shell")
    body = experiment(
        "file-metrics",
        image,
        node_cluster,
        {
            "trainable": {
                "command": ["sh", "-c", "/app/train.sh --lr ${config.lr} --epochs 3 --sleep 1 > /var/log/train/m.log"]
            },
            "metricsCollector": {"kind": "File", "path": "/var/log/train/m.log", "iterationKey": "epoch"},
            "metric": "loss",
            "mode": "min",
            "config": {"lr": 0.3},
            "resourcesPerTrial": {"cpu": "100m", "memory": "64Mi"},
            "template": {"containers": [{**PROXY, "image": image}]},
        },
    )
    started = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)
    status = wait_finished(custom, team, "file-metrics", timeout=240)
    assert status["phase"] == "Succeeded", status
    (trial,) = trials_of(custom, team, "file-metrics").values()
    assert (trial["phase"], trial["reason"], trial["iteration"]) == ("Succeeded", "Completed", 3), trial
    assert trial["lastResult"]["loss"] == shell_loss(0.3, 3)
    assert time.monotonic() - started < 180  # not the proxy's hour, nor the grace period of a stuck pod
    env = node_cluster.env()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, env[key])
    analysis = ExperimentAnalysis(
        f"s3://{S3_BUCKET}/containers/{team}/file-metrics", "loss", "min", storage_endpoint=node_cluster.s3_endpoint
    )
    (stored,) = analysis.trials
    assert stored.config == {"lr": 0.3}
    curve = analysis.trial_dataframes[stored.path]
    assert list(curve["training_iteration"]) == [1, 2, 3]
    assert list(curve["loss"]) == [shell_loss(0.3, epoch) for epoch in (1, 2, 3)]


def test_pushed_metrics_and_tensorflow_event_files_reach_the_scheduler(node_cluster, core, custom, team):
    """``Push``: busybox's wget posts each epoch's line to the pod-local endpoint; ``TensorFlowEvent``: the runtime
    image writes event files with tensorboardX (any image would do). Both runs end with every result read."""
    shell = node_cluster.node.image("trial-shell")
    push = (
        "for e in 1 2 3; do wget -q -O- --post-data \"epoch=$e loss=$(awk -v e=$e 'BEGIN{print 1/e}')\" "
        "http://127.0.0.1:9109/metrics; sleep 1; done"
    )
    events = (
        "from tensorboardX import SummaryWriter\n"
        "w = SummaryWriter('/var/log/tb/train')\n"
        "for step in range(1, 4):\n"
        "    w.add_scalar('accuracy', 0.5 + step / 10, step)\n"
        "w.close()\n"
    )
    common = {"resourcesPerTrial": {"cpu": "100m", "memory": "128Mi"}, "config": {"x": 1}}
    bodies = [
        experiment(
            "push-metrics",
            shell,
            node_cluster,
            {
                "trainable": {"command": ["sh", "-c", push]},
                "metricsCollector": {"kind": "Push", "iterationKey": "epoch"},
                "metric": "loss",
                "mode": "min",
                **common,
            },
        ),
        experiment(
            "tf-events",
            node_cluster.node.image("runtime"),
            node_cluster,
            {
                "trainable": {"command": ["python", "-c", events]},
                "metricsCollector": {"kind": "TensorFlowEvent", "path": "/var/log/tb"},
                "metric": "accuracy",
                "mode": "max",
                **common,
            },
        ),
    ]
    for body in bodies:
        custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)
    for body in bodies:
        name = body["metadata"]["name"]
        assert wait_finished(custom, team, name, timeout=240)["phase"] == "Succeeded", name
    (pushed,) = trials_of(custom, team, "push-metrics").values()
    assert (pushed["reason"], pushed["iteration"]) == ("Completed", 3) and abs(
        pushed["lastResult"]["loss"] - 1 / 3
    ) < 1e-4
    (tb,) = trials_of(custom, team, "tf-events").values()
    assert (tb["reason"], tb["iteration"]) == ("Completed", 3) and abs(tb["lastResult"]["accuracy"] - 0.8) < 1e-6


def test_a_trial_whose_pod_is_deleted_goes_on_from_its_checkpoint_folder_as_an_uninterrupted_one(
    node_cluster, core, custom, team
):
    """Two trials of one config, mnist.py keeping its state in its checkpoint folder: the first one's pod is
    deleted after its second epoch (a disruption), its next attempt's restore init container fills the folder from
    storage, and it prints the losses the uninterrupted second trial prints; the kubelet runs the restore before
    the trial's container and the native sidecar beside it, and the trial's container sees no credentials."""
    epochs = 6
    body = experiment(
        "mnist-checkpoints",
        node_cluster.node.image("trial-python"),
        node_cluster,
        {
            "trainable": {"command": ["python3", "/app/mnist.py"], "args": ["--lr=${config.lr}", f"--epochs={epochs}"]},
            "metric": "loss",
            "mode": "min",
            "config": {"lr": 0.05, "copy": {"grid_search": [1, 2]}},
            "checkpoint": {"path": "/ckpt"},
            "maxConcurrentTrials": 2,
            "resourcesPerTrial": {"cpu": "500m", "memory": "256Mi"},
            "podRetentionPolicy": {"whenSucceeded": "Retain"},  # the pods are read below
        },
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, team, "experiments", body)
    first = "mnist-checkpoints-00000"
    deadline = time.monotonic() + 240
    while (trials_of(custom, team, "mnist-checkpoints").get(first) or {}).get("iteration", 0) < 2:
        assert time.monotonic() < deadline, trials_of(custom, team, "mnist-checkpoints")
        time.sleep(0.5)
    core.delete_namespaced_pod(f"{first}-0", team)
    status = wait_finished(custom, team, "mnist-checkpoints", timeout=300)
    assert status["phase"] == "Succeeded", status
    trials = trials_of(custom, team, "mnist-checkpoints")
    for trial in trials.values():
        assert (trial["phase"], trial["reason"], trial["iteration"]) == ("Succeeded", "Completed", epochs), trial
    assert trials[first]["attempt"] == 1 and trials["mnist-checkpoints-00001"]["attempt"] == 0
    assert trials[first]["lastResult"]["loss"] == trials["mnist-checkpoints-00001"]["lastResult"]["loss"]
    assert trials[first]["checkpoint"]["iteration"] == epochs

    pod = core.read_namespaced_pod(f"{first}-1", team)
    restore, sidecar = pod.spec.init_containers
    assert (restore.name, sidecar.name, sidecar.restart_policy) == ("kubetune-restore", "kubetune-metrics", "Always")
    (container,) = pod.spec.containers
    assert [(e.name, e.value) for e in container.env] == [("KUBETUNE_CHECKPOINT_DIR", "/ckpt")]
    assert not container.env_from  # the storage credentials are the restore's and the sidecar's only
    restored = json.loads(pod.status.init_container_statuses[0].state.terminated.message)
    assert 1 <= restored["iteration"] <= 4, restored  # the checkpoint committed before the pod went
    resumed = node_cluster.kubectl("logs", "-n", team, pod.metadata.name).stdout
    whole = node_cluster.kubectl("logs", "-n", team, "mnist-checkpoints-00001-0").stdout

    def losses(log: str) -> dict[int, float]:
        lines = [line for line in log.splitlines() if "\tloss=" in line]
        return {int(line.split("Epoch: ")[1].split()[0]): metrics(line)["loss"] for line in lines}

    assert f"restored the state after epoch {restored['iteration']}" in resumed
    after = {e: loss for e, loss in losses(whole).items() if e > restored["iteration"]}
    assert losses(resumed) == after and len(after) == epochs - restored["iteration"], (resumed[-3000:], whole)
