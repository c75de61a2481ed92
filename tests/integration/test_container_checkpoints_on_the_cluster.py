"""Checkpoints of container trials on the local cluster: a command that keeps its state in its checkpoint folder and
asks kubetune to save it after each epoch, PBT exploiting from those checkpoints, a crashed attempt retried from its
own, and the operator SIGKILLed every few seconds; a gang of pods running the user's command; the restore init container
and the sidecar run in each pod as the kubelet runs them."""

from __future__ import annotations

import sys

from devcluster.testkit import wait_for
from tests.integration.test_faults import operator_scheduler, run_with_kills
from tests.integration.test_operator import GROUP, VERSION, experiment, phase_is, trials

EPOCHS = 12
# Keeps its epoch and the total of its steps in $KUBETUNE_CHECKPOINT_DIR/state.json, restored there before it starts;
# prints the mean step as its score (so PBT ranks trials by x, however far each has got) and the total; after each
# epoch it asks for a checkpoint (.kubetune-save, holding the epoch) and waits until kubetune has committed it (the
# marker goes) before it changes the folder again. x=3 crashes once, after its checkpoint at epoch 2. No kubetune
# inside.
SCRIPT = f"""
import json, os, sys, time
x = float(sys.argv[1])
folder = os.environ["KUBETUNE_CHECKPOINT_DIR"]
state, marker = os.path.join(folder, "state.json"), os.path.join(folder, ".kubetune-save")
epoch, total = 0, 0.0
if os.path.exists(state):
    with open(state) as f:
        saved = json.load(f)
    epoch, total = saved["epoch"], saved["total"]
print(f"starting after epoch {{epoch}}", flush=True)
def save():
    with open(state + ".tmp", "w") as f:
        json.dump({{"epoch": epoch, "total": total}}, f)
    os.replace(state + ".tmp", state)
    with open(marker, "w") as f:
        f.write(str(epoch))
    deadline = time.time() + 60
    while os.path.exists(marker) and time.time() < deadline:
        time.sleep(0.05)
while epoch < {EPOCHS}:
    epoch, total = epoch + 1, total + x
    time.sleep(0.3)
    print(f"epoch={{epoch}} total={{total}} score={{total / epoch}}", flush=True)
    crash = x == 3 and epoch == 2 and not os.path.exists(os.path.join(folder, "crashed"))
    if crash:
        open(os.path.join(folder, "crashed"), "w").close()
    save()
    if crash:
        sys.exit(1)
"""


def test_container_trials_exploit_and_retry_from_their_checkpoint_folders_through_operator_kills(
    cluster, operator, custom, core, namespace, storage_secret
):
    scheduler = {
        "name": "pbt",
        "params": {
            "time_attr": "training_iteration",
            "perturbation_interval": 2,
            "hyperparam_mutations": {"x": [1, 2, 3, 4]},
            "resample_probability": 0.0,
        },
    }
    spec = experiment(
        "boxes-pbt",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [4, 3, 2, 1]}},
        trainable={"command": [sys.executable, "-c", SCRIPT], "args": ["${trialParameters.x}"]},
        checkpoint={},  # the folder: /var/kubetune/checkpoint, PBT's default
        stop={"training_iteration": EPOCHS},
        maxConcurrentTrials=4,
        scheduler=scheduler,
        failure={"maxFailures": 2},
    )
    found = run_with_kills(custom, operator, namespace, spec, 4, every_s=4.0)
    for name, trial in found.items():
        status = trial["status"]
        # the container's own epoch, restored from its folder, is kubetune's iteration on every attempt: no attempt
        # started over, and the one after a restore was numbered from the restored checkpoint
        assert status["lastResult"]["epoch"] == status["iteration"] == EPOCHS, (name, status)
        assert status["checkpoint"]["iteration"] >= EPOCHS - 1, (name, status["checkpoint"])
    crashed = next(t for t in found.values() if t["spec"]["config"]["x"] == 3)
    assert crashed["status"]["attempt"] >= 1  # its crash was retried from its checkpoint at epoch 2
    perturbed = [t for t in found.values() if t["status"].get("perturbations")]
    assert perturbed, {n: t["status"].get("reason") for n, t in found.items()}
    for trial in perturbed:
        last = trial["status"]["perturbations"][-1]
        assert last["donor"] in found and trial["status"]["config"]["x"] in (1, 2, 3, 4), last
        # the donor's state came with its checkpoint: at least 1 a step up to the exploit, then the explored x
        low = last["iteration"] + trial["status"]["config"]["x"] * (EPOCHS - last["iteration"])
        assert trial["status"]["lastResult"]["total"] >= low, (trial["metadata"]["name"], last)
    rebuilt = operator_scheduler(custom, core, namespace, "boxes-pbt")
    assert rebuilt.num_perturbations >= sum(len(t["status"]["perturbations"]) for t in perturbed)


def test_a_container_trial_with_workers_runs_its_command_in_every_member_and_reads_the_heads_output(
    cluster, operator, custom, core, namespace, storage_secret
):
    """A gang of three pods, each running the user's command with the launchers' variables (torchrun's RANK,
    WORLD_SIZE, MASTER_ADDR); the head prints the metric, the workers only their rank; each member restored the
    (empty) checkpoint folder before it started."""
    script = (
        "import os, time\n"
        "rank, size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])\n"
        "assert os.path.isdir(os.environ['KUBETUNE_CHECKPOINT_DIR'])\n"
        "for epoch in range(1, 4):\n"
        "    print(f'epoch={epoch} score={epoch * size}' if rank == 0 else f'worker {rank} of {size}', flush=True)\n"
        "    time.sleep(0.3)\n"
        "time.sleep(3 if rank == 0 else 0)\n"  # the workers end first: none is running (and deleted) at the head's end
    )
    spec = experiment(
        "boxes-gang",
        cluster,
        storage_secret,
        config={"x": 1},
        trainable={"command": [sys.executable, "-c", script]},
        checkpoint={"path": "/var/kubetune/gang-checkpoint"},
        stop={},  # the script ends by itself: its pods are kept (a stop would delete them)
        resourcesPerTrial={"cpu": "100m", "workers": {"replicas": 2, "cpu": "100m"}},
        podRetentionPolicy={"whenSucceeded": "Retain"},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(lambda: phase_is(custom, namespace, "boxes-gang", "Succeeded", "Failed"), timeout=180, what="boxes-gang")
    (trial,) = [t for n, t in trials(custom, namespace).items() if n.startswith("boxes-gang-")]
    status = trial["status"]
    assert (status["phase"], status["iteration"], status["lastResult"]["score"]) == ("Succeeded", 3, 9), status
    pods = core.list_namespaced_pod(namespace, label_selector="kubetune.io/experiment=boxes-gang").items
    assert len(pods) == 3
    for pod in pods:
        names = [c.name for c in pod.spec.init_containers]
        assert names == (
            ["kubetune-restore", "kubetune-metrics"] if pod.metadata.name.endswith("-0") else ["kubetune-restore"]
        )
        assert pod.status.init_container_statuses[0].state.terminated.exit_code == 0
