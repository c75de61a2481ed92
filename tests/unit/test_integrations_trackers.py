"""Ray's trial-side experiment trackers (``kubetune.integrations.mlflow.setup_mlflow``,
``kubetune.integrations.wandb.setup_wandb``; issue 33), with the real libraries.

MLflow: a real ``mlflow server`` (SQLite store and artifacts in the module's temporary folder, on a free port of
127.0.0.1) and function trainables run by the trial pod's process (``python -m kubetune.runtime``, as the pod runs
them): the run is read back with ``MlflowClient`` (Ray's names, the config as parameters, the metrics logged, the run
ended with the attempt). W&B: offline (``WANDB_MODE=offline``, ``WANDB_DIR`` in the test's folder), the run's
records read back from the ``.wandb`` file W&B wrote. Both: a gang's rank 1 gets a no-op. Ray's driver-side
``MLflowLoggerCallback`` logs to the same server, and ``WandbLoggerCallback`` offline, from the driver pod's loop."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest_runtime import run_runtime, runtime_env

import kubetune as tune
from devcluster.testkit import config_of, history_of, key_of, run_of, tracking_server, wandb_records
from kubetune import wrap_function
from kubetune.env import EXPERIMENT, HOSTS, RANK, WORLD_SIZE, CheckpointPolicy
from kubetune.integrations import mlflow as tune_mlflow
from kubetune.integrations import wandb as tune_wandb
from kubetune.runtime.attempt_end import at_attempt_end, attempt_ended
from kubetune.runtime.driver import DriverState, deliver
from kubetune.runtime.trainable import RESULT_DUPLICATE
from kubetune.sdk.tuner import legacy_run_args

mlflow = pytest.importorskip("mlflow")
wandb = pytest.importorskip("wandb")
from mlflow import MlflowClient  # noqa: E402 - only once mlflow is known to be there

#: The trainables the runtime subprocess imports (``tracked:train``), written to ``<tmp>/modules/tracked.py``.
TRACKED = """
import kubetune
from kubetune.integrations.mlflow import setup_mlflow


def train(config):
    mlflow = setup_mlflow(
        config,
        experiment_name=config.get("experiment"),
        run_name=config.get("run"),
        create_experiment_if_not_exists=True,
    )
    for step in range(3):
        loss = config["lr"] / (step + 1)
        mlflow.log_metric("loss", loss, step=step)
        kubetune.report({"loss": loss})
    if config.get("fail"):
        raise RuntimeError("the trainable failed")


class Tracked(kubetune.Trainable):
    def setup(self, config):
        self.mlflow = setup_mlflow(config, create_experiment_if_not_exists=True, tags={"kind": "class"})

    def step(self):
        loss = self.config["lr"] / (self.iteration + 1)
        self.mlflow.log_metric("loss", loss, step=self.iteration)
        return {"loss": loss}
"""


#: A W&B-tracked trainable for the runtime subprocess (``tracked_wandb:train``): two results, then it fails.
TRACKED_WANDB = """
import kubetune
from kubetune.integrations.wandb import setup_wandb


def train(config):
    run = setup_wandb(config, project="kubetune-tests")
    for step in range(2):
        run.log({"loss": config["lr"] / (step + 1)})
        kubetune.report({"loss": config["lr"] / (step + 1)})
    raise RuntimeError("the trainable failed")
"""


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``mlflow server`` on a free port of 127.0.0.1, its store and artifacts in a temporary folder; its URL."""
    with tracking_server(tmp_path_factory.mktemp("mlflow")) as url:
        yield url


def run_tracked_trial(tmp_path, server: str, config: dict, entrypoint="tracked:train", **fields) -> tuple[int, str]:
    """Run ``entrypoint`` of :data:`TRACKED` with ``config`` as trial ``trial-0`` of Experiment ``exp`` in the trial
    pod's process (``fields`` go to its ``TrialEnv``), tracking to ``server`` through ``MLFLOW_TRACKING_URI``; its exit
    code and output."""
    (tmp_path / "modules").mkdir(exist_ok=True)
    (tmp_path / "modules" / "tracked.py").write_text(TRACKED)
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    env = runtime_env(tmp_path, uri, config=config, entrypoint=entrypoint, **fields)
    env["MLFLOW_TRACKING_URI"] = server
    return run_runtime(env, timeout_s=25)


def test_setup_mlflow_tracks_a_trial_pod_under_its_name_with_its_config_and_ends_the_run(tmp_path, mlflow_server):
    config = {"lr": 0.5, "model": {"depth": 3, "kind": "tree"}}
    code, output = run_tracked_trial(tmp_path, mlflow_server, config)
    assert code == 0, output

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("trial-0")  # Ray's default: the trial's name
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id], filter_string="params.lr = '0.5'")
    assert run.info.run_name == "trial-0" and run.info.status == "FINISHED"
    assert run.data.params == {"lr": "0.5", "model/depth": "3", "model/kind": "tree"}  # Ray's flatten, values as str
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(0, 0.5), (1, 0.25), (2, 0.5 / 3)]


def test_a_failing_trials_mlflow_run_ends_failed_and_run_name_follows_the_experiment_name(tmp_path, mlflow_server):
    config = {"lr": 1.0, "fail": True, "experiment": "failing-runs"}
    code, output = run_tracked_trial(tmp_path, mlflow_server, config)
    assert code == 1 and "the trainable failed" in output

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("failing-runs")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "failing-runs" and run.info.status == "FAILED"  # Ray: run_name or experiment_name
    assert len(client.get_metric_history(run.info.run_id, "loss")) == 3


def test_a_class_trainable_sets_up_mlflow_in_setup_under_the_pods_trial_name(tmp_path, mlflow_server):
    stop_at_2 = dict(stop={"training_iteration": 2}, checkpoint=CheckpointPolicy(atEnd=False))
    code, output = run_tracked_trial(tmp_path, mlflow_server, {"lr": 0.3}, "tracked:Tracked", **stop_at_2)
    assert code == 0, output

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("trial-0")  # a class has no function session: the pod's variables
    (run,) = client.search_runs([experiment.experiment_id], filter_string="tags.kind = 'class'")
    assert (run.info.run_name, run.info.status, run.data.params) == ("trial-0", "FINISHED", {"lr": "0.3"})
    history = client.get_metric_history(run.info.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.3), (1, 0.15)]


def test_setup_mlflow_refuses_an_experiment_that_does_not_exist_as_ray_does(mlflow_server, monkeypatch):
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    with pytest.raises(ValueError, match="experiment_name: no-such-experiment does not exist"):
        tune_mlflow.setup_mlflow({}, tracking_uri=mlflow_server, experiment_name="no-such-experiment")


def test_a_gangs_other_ranks_get_no_op_trackers(tmp_path, monkeypatch, fresh_wandb):
    monkeypatch.setenv(RANK, "1")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    # no server: rank 1 asks nothing of it
    noop = tune_mlflow.setup_mlflow({"lr": 1}, tracking_uri="http://127.0.0.1:9", experiment_name="x")
    assert noop.log_metric("loss", 1.0) is None and noop.autolog() is None
    run = tune_wandb.setup_wandb({"lr": 1}, project="p")
    run.log({"loss": 1.0})
    run.finish()
    assert not (tmp_path / "wandb").exists()


@pytest.fixture
def fresh_wandb():
    """W&B's process-wide state (its settings, read from the environment once; its service) torn down before and
    after the test: a pod sets its environment once, a test changes it between calls."""
    wandb.teardown()
    yield
    wandb.teardown()


def test_setup_wandb_offline_writes_the_trials_run_with_rays_id_name_group_and_config(
    tmp_path, monkeypatch, fresh_wandb
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # offline needs none
    monkeypatch.setenv(EXPERIMENT, "digits")

    def train(config):
        run = tune_wandb.setup_wandb(config, project="kubetune-tests")
        for step in range(3):
            run.log({"loss": config["lr"] / (step + 1)})
            tune.report({"loss": config["lr"] / (step + 1)})

    trainable = wrap_function(train)(
        {"lr": 0.5, "model": {"depth": 3}, "data": Path("/data/digits")},
        logdir=str(tmp_path / "trial"),
        trial_id="digits-00001",
        trial_name="digits-00001",
    )
    results = []
    while not (result := trainable.train()).get(RESULT_DUPLICATE):
        results.append(result)
        assert len(results) < 10
    trainable.stop()
    attempt_ended(failed=False)  # what the pod's process does when the attempt ends: the run is finished

    by_type = wandb_records(tmp_path, "digits-00001")
    assert run_of(by_type) == ("digits-00001", "digits-00001", "digits", "kubetune-tests")
    config = config_of(by_type)
    assert config["lr"] == 0.5 and config["model"] == {"depth": 3}
    assert config["data"] == "/data/digits"  # not JSON: its str, as Ray's _clean_log
    losses = [float(item.value_json) for r in by_type["history"] for item in r.history.item if key_of(item) == "loss"]
    assert losses == [0.5, 0.25, 0.5 / 3]
    summary = {key_of(item): item.value_json for r in by_type.get("summary", []) for item in r.summary.update}
    assert float(summary["loss"]) == pytest.approx(0.5 / 3)
    (exit_record,) = [r.exit for r in by_type["exit"]]
    assert exit_record.exit_code == 0


def test_a_failing_trial_pods_wandb_run_is_written_whole_and_exits_1(tmp_path):
    """The trial pod's process, as a gang's head (which leaves with os._exit, past W&B's exit handler): the run
    is finished with exit code 1 when the trainable raises, and written whole."""
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "tracked_wandb.py").write_text(TRACKED_WANDB)
    env = runtime_env(
        tmp_path, f"file://{tmp_path / 'store'}/ns/exp/trial-0", config={"lr": 0.2}, entrypoint="tracked_wandb:train"
    )
    env.update(WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_CONSOLE="off", WANDB_SILENT="true")
    env.pop("WANDB_API_KEY", None)
    env.update({RANK: "0", WORLD_SIZE: "2", HOSTS: "head,worker"})  # a gang's head: it leaves with os._exit
    code, output = run_runtime(env, timeout_s=25)
    assert code == 1 and "the trainable failed" in output

    by_type = wandb_records(tmp_path, "trial-0")
    (run_record,) = [r.run for r in by_type["run"]]
    assert (run_record.run_id, run_record.display_name, run_record.run_group) == ("trial-0", "trial-0", "exp")
    losses = [float(item.value_json) for r in by_type["history"] for item in r.history.item if key_of(item) == "loss"]
    assert losses == [0.2, 0.1]
    (exit_record,) = [r.exit for r in by_type["exit"]]
    assert exit_record.exit_code == 1


def test_setup_wandb_asks_for_an_api_key_online_as_ray_does(tmp_path, monkeypatch, fresh_wandb):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no stored login
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    with pytest.raises(ValueError, match="No WandB API key found"):
        tune_wandb.setup_wandb({}, project="p")
    key_file = tmp_path / "key"
    key_file.write_text("k" * 40 + "\n")
    with pytest.raises(ValueError, match="Both WandB `api_key_file` and `api_key` set"):
        tune_wandb.setup_wandb({}, api_key="k", api_key_file=str(key_file))


def test_wandbs_logger_callback_passes_the_sdk_and_refuses_uploading_checkpoints():
    callback = tune_wandb.WandbLoggerCallback("p")
    assert legacy_run_args({"callbacks": [callback]}, name="exp", restore=None, storage=None).callbacks == [callback]
    with pytest.raises(ValueError, match="upload_checkpoints=True is not supported by kubetune: each trial's"):
        tune_wandb.WandbLoggerCallback("p", upload_checkpoints=True)
    with pytest.raises(ValueError, match="save_artifact=True is not supported by kubetune: each trial's folder"):
        tune_mlflow.MLflowLoggerCallback(experiment_name="e", save_artifact=True)


TRIAL_DIR = "s3://b/p/ns/exp/0123abcd/exp-0000"  # docs/architecture.md's layout, the index to add
DRIVER_EVENTS = [  # what the operator serves a driver pod (kubetune.env.DRIVER_EVENTS_PATH)
    {
        "seq": 0,
        "kind": "add",
        "trial": "exp-00000",
        "config": {"lr": 0.1, "net": {"width": 8}},
        "path": TRIAL_DIR + "0",
    },
    {
        "seq": 1,
        "kind": "add",
        "trial": "exp-00001",
        "config": {"lr": 0.2, "net": {"width": 4}},
        "path": TRIAL_DIR + "1",
    },
    {
        "seq": 2,
        "kind": "results",
        "trial": "exp-00000",
        "attempt": 0,
        "results": [
            {"training_iteration": 1, "loss": 0.5, "info": {"lr_now": 0.1}, "done": False, "hostname": "pod-a"},
            {"training_iteration": 2, "loss": 0.25, "info": {"lr_now": 0.05}, "done": True, "hostname": "pod-a"},
        ],
    },
    {
        "seq": 3,
        "kind": "results",
        "trial": "exp-00001",
        "attempt": 0,
        "results": [{"training_iteration": 1, "loss": 2}],
    },
    {"seq": 4, "kind": "end", "trial": "exp-00000", "how": "complete", "result": None},
]


#: What a driver pod that took over is handed next: exp-00001's second result, then its end with an error.
SUCCESSOR_EVENTS = [
    {
        "seq": 5,
        "kind": "results",
        "trial": "exp-00001",
        "attempt": 1,
        "results": [{"training_iteration": 2, "loss": 1}],
    },
    {"seq": 6, "kind": "end", "trial": "exp-00001", "how": "error", "result": None},
]


def test_mlflows_logger_callback_logs_each_trial_as_a_run_from_the_driver_and_finds_it_again(mlflow_server):
    """Ray's MLflowLoggerCallback, called by the driver pod's loop (``kubetune.runtime.driver.deliver``) against a real
    tracking server: a run per trial with Ray's name, tags, parameters and metrics at each step; a driver that took
    over (a new callback object, as a new driver pod unpickles) logs into the same runs and ends them."""
    callback = tune_mlflow.MLflowLoggerCallback(mlflow_server, experiment_name="driven", tags={"team": "t"})
    state = DriverState()
    callback.setup(stop=None, num_samples=2, total_num_samples=2)
    deliver([callback], state, DRIVER_EVENTS)
    callback.on_step_end(iteration=state.cursor, trials=list(state.trials.values()))  # the loop's, before it saves
    successor = tune_mlflow.MLflowLoggerCallback(mlflow_server, experiment_name="driven", tags={"team": "t"})
    successor.setup()
    deliver([successor], state, SUCCESSOR_EVENTS)
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("driven")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["exp-00000", "exp-00001"]  # one run per trial, the successor's found again
    first, second = runs["exp-00000"], runs["exp-00001"]
    assert first.data.tags["trial_name"] == "exp-00000" and first.data.tags["team"] == "t"
    assert first.data.params == {"lr": "0.1", "net/width": "8"}
    steps = [(m.step, m.value) for m in client.get_metric_history(first.info.run_id, "loss")]
    assert steps == [(1, 0.5), (2, 0.25)]
    assert [m.value for m in client.get_metric_history(first.info.run_id, "info/lr_now")] == [0.1, 0.05]
    assert "hostname" not in first.data.metrics and first.data.metrics["done"] == 1.0  # what float() takes, as Ray
    assert [(m.step, m.value) for m in client.get_metric_history(second.info.run_id, "loss")] == [(1, 2.0), (2, 1.0)]
    assert (first.info.status, second.info.status) == ("FINISHED", "FAILED")


def test_mlflows_logger_callback_logs_the_config_at_the_end_when_asked(mlflow_server):
    callback = tune_mlflow.MLflowLoggerCallback(mlflow_server, experiment_name="late", log_params_on_trial_end=True)
    callback.setup()
    state = DriverState()
    deliver([callback], state, DRIVER_EVENTS[:1])
    client = MlflowClient(tracking_uri=mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("late").experiment_id])
    assert run.data.params == {}
    deliver([callback], state, DRIVER_EVENTS[4:])
    assert client.get_run(run.info.run_id).data.params == {"lr": "0.1", "net/width": "8"}


def test_wandbs_logger_callback_logs_each_trial_as_a_run_from_the_driver_and_a_successor_logs_on(
    tmp_path, monkeypatch, fresh_wandb
):
    """Ray's WandbLoggerCallback, called by the driver pod's loop (``kubetune.runtime.driver.deliver``), offline: a
    run per trial with Ray's id, name, group (the experiment's name), project and config; each result's numbers at its
    ``training_iteration`` (``done`` left out, ``hostname`` in the config, as Ray's). A successor (a new callback in a
    new process, as a new driver pod unpickles, after the first died holding an open run) starts the run of the same
    id again, logs what it is handed (an event the first handled but had not saved its place after, again) and ends
    it: offline, in a run folder of its own."""
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # offline needs none
    callback = tune_wandb.WandbLoggerCallback("kubetune-tests", mode="offline", dir=str(tmp_path), excludes=["info"])
    state = DriverState()
    callback.setup(stop=None, num_samples=2, total_num_samples=2)
    deliver([callback], state, DRIVER_EVENTS)
    wandb.teardown()  # the first driver pod dies: W&B's service goes with it, exp-00001's run never finished
    successor_dir = tmp_path / "successor"  # the new pod's own folder (two offline runs started in one second
    successor_dir.mkdir()  # would share one folder name)
    successor = tune_wandb.WandbLoggerCallback(
        "kubetune-tests", mode="offline", dir=str(successor_dir), excludes=["info"]
    )
    successor.setup()
    again = {**DRIVER_EVENTS[3], "seq": 5, "attempt": 1}  # the first handled it, but had not saved its place after
    deliver([successor], state, [again, *({**event, "seq": event["seq"] + 1} for event in SUCCESSOR_EVENTS)])
    successor.on_experiment_end(trials=list(state.trials.values()))
    wandb.teardown()  # W&B's service writes what it holds

    first = wandb_records(tmp_path, "exp-00000")
    assert run_of(first) == ("exp-00000", "exp-00000", "exp", "kubetune-tests")
    config = config_of(first)
    assert config["lr"] == 0.1 and config["net"] == {"width": 8} and config["hostname"] == "pod-a"
    history = history_of(first)
    assert [(h["training_iteration"], h["loss"]) for h in history] == [(1, 0.5), (2, 0.25)]
    assert not any(key in h for h in history for key in ("done", "hostname", "config/lr", "info/lr_now"))
    assert "exit" in first

    before, after = wandb_records(tmp_path, "exp-00001"), wandb_records(successor_dir, "exp-00001")
    assert [(h["training_iteration"], h["loss"]) for h in history_of(before)] == [(1, 2)]
    assert [(h["training_iteration"], h["loss"]) for h in history_of(after)] == [(1, 2), (2, 1)] and "exit" in after
    assert [r.run.run_id for r in after["run"]] == ["exp-00001"]


def test_the_modules_import_without_their_libraries():
    """The SDK's machine imports the modules (for the callbacks) without MLflow or W&B installed."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["mlflow"] = None
        sys.modules["wandb"] = None
        from kubetune.integrations.mlflow import MLflowLoggerCallback, setup_mlflow
        from kubetune.integrations.wandb import WandbLoggerCallback, setup_wandb
        for setup, name in ((setup_mlflow, "mlflow"), (setup_wandb, "wandb")):
            try:
                setup({})
            except RuntimeError as exc:
                assert f"kubetune[{name}]" in str(exc), exc
            else:
                raise AssertionError(name)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_the_attempts_closers_run_once_in_order_past_a_failing_one(caplog):
    """``kubetune.runtime.attempt_end``: what the pod's process runs when the attempt ends, with its outcome."""
    seen = []

    def failing(failed):
        raise ConnectionError("tracker unreachable")

    at_attempt_end(lambda failed: seen.append(("first", failed)))
    at_attempt_end(failing)
    at_attempt_end(lambda failed: seen.append(("last", failed)))
    attempt_ended(failed=True)
    attempt_ended(failed=False)  # nothing left: each closer runs once
    assert seen == [("first", True), ("last", True)]
    assert "tracker unreachable" in caplog.text
