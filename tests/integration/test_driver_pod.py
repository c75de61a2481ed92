"""Ray's driver-side callbacks in the Experiment's driver pod, on the local cluster: ``tune.run(callbacks=[...])``
with a ``tune.Callback`` defined here (so shipped by value), whose hooks write one object per call to the
experiment's storage from the driver pod; the calls are Ray's, in the journal's order, for every trial and result,
and ``on_experiment_end`` comes once, before ``tune.run`` returns. With the operator SIGKILLed every few seconds
and the driver pod deleted mid-run, every call is made (at least once) and the trials end as without the kills.
A callback that raises fails the Experiment (``DriverFailed``) and ``tune.run`` raises. Ray's
``MLflowLoggerCallback`` logs every trial, from the driver pod, to a real ``mlflow server``, and Ray's
``WandbLoggerCallback`` to W&B offline (the run files read back). Each checkpoint a trial commits reaches
``on_checkpoint`` (read back from storage in the driver pod), then ``on_trial_save``. A ``Searcher`` of the user's
suggests every trial's config from the driver pod, once per trial, with the operator SIGKILLed and the driver pod
deleted mid-run as without."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

import kubetune as tune
from devcluster.cluster import S3_BUCKET
from devcluster.testkit import history_of, run_of, tracking_server, wait_for, wandb_records
from kubetune.integrations.mlflow import MLflowLoggerCallback
from kubetune.integrations.wandb import WandbLoggerCallback
from kubetune.sdk.client import Cluster
from tests.integration.test_faults import Killer

PREFIX = "driver-pod"
ITERATIONS = 4


def climb(config):
    for i in range(1, ITERATIONS + 1):
        time.sleep(config["sleep"])
        tune.report({"score": config["x"] * i})


class Recorder(tune.Callback):
    """Writes each call it gets to ``<where>/<run>/<hook>-<trial>-<iteration>.json`` (a call made twice writes the
    same object), ``on_experiment_end`` under a name of its own each time."""

    def __init__(self, where: str):
        self.where = where

    def setup(self, **info):
        from kubetune.storage import open_storage

        self.storage = open_storage(self.where)
        self.run = os.environ["HOSTNAME"] if "HOSTNAME" in os.environ else str(os.getpid())

    def write(self, name: str, body: dict) -> None:
        self.storage.put_bytes(f"{self.where}/{name}.json", json.dumps(body).encode())

    def on_trial_start(self, iteration, trials, trial, **info):
        self.write(f"start-{trial.trial_id}", {"config": trial.config, "iteration": iteration})

    def on_trial_result(self, iteration, trials, trial, result, **info):
        step = result["training_iteration"]
        self.write(f"result-{trial.trial_id}-{step}", {"score": result["score"], "config": result["config"]})

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.write(f"complete-{trial.trial_id}", {"last": trial.last_result["training_iteration"], "seen": len(trials)})

    def on_experiment_end(self, trials, **info):
        import uuid

        self.write(f"end-{uuid.uuid4().hex}", {"trials": sorted(t.trial_id for t in trials)})


class Raising(tune.Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        raise ValueError(f"no callback likes {trial.trial_id}")


@pytest.fixture
def sdk_env(cluster, monkeypatch):
    for key, value in cluster.env().items():
        monkeypatch.setenv(key, value)


def calls(s3, prefix: str) -> dict[str, dict]:
    listed = s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=prefix + "/").get("Contents", [])
    return {
        o["Key"].rsplit("/", 1)[1][: -len(".json")]: json.loads(
            s3.get_object(Bucket=S3_BUCKET, Key=o["Key"])["Body"].read()
        )
        for o in listed
    }


def run(name, namespace, secret, callbacks, samples=3, sleep=0.0):
    return tune.run(
        climb,
        name=name,
        namespace=namespace,
        storage={"uri": f"s3://{S3_BUCKET}/{PREFIX}", "credentialsSecret": secret},
        config={"x": tune.grid_search([1, 2, 3][:samples]), "sleep": sleep},
        metric="score",
        mode="max",
        callbacks=callbacks,
        verbose=0,
        poll_interval_s=0.5,
    )


class DriverDeleter:
    """Deletes the Experiment's first driver pod once it runs and ``ready()`` is true, from a thread of its own;
    :meth:`wait` says whether it did."""

    def __init__(self, core, namespace: str, ready, what: str):
        self.core, self.namespace, self.ready, self.deleted = core, namespace, ready, threading.Event()
        self.thread = threading.Thread(target=self._run, args=(what,), daemon=True)
        self.thread.start()

    def _delete_once(self) -> bool:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector="kubetune.io/trial=").items
        running = [p for p in pods if p.status.phase == "Running" and p.metadata.name.endswith("-0")]
        if running and self.ready():
            self.core.delete_namespaced_pod(running[0].metadata.name, self.namespace, grace_period_seconds=0)
            return True
        return False

    def _run(self, what: str) -> None:
        wait_for(self._delete_once, timeout=240, what=f"a running driver pod that {what}")
        self.deleted.set()

    def wait(self) -> bool:
        self.thread.join(timeout=10)
        return self.deleted.is_set()


def check_calls(made: dict[str, dict], analysis) -> None:
    """Ray's calls for every trial: started with its config, each result with its config, completed after its last
    result; ``on_experiment_end`` once, with every trial."""
    trials = sorted(t.trial_id for t in analysis.trials)
    ends = [body for key, body in made.items() if key.startswith("end-")]
    assert ends == [{"trials": trials}], ends
    for trial in analysis.trials:
        tid = trial.trial_id
        assert made[f"start-{tid}"]["config"] == trial.config
        for step in range(1, ITERATIONS + 1):
            assert made[f"result-{tid}-{step}"] == {"score": trial.config["x"] * step, "config": trial.config}
        assert made[f"complete-{tid}"]["last"] == ITERATIONS
    assert len(made) == len(trials) * (ITERATIONS + 2) + 1, sorted(made)


def test_callbacks_run_in_the_driver_pod_as_ray_calls_them(
    operator, core, custom, s3, namespace, storage_secret, sdk_env
):
    where = f"s3://{S3_BUCKET}/{PREFIX}-calls/{namespace}"
    analysis = run("called", namespace, storage_secret, [Recorder(where), tune.logger.JsonLoggerCallback()])
    check_calls(calls(s3, f"{PREFIX}-calls/{namespace}"), analysis)  # all made before tune.run returned
    experiment = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", "called")
    assert experiment["status"]["phase"] == "Succeeded"
    (pod,) = core.list_namespaced_pod(namespace, label_selector="kubetune.io/trial=").items
    assert pod.metadata.name == "called-driver-0" and pod.status.phase == "Succeeded"
    assert pod.spec.automount_service_account_token is False and pod.metadata.owner_references[0].kind == "Experiment"
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=called").items
    assert any(e.reason == "DriverPodCreated" for e in events)


def test_every_call_is_made_with_the_operator_killed_and_the_driver_pod_deleted(
    operator, core, custom, s3, namespace, storage_secret, sdk_env
):
    where = f"s3://{S3_BUCKET}/{PREFIX}-calls/{namespace}"
    cluster = Cluster.connect(namespace=namespace)
    deleted = DriverDeleter(core, namespace, lambda: calls(s3, f"{PREFIX}-calls/{namespace}"), "made calls")
    with Killer(operator, every_s=3.0) as killer:  # each trial's results come over 10 s, the operator dies thrice
        analysis = run("stormy", namespace, storage_secret, [Recorder(where)], sleep=2.5)
    assert killer.kills >= 2 and deleted.wait()
    check_calls(calls(s3, f"{PREFIX}-calls/{namespace}"), analysis)
    assert sorted(t.last_result["score"] for t in analysis.trials) == [4, 8, 12]  # as without the kills
    drivers = [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector="kubetune.io/trial=").items]
    assert "stormy-driver-1" in drivers, drivers  # the deleted one's place was taken
    assert cluster.get("stormy")["status"]["phase"] == "Succeeded"


def test_a_callback_that_raises_fails_the_experiment_and_the_run(
    operator, core, custom, namespace, storage_secret, sdk_env
):
    with pytest.raises(tune.TuneError, match="no callback likes raising-0000"):
        run("raising", namespace, storage_secret, [Raising()], samples=1)
    status = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", "raising")[
        "status"
    ]
    assert status["phase"] == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "DriverFailed" and "Raising.on_trial_result raised ValueError" in failed["message"]


def test_mlflows_logger_callback_logs_every_trial_from_the_driver_pod(
    operator, namespace, storage_secret, sdk_env, tmp_path
):
    with tracking_server(tmp_path) as url:
        callback = MLflowLoggerCallback(url, experiment_name=f"kubetune-{namespace}", tags={"by": "driver"})
        analysis = run("tracked", namespace, storage_secret, [callback])
        client = MlflowClient(tracking_uri=url)
        experiment = client.get_experiment_by_name(f"kubetune-{namespace}")
        runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
        assert sorted(runs) == sorted(t.trial_id for t in analysis.trials)
        for trial in analysis.trials:
            logged = runs[trial.trial_id]
            assert logged.info.status == "FINISHED" and logged.data.tags["by"] == "driver"
            assert logged.data.params == {"x": str(trial.config["x"]), "sleep": str(trial.config["sleep"])}
            history = [(m.step, m.value) for m in client.get_metric_history(logged.info.run_id, "score")]
            assert history == [(step, trial.config["x"] * step) for step in range(1, ITERATIONS + 1)]


@pytest.fixture
def host_folder(namespace):
    """A folder of this machine outside ``/tmp``, which the driver pod (a process of the process node, whose own
    ``/tmp`` is its emptyDir) sees as this test does; removed after the test."""
    folder = Path.home() / ".cache" / "kubetune" / "test-driver-pod" / namespace
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_wandbs_logger_callback_logs_every_trial_from_the_driver_pod_offline(
    operator, namespace, storage_secret, sdk_env, host_folder
):
    callback = WandbLoggerCallback("kubetune-tests", mode="offline", dir=str(host_folder))
    analysis = run("weighed", namespace, storage_secret, [callback])
    for trial in analysis.trials:
        records = wandb_records(host_folder, trial.trial_id)  # one run of the trial's id, written by the driver pod
        assert run_of(records) == (trial.trial_id, trial.trial_id, "weighed", "kubetune-tests")
        scores = [(h["training_iteration"], h["score"]) for h in history_of(records)]
        assert scores == [(step, trial.config["x"] * step) for step in range(1, ITERATIONS + 1)]
        assert "exit" in records  # finished when the trial ended


def saving(config):
    for step in (1, 2):
        tune.report({"score": config["x"] * step}, checkpoint=tune.Checkpoint.from_dict({"step": step}))


class Saves(tune.Callback):
    """Writes what each checkpoint it is handed holds (downloaded from storage in the driver pod), and each save."""

    def __init__(self, where: str):
        self.where = where

    def setup(self, **info):
        from kubetune.storage import open_storage

        self.storage = open_storage(self.where)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.held = checkpoint.to_dict()
        name = f"checkpoint-{trial.trial_id}-{self.held['step']}"
        self.storage.put_bytes(f"{self.where}/{name}.json", json.dumps(self.held).encode())

    def on_trial_save(self, iteration, trials, trial, **info):  # after on_checkpoint, for the same checkpoint
        self.storage.put_bytes(f"{self.where}/save-{trial.trial_id}-{self.held['step']}.json", b"{}")


def test_each_committed_checkpoint_reaches_on_checkpoint_in_the_driver_pod(
    operator, s3, namespace, storage_secret, sdk_env
):
    where = f"s3://{S3_BUCKET}/{PREFIX}-saves/{namespace}"
    analysis = tune.run(
        saving,
        name="saving",
        namespace=namespace,
        storage={"uri": f"s3://{S3_BUCKET}/{PREFIX}", "credentialsSecret": storage_secret},
        config={"x": tune.grid_search([1, 2])},
        metric="score",
        mode="max",
        callbacks=[Saves(where)],
        verbose=0,
        poll_interval_s=0.5,
    )
    made = calls(s3, f"{PREFIX}-saves/{namespace}")
    trials = sorted(t.trial_id for t in analysis.trials)
    expected = {f"{kind}-{t}-{step}" for t in trials for step in (1, 2) for kind in ("checkpoint", "save")}
    assert set(made) == expected
    assert all(made[f"checkpoint-{t}-{step}"] == {"step": step} for t in trials for step in (1, 2))


class Stepper(tune.search.Searcher):
    """A searcher of the user's (Ray's ``Searcher`` API): configs ``x = 1, 2, 3``, "not now" while 2 of its trials
    run, then FINISHED; writes each call it gets to the experiment's storage from the driver pod (a call made twice
    writes the same object; ``suggest-...`` objects are named by the count, so a second config for a trial would
    show)."""

    def __init__(self, where: str):
        super().__init__(metric="score", mode="max")
        self.where, self.count, self.live = where, 0, set()

    def write(self, name: str, body: dict) -> None:
        from kubetune.storage import open_storage

        open_storage(self.where).put_bytes(f"{self.where}/{name}.json", json.dumps(body).encode())

    def suggest(self, trial_id):
        if self.count >= 3:
            return self.FINISHED
        if len(self.live) >= 2:
            return None
        self.count += 1
        self.live.add(trial_id)
        self.write(f"suggest-{self.count}", {"trial": trial_id})
        return {"x": self.count}

    def on_trial_result(self, trial_id, result):
        step = result["training_iteration"]
        self.write(f"result-{trial_id}-{step}", {"score": result["score"], "x": result["config/x"]})

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.live.discard(trial_id)
        self.write(f"complete-{trial_id}", {"last": result and result["training_iteration"], "error": error})


def check_searcher_calls(made: dict[str, dict], analysis, sleep: float) -> None:
    """The searcher's configs are the trials', one per trial, in the order of their names, merged into the run's
    constants (``sleep``); it heard every result with the merged config and each end once."""
    trials = sorted(analysis.trials, key=lambda t: t.trial_id)
    assert [made[f"suggest-{n}"]["trial"] for n in (1, 2, 3)] == [t.trial_id for t in trials]
    assert [t.config for t in trials] == [{"x": x, "sleep": sleep} for x in (1, 2, 3)]
    for trial in trials:
        tid = trial.trial_id
        for step in range(1, ITERATIONS + 1):
            assert made[f"result-{tid}-{step}"] == {"score": trial.config["x"] * step, "x": trial.config["x"]}
        assert made[f"complete-{tid}"] == {"last": ITERATIONS, "error": False}
    assert len(made) == 3 * (ITERATIONS + 2), sorted(made)


def searched(name, namespace, secret, where, sleep=0.0):
    return tune.run(
        climb,
        name=name,
        namespace=namespace,
        storage={"uri": f"s3://{S3_BUCKET}/{PREFIX}", "credentialsSecret": secret},
        config={"sleep": sleep},
        num_samples=5,  # the searcher's FINISHED ends the search at 3
        metric="score",
        mode="max",
        search_alg=Stepper(where),
        verbose=0,
        poll_interval_s=0.5,
    )


def test_a_searcher_of_the_users_suggests_every_config_from_the_driver_pod(
    operator, core, custom, s3, namespace, storage_secret, sdk_env
):
    where = f"s3://{S3_BUCKET}/{PREFIX}-searched/{namespace}"
    analysis = searched("searched", namespace, storage_secret, where)
    check_searcher_calls(calls(s3, f"{PREFIX}-searched/{namespace}"), analysis, 0.0)
    experiment = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", "searched")
    assert experiment["spec"]["searchAlgorithm"] == {"name": "driver"}
    assert experiment["status"]["phase"] == "Succeeded" and len(analysis.trials) == 3
    assert analysis.best_config["x"] == 3
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=searched").items
    assert any(e.reason == "DriverPodCreated" and "searcher" in e.message for e in events)


def test_a_searcher_of_the_users_gives_each_trial_one_config_with_the_operator_killed_and_the_driver_pod_deleted(
    operator, core, s3, namespace, storage_secret, sdk_env
):
    where = f"s3://{S3_BUCKET}/{PREFIX}-searched/{namespace}"

    def suggested_twice():
        return "suggest-2" in calls(s3, f"{PREFIX}-searched/{namespace}")

    deleted = DriverDeleter(core, namespace, suggested_twice, "suggested twice")
    with Killer(operator, every_s=3.0) as killer:
        analysis = searched("stepped", namespace, storage_secret, where, sleep=2.5)
    assert killer.kills >= 2 and deleted.wait()
    check_searcher_calls(calls(s3, f"{PREFIX}-searched/{namespace}"), analysis, 2.5)  # as the uninterrupted run's
    assert sorted(t.last_result["score"] for t in analysis.trials) == [4, 8, 12]


class Counter(tune.Trainable):
    """Counts to 8, a step every 0.4 s, saving the count when asked."""

    def setup(self, config):
        self.count = 0

    def step(self):
        time.sleep(0.4)
        self.count += 1
        return {"score": self.count, "done": self.count >= 8}

    def save_checkpoint(self, checkpoint_dir):
        Path(checkpoint_dir, "count.json").write_text(json.dumps(self.count))

    def load_checkpoint(self, checkpoint_dir):
        self.count = json.loads(Path(checkpoint_dir, "count.json").read_text())


class AsksForACheckpoint(tune.Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["training_iteration"] == 2:
            result[tune.result.SHOULD_CHECKPOINT] = True  # Ray's driver then saves the trial


def test_a_callbacks_should_checkpoint_makes_the_trial_save_a_checkpoint(
    operator, s3, namespace, storage_secret, sdk_env
):
    analysis = tune.run(
        Counter,
        name="asked",
        namespace=namespace,
        storage={"uri": f"s3://{S3_BUCKET}/{PREFIX}", "credentialsSecret": storage_secret},
        metric="score",
        mode="max",
        callbacks=[AsksForACheckpoint()],
        verbose=0,
        poll_interval_s=0.5,
    )
    (trial,) = analysis.trials
    listed = s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=f"{PREFIX}/{namespace}/asked/").get("Contents", [])
    saved = sorted({int(k["Key"].split("checkpoint_")[1][:6]) for k in listed if "/checkpoint_" in k["Key"]})
    # the trial's next report after the callback's ask is answered "checkpoint" (Ray saves at once, at iteration 2);
    # no checkpoint frequency and no checkpoint at the end were asked for, so this is the callback's
    assert len(saved) == 1 and 2 < saved[0] < 8, saved
    assert trial.last_result["score"] == 8
