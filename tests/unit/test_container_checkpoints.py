"""Checkpoints of container trials without a cluster: the spec's checkpoint folder, the pod's restore init container
and sidecar, the folder restored and saved against a real store (a local folder), the operator reading the restored
iteration from the pod, and the restore and sidecar processes reporting to the operator's real collector."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from devcluster.testkit import experiment_object
from kubetune.checkpoint_store import COMMIT_MARKER, checkpoint_uri, list_checkpoints, read_commit
from kubetune.env import CHECKPOINT_DIR, CHECKPOINT_FOLDER, METRICS_SOURCE, TERMINATION_MESSAGE_PATH_VAR
from kubetune.output_metrics import OutputParser
from kubetune.runtime import checkpoint_folder
from kubetune.runtime.checkpoint_folder import SAVE_MARKER, CheckpointFolder, FolderSpec, restore
from kubetune.runtime.sidecar import FileSource, run
from kubetune.storage import open_storage
from kubetune_operator.builders import build_pod, trial_object
from kubetune_operator.container_trials import CHECKPOINT_VOLUME, DEFAULT_CHECKPOINT_PATH, METRICS_SIDECAR
from kubetune_operator.controller import ExperimentController
from kubetune_operator.experiment_spec import ExperimentSpec
from kubetune_operator.gang import build_gang
from kubetune_operator.labels import RESTORE_CONTAINER
from kubetune_operator.podview import PodView, pod_view
from kubetune_operator.settings import Settings
from tests.unit.test_metrics_sidecar import collector_with_a_running_trial, stopped_by_the_kubelet

KEY = b"k" * 32


def experiment(store: str = "s3://bucket/prefix", **spec) -> dict:
    base = {
        "trainable": {"command": ["python3", "/app/train.py"], "args": ["--lr=${config.lr}"]},
        "image": "user/train:1",
        "config": {"lr": {"grid_search": [0.1]}},
        "metric": "loss",
        "mode": "min",
        "storage": {"uri": store, "credentialsSecret": "s3-creds", "endpoint": "http://s3:9000"},
    }
    base.update(spec)
    return experiment_object("boxes", "boxes-uid", namespace="ns", **base)


# ----- the spec ------------------------------------------------------------------------------------------------------
def test_a_pausing_scheduler_gives_a_container_trial_the_default_folder_and_a_bad_folder_is_refused():
    assert ExperimentSpec.parse(experiment()["spec"]).container.checkpoint_path is None  # no checkpoints unasked
    pbt = experiment(scheduler={"name": "pbt", "params": {"perturbation_interval": 2}})
    assert ExperimentSpec.parse(pbt["spec"]).container.checkpoint_path == DEFAULT_CHECKPOINT_PATH
    hyperband = experiment(scheduler={"name": "hyperband", "params": {"max_t": 9}}, checkpoint={"path": "/ck/"})
    assert ExperimentSpec.parse(hyperband["spec"]).container.checkpoint_path == "/ck"
    for words, change in {
        "absolute path": {"checkpoint": {"path": "ck"}},
        "below /": {"checkpoint": {"path": "/"}},
        "hold one another": {
            "checkpoint": {"path": "/out"},
            "metricsCollector": {"kind": "File", "path": "/out/metrics.log"},
        },
    }.items():
        with pytest.raises(ValueError, match=words):
            ExperimentSpec.parse(experiment(**change)["spec"])
    with pytest.raises(ValueError, match="only for a container trial"):
        ExperimentSpec.parse(
            experiment_object(trainable={"entrypoint": "m:T"}, checkpoint={"path": "/ck"}, metric="l", mode="min")[
                "spec"
            ]
        )


# ----- the pod -------------------------------------------------------------------------------------------------------
def test_the_pod_restores_before_the_trial_and_only_kubetunes_containers_see_the_storage_credentials():
    exp = experiment(checkpoint={"path": "/ck", "keep": 2})
    pod = build_pod(exp, trial_object("ns", "boxes-00000", "u-1", 0, {"lr": 0.1}), 3, Settings(), "s3://b/d/ck_1")
    (trial,) = pod["spec"]["containers"]
    assert trial["env"] == [{"name": CHECKPOINT_DIR, "value": "/ck"}]  # the one variable of kubetune's
    assert trial["volumeMounts"] == [{"name": CHECKPOINT_VOLUME, "mountPath": "/ck"}]
    assert "envFrom" not in trial  # the credentials reach kubetune's containers only
    restore_c, sidecar = pod["spec"]["initContainers"]
    assert restore_c["name"] == RESTORE_CONTAINER and "restartPolicy" not in restore_c  # runs to its end first
    assert restore_c["command"] == ["python", "-m", "kubetune.runtime.checkpoint_folder"]
    assert sidecar["name"] == METRICS_SIDECAR and sidecar["restartPolicy"] == "Always"
    for c in (restore_c, sidecar):
        assert c["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        env = {e["name"]: e.get("value") for e in c["env"]}
        folder = FolderSpec.from_json(env[CHECKPOINT_FOLDER])
        assert (folder.path, folder.restore_from, folder.keep) == ("/ck", "s3://b/d/ck_1", 2)
        assert folder.trial_dir == "s3://bucket/prefix/ns/boxes/boxes-ui/boxes-00000"
        assert env["KUBETUNE_STORAGE_ENDPOINT"] == "http://s3:9000"
        assert {m["name"] for m in c["volumeMounts"]} == {CHECKPOINT_VOLUME, "kubetune-state"}
    assert json.loads({e["name"]: e.get("value") for e in sidecar["env"]}[METRICS_SOURCE])["kind"] == "StdOut"
    assert {v["name"] for v in pod["spec"]["volumes"]} == {CHECKPOINT_VOLUME, "kubetune-state"}


def test_the_operator_reads_the_restored_iteration_and_a_failed_restore_from_the_pod():
    def body(init_state):
        return {
            "metadata": {
                "name": "boxes-00000-1",
                "labels": {"kubetune.io/trial": "boxes-00000", "kubetune.io/attempt": "1"},
            },
            "status": {
                "phase": "Running",
                "initContainerStatuses": [{"name": RESTORE_CONTAINER, "state": init_state}],
                "containerStatuses": [{"name": "trial", "state": {"running": {}}}],
            },
        }

    done = {"terminated": {"exitCode": 0, "message": json.dumps({"uri": "s3://b/ck", "iteration": 4})}}
    view = pod_view(body(done))
    assert (view.restored_iteration, view.restore_failed, view.exit_code) == (4, False, None)
    failed = body({"terminated": {"exitCode": 1, "message": "the checkpoint folder could not be restored: boom"}})
    failed["status"]["phase"] = "Failed"
    failed["status"]["containerStatuses"] = [{"name": "trial", "state": {"waiting": {"reason": "PodInitializing"}}}]
    view = pod_view(failed)
    assert (view.restore_failed, view.exit_code, view.phase) == (True, 1, "Failed")
    assert "could not be restored: boom" in view.message
    assert pod_view(body({"running": {}})).restored_iteration is None  # still restoring


def test_an_ended_stdout_trial_with_a_folder_waits_for_its_log_and_its_sidecar():
    ctl = ExperimentController(experiment(checkpoint={"path": "/ck"}), Settings(), KEY)
    plan = ctl.plan({}, 1e9)
    ctl.trial_created(plan.create_trials[0]["metadata"]["name"], "uid-0")
    ctl.plan({}, 1e9 + 1)
    name = "boxes-00000-0"
    ctl.plan({name: PodView(name, "boxes-00000", 0, "Running", restored_iteration=0)}, 1e9 + 2)
    ctl.record_results("boxes-00000", 0, [{"loss": 1.0, "training_iteration": 1}], None)
    ended = {name: PodView(name, "boxes-00000", 0, "Succeeded", exit_code=0, restored_iteration=0)}
    ctl.output_read_to_end(name, "log")
    ctl.plan(ended, 1e9 + 3)
    assert ctl.trials["boxes-00000"].phase == "Running"  # the sidecar's last save may still come
    ctl.output_read_to_end(name, "sidecar")
    ctl.plan(ended, 1e9 + 4)
    assert ctl.trials["boxes-00000"].phase == "Succeeded"


def test_the_sidecars_exit_code_on_the_pod_is_its_last_word_for_an_operator_that_restarted_since():
    # the operator that took the sidecar's "done" was killed before the pod's end; a new one reads the pod's status
    def body(sidecar_state):
        statuses = [
            {"name": RESTORE_CONTAINER, "state": {"terminated": {"exitCode": 0, "message": '{"iteration": 0}'}}},
            {"name": METRICS_SIDECAR, "state": sidecar_state},
        ]
        return {
            "metadata": {
                "name": "boxes-00000-0",
                "labels": {"kubetune.io/trial": "boxes-00000", "kubetune.io/attempt": "0"},
            },
            "status": {
                "phase": "Succeeded",
                "initContainerStatuses": statuses,
                "containerStatuses": [{"name": "trial", "state": {"terminated": {"exitCode": 0}}}],
            },
        }

    assert pod_view(body({"running": {}})).sidecar_exit is None
    for code in (0, 1):
        ctl = ExperimentController(experiment(checkpoint={"path": "/ck"}), Settings(), KEY)
        plan = ctl.plan({}, 1e9)
        ctl.trial_created(plan.create_trials[0]["metadata"]["name"], "uid-0")
        ctl.plan({}, 1e9 + 1)
        ctl.plan(
            {"boxes-00000-0": PodView("boxes-00000-0", "boxes-00000", 0, "Running", restored_iteration=0)}, 1e9 + 1
        )
        ctl.record_results("boxes-00000", 0, [{"loss": 1.0, "training_iteration": 1}], None)
        ended = {"boxes-00000-0": pod_view(body({"terminated": {"exitCode": code}}))}
        assert ended["boxes-00000-0"].sidecar_exit == code
        warned = [e for e in ctl.plan(ended, 1e9 + 2).events if e[2] == "OutputNotRead"]
        assert ctl.trials["boxes-00000"].phase == "Running"  # the log is read again by this operator
        ctl.output_read_to_end("boxes-00000-0", "log")
        ctl.plan(ended, 1e9 + 3)
        assert ctl.trials["boxes-00000"].phase == "Succeeded"  # no wait for a sidecar that can send no more
        if code:  # its last batch was not taken: the trial ends on what was, and says so
            assert "the metrics sidecar of pod boxes-00000-0 ended with exit code 1" in warned[0][3]
        else:
            assert not warned


# ----- the folder ----------------------------------------------------------------------------------------------------
def folder_spec(tmp_path, restore_from=None, **kw) -> FolderSpec:
    for name in ("ck", "state"):
        (tmp_path / name).mkdir(exist_ok=True)
    return FolderSpec(
        path=str(tmp_path / "ck"),
        trial_dir=f"file://{tmp_path}/store/t1",
        state=str(tmp_path / "state"),
        restore_from=restore_from,
        **kw,
    )


def test_a_marker_saves_the_folder_without_it_and_goes_once_the_checkpoint_is_committed(tmp_path):
    spec = folder_spec(tmp_path)
    storage = open_storage(spec.trial_dir)
    announced = []
    folder = CheckpointFolder(storage, spec, 0, {"uri": None, "iteration": 0}, lambda u, i: announced.append((u, i)))
    (tmp_path / "ck" / "model.bin").write_bytes(b"w" * 100)
    assert folder.poll(None, None) is None  # nothing asked
    (tmp_path / "ck" / SAVE_MARKER).write_text("3\n")
    uri = folder.poll(None, None)
    assert uri == checkpoint_uri(spec.trial_dir, 3) and announced == [(uri, 3)]
    assert not (tmp_path / "ck" / SAVE_MARKER).exists()
    assert set(read_commit(storage, uri)["files"]) == {"model.bin"}  # the marker is not part of it
    (tmp_path / "ck" / SAVE_MARKER).write_text("")  # empty: at the latest result the sidecar read
    assert folder.poll(5, {"training_iteration": 5, "loss": 0.1}) == checkpoint_uri(spec.trial_dir, 5)
    assert read_commit(storage, checkpoint_uri(spec.trial_dir, 5))["metadata"]["last_result"]["loss"] == 0.1
    (tmp_path / "ck" / SAVE_MARKER).write_text("")  # empty, and no results read here (StdOut): refused, logged
    assert folder.poll(None, None) is None and not (tmp_path / "ck" / SAVE_MARKER).exists()
    assert [ref.iteration for ref in list_checkpoints(storage, spec.trial_dir)[0]] == [3, 5]


def test_at_its_end_a_changed_folder_is_saved_at_the_latest_result_and_an_unchanged_one_is_not(tmp_path):
    spec = folder_spec(tmp_path)
    storage = open_storage(spec.trial_dir)
    folder = CheckpointFolder(storage, spec, 0, {"uri": None, "iteration": 0}, lambda u, i: None)
    (tmp_path / "ck" / "state.json").write_text("{}")
    (tmp_path / "ck" / SAVE_MARKER).write_text("2")
    assert folder.poll(2, None) is not None
    assert folder.finish(2, None) is None  # nothing newer
    assert folder.finish(4, None) is None  # nothing changed in the folder since
    time.sleep(0.01)
    (tmp_path / "ck" / "state.json").write_text('{"epoch": 4}')
    assert folder.finish(4, None) == checkpoint_uri(spec.trial_dir, 4)
    assert folder.finish(None, None) is None  # StdOut: the sidecar knows no iteration


def test_restore_fills_the_folder_from_the_trials_newest_else_the_donors_and_skips_a_broken_one(tmp_path):
    spec = folder_spec(tmp_path)
    storage = open_storage(spec.trial_dir)
    assert restore(storage, spec) == {"uri": None, "iteration": 0}
    donor_dir = f"file://{tmp_path}/store/donor"
    donor_spec = FolderSpec(path=str(tmp_path / "ck"), trial_dir=donor_dir, state=str(tmp_path / "state"))
    (tmp_path / "ck" / "w.txt").write_text("donor at 6")
    (tmp_path / "ck" / SAVE_MARKER).write_text("6")
    CheckpointFolder(storage, donor_spec, 0, {}, lambda u, i: None).poll(None, None)
    exploit = folder_spec(tmp_path, restore_from=checkpoint_uri(donor_dir, 6))
    assert restore(storage, exploit) == {"uri": checkpoint_uri(donor_dir, 6), "iteration": 6}
    assert (tmp_path / "ck" / "w.txt").read_text() == "donor at 6"
    own = CheckpointFolder(storage, exploit, 1, {"uri": checkpoint_uri(donor_dir, 6), "iteration": 6}, print)
    for it in (7, 8):
        (tmp_path / "ck" / "w.txt").write_text(f"own at {it}")
        (tmp_path / "ck" / SAVE_MARKER).write_text(str(it))
        own.poll(None, None)
    (tmp_path / "store" / "t1" / "checkpoint_000008" / "w.txt").write_text("cut")  # another size: broken
    (tmp_path / "ck" / "stray").write_text("left by the last attempt")
    assert restore(storage, exploit) == {"uri": checkpoint_uri(spec.trial_dir, 7), "iteration": 7}
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["w.txt"]  # emptied first, no marker back
    assert (tmp_path / "ck" / "w.txt").read_text() == "own at 7" and COMMIT_MARKER not in os.listdir(tmp_path / "ck")


def test_the_sidecar_loop_saves_at_the_iteration_of_the_results_it_read(tmp_path):
    spec = folder_spec(tmp_path)
    storage = open_storage(spec.trial_dir)
    saved = []
    folder = CheckpointFolder(storage, spec, 0, {"uri": None, "iteration": 0}, lambda u, i: saved.append(i))
    metrics = tmp_path / "m.log"
    metrics.write_text("loss=3\nloss=2\n")
    (tmp_path / "ck" / "x").write_text("x")
    (tmp_path / "ck" / SAVE_MARKER).write_text("")
    stopping, reported = threading.Event(), []
    stopping.set()
    parser = OutputParser(["loss"])
    parser.iteration = 4  # restored at 4: results go on from 5
    assert run(FileSource(str(metrics)), parser, reported.append, stopping, folder) == 2
    assert [r["training_iteration"] for r in reported] == [5, 6] and saved == [6]


# ----- the processes against the real collector ----------------------------------------------------------------------
def test_the_restore_and_sidecar_processes_save_and_restore_through_the_collector(tmp_path, monkeypatch):
    """The restore init container and the sidecar as the pod runs them, with the operator's collector app: a
    checkpoint the container asks for reaches the Trial's status, SIGTERM ends the sidecar with ``done``, and the
    next attempt's restore fills the folder and records the iteration."""
    store = f"file://{tmp_path}/store"
    for name in ("ck", "state"):
        (tmp_path / name).mkdir()
    exp = experiment(store, checkpoint={"path": str(tmp_path / "ck")})
    exp["spec"]["storage"] = {"uri": store}

    async def scenario():
        ctl, runner, env = await collector_with_a_running_trial(exp)
        ctl.record_results("boxes-00000", 0, [{"loss": 1.0, "training_iteration": 1}], None)
        folder = {
            "path": str(tmp_path / "ck"),
            "trialDir": ctl.trial_dir("boxes-00000"),
            "state": str(tmp_path / "state"),
        }
        env[METRICS_SOURCE] = json.dumps({"kind": "StdOut", "objectives": ["loss"]})
        env[CHECKPOINT_FOLDER] = json.dumps(folder)
        env[TERMINATION_MESSAGE_PATH_VAR] = str(tmp_path / "termination-log")  # not the host's /dev
        assert subprocess.run([sys.executable, "-m", "kubetune.runtime.checkpoint_folder"], env=env).returncode == 0
        assert json.loads((tmp_path / "termination-log").read_text()) == {"uri": None, "iteration": 0}
        process = subprocess.Popen([sys.executable, "-m", "kubetune.runtime.sidecar"], env=env)
        try:
            (tmp_path / "ck" / "model.txt").write_text("epoch 1")
            (tmp_path / "ck" / SAVE_MARKER).write_text("1")
            deadline = time.monotonic() + 30
            while (tmp_path / "ck" / SAVE_MARKER).exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            while not ctl.trials["boxes-00000"].status.get("checkpoint") and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert ctl.trials["boxes-00000"].status["checkpoint"]["iteration"] == 1
            await stopped_by_the_kubelet(process, deadline)
        finally:
            process.kill()
            await runner.cleanup()
        assert ctl.output_read("boxes-00000-0", "sidecar") and not ctl.output_read("boxes-00000-0")  # the log too
        for entry in (tmp_path / "ck").iterdir():
            entry.unlink()
        message = tmp_path / "termination-log"
        monkeypatch.setattr(checkpoint_folder, "TERMINATION_MESSAGE_PATH", str(message))
        assert checkpoint_folder.main({**env, "KUBETUNE_ATTEMPT": "1"}) == 0  # the next attempt's restore
        assert (tmp_path / "ck" / "model.txt").read_text() == "epoch 1"
        assert json.loads(message.read_text())["iteration"] == 1
        assert json.loads((tmp_path / "state" / "restored.json").read_text())["iteration"] == 1

    asyncio.run(scenario())


def test_a_restore_that_cannot_read_its_storage_fails_with_the_reason(tmp_path, monkeypatch):
    message = tmp_path / "termination-log"
    monkeypatch.setattr(checkpoint_folder, "TERMINATION_MESSAGE_PATH", str(message))
    spec = {"path": str(tmp_path), "trialDir": "ftp://nowhere/t", "state": str(tmp_path)}
    assert checkpoint_folder.main({CHECKPOINT_FOLDER: json.dumps(spec)}) == 1
    assert message.read_text().startswith("the checkpoint folder could not be restored: ValueError")


def test_a_container_trials_gang_gives_each_member_the_launchers_variables_and_the_head_alone_its_sidecar():
    exp = experiment(
        checkpoint={"path": "/ck"},
        resourcesPerTrial={"cpu": 1, "workers": {"replicas": 2, "cpu": 1}},
        metricsCollector={"kind": "File", "path": "/out/m.log"},
    )
    head = build_pod(exp, trial_object("ns", "boxes-00000", "u-1", 0, {"lr": 0.1}), 0, Settings())
    gang = build_gang(head, exp["spec"]["resourcesPerTrial"], podgroups=False)
    assert [c["name"] for c in head["spec"]["initContainers"]] == [RESTORE_CONTAINER, METRICS_SIDECAR]
    assert len(gang.workers) == 2
    for rank, pod in enumerate([head, *gang.workers]):
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["RANK"], env["WORLD_SIZE"], env[CHECKPOINT_DIR]) == (str(rank), "3", "/ck")
        assert env["MASTER_ADDR"].startswith("rank-0.")
        if rank:  # each member restores the folder; only the head's sidecar reads and saves
            assert [c["name"] for c in pod["spec"]["initContainers"]] == [RESTORE_CONTAINER]
    assert ExperimentSpec.parse(exp["spec"]).container.sidecar_reads_metrics
