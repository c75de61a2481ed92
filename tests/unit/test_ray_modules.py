"""Ray's modules that Ray's example scripts import, with ``ray.tune`` replaced by ``kubetune`` (issue 33):
``kubetune.result`` (Ray's result keys), ``kubetune.utils.mock_trainable`` (``MyTrainableClass``) and
``kubetune.logger`` (the loggers and logger callbacks, which ``tune.run`` and ``Tuner`` accept when the trial pods
write their files anyway and refuse by name when they are user code)."""

from __future__ import annotations

import json
import math

import pytest
from conftest_runtime import run_runtime, runtime_env

import kubetune as tune
from kubetune import logger, result
from kubetune.checkpoint_store import list_checkpoints
from kubetune.env import CheckpointPolicy
from kubetune.runtime.trainable import Trainable
from kubetune.sdk.client import ClusterUnavailable
from kubetune.sdk.tuner import Tuner, legacy_run_args
from kubetune.storage import open_storage
from kubetune.tuner import RunConfig
from kubetune.utils.mock_trainable import MyTrainableClass

#: Ray 2.x's ``ray/tune/result.py`` (with ``TIMESTAMP`` and ``TIME_THIS_ITER_S`` from ``ray.air.constants``).
RAY_RESULT_KEYS = {
    "DONE": "done",
    "SHOULD_CHECKPOINT": "should_checkpoint",
    "HOSTNAME": "hostname",
    "TRIAL_ID": "trial_id",
    "EXPERIMENT_TAG": "experiment_tag",
    "NODE_IP": "node_ip",
    "PID": "pid",
    "DEFAULT_METRIC": "_metric",
    "EPISODE_REWARD_MEAN": "episode_reward_mean",
    "MEAN_LOSS": "mean_loss",
    "MEAN_ACCURACY": "mean_accuracy",
    "EPISODES_THIS_ITER": "episodes_this_iter",
    "EPISODES_TOTAL": "episodes_total",
    "TIMESTEPS_THIS_ITER": "timesteps_this_iter",
    "TIMESTEPS_TOTAL": "timesteps_total",
    "TIME_THIS_ITER_S": "time_this_iter_s",
    "TIME_TOTAL_S": "time_total_s",
    "TRAINING_ITERATION": "training_iteration",
    "TIMESTAMP": "timestamp",
}


def test_result_has_rays_names_and_values():
    assert {name: getattr(result, name) for name in RAY_RESULT_KEYS} == RAY_RESULT_KEYS
    assert set(result.__all__) == {*RAY_RESULT_KEYS, "DEFAULT_RESULT_KEYS", "DEBUG_METRICS", "AUTO_RESULT_KEYS"}
    assert result.DEFAULT_RESULT_KEYS == ("training_iteration", "time_total_s", "mean_accuracy", "mean_loss")
    assert tune.result is result and tune.logger is logger


def test_a_trainables_result_holds_every_key_ray_fills():
    class Stepper(Trainable):
        def step(self):
            return {result.MEAN_ACCURACY: 0.5}

    filled = Stepper({}).train()
    assert set(result.AUTO_RESULT_KEYS) | set(result.DEBUG_METRICS) <= set(filled)
    assert filled[result.TRAINING_ITERATION] == 1 and filled[result.DONE] is False


def test_my_trainable_class_rises_as_rays_and_restores_its_timestep(tmp_path):
    trainable = MyTrainableClass({"width": 2, "height": 3})
    values = [trainable.train()["episode_reward_mean"] for _ in range(3)]
    assert values == pytest.approx([3 * math.tanh(i / 2) for i in (1, 2, 3)])
    path = trainable.save(str(tmp_path))
    restored = MyTrainableClass({"width": 2, "height": 3})
    restored.restore(path)
    assert restored.timestep == 3 and restored.train()["episode_reward_mean"] == pytest.approx(3 * math.tanh(2))
    assert MyTrainableClass({}).train()["episode_reward_mean"] == pytest.approx(math.tanh(1))  # width, height: 1


def test_my_trainable_class_runs_in_a_trial_pod_to_rays_stop_and_resumes_from_its_checkpoint(tmp_path):
    """pbt_example.py's ``stop={"done": True, "training_iteration": ...}`` with MyTrainableClass, in the runtime
    process a trial pod runs; a second attempt restores the checkpoint of the first."""
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    common = dict(
        config={"width": 4, "height": 2},
        entrypoint="kubetune.utils.mock_trainable:MyTrainableClass",
        checkpoint=CheckpointPolicy(frequency=0, atEnd=True),
    )
    code, output = run_runtime(runtime_env(tmp_path, uri, stop={"done": True, "training_iteration": 2}, **common))
    assert code == 0, output
    code, output = run_runtime(
        runtime_env(tmp_path, uri, stop={"done": True, "training_iteration": 4}, attempt=1, **common)
    )
    assert code == 0, output
    storage = open_storage(uri)
    lines = [json.loads(line) for line in storage.get_bytes(f"{uri}/result.json").decode().splitlines()]
    assert [r["training_iteration"] for r in lines] == [1, 2, 3, 4]
    assert [r["episode_reward_mean"] for r in lines] == pytest.approx([2 * math.tanh(i / 4) for i in (1, 2, 3, 4)])
    assert [c.iteration for c in list_checkpoints(storage, uri)[0]] == [2, 4]


def test_loggers_keep_rays_interface():
    seen = []

    class Recording(logger.Logger):
        def _init(self):
            seen.append(("init", self.logdir))

        def on_result(self, result):
            seen.append(("result", result["x"], self.config["lr"]))

    unified = logger.UnifiedLogger({"lr": 1}, "/tmp/trial", loggers=[Recording, logger.NoopLogger])
    unified.on_result({"x": 1})
    unified.update_config({"lr": 2})
    unified.on_result({"x": 2})
    unified.flush()
    unified.close()
    assert seen == [("init", "/tmp/trial"), ("result", 1, 1), ("result", 2, 2)]
    with pytest.raises(NotImplementedError, match="must override on_result"):
        logger.Logger({}, "/tmp/trial").on_result({})
    with pytest.raises(NotImplementedError, match="each trial pod writes progress.csv itself"):
        logger.CSVLogger({}, "/tmp/trial").on_result({})
    assert logger.DEFAULT_LOGGERS == (logger.JsonLogger, logger.CSVLogger, logger.TBXLogger)
    callback = logger.LoggerCallback()
    assert callback.log_trial_result(1, None, {"x": 1}) is None and callback.log_trial_end(None, failed=True) is None


def test_the_loggers_the_pods_stand_in_for_are_accepted():
    args = legacy_run_args(
        {
            "loggers": logger.DEFAULT_LOGGERS,
            "callbacks": [logger.JsonLoggerCallback(), logger.CSVLoggerCallback(), logger.TBXLoggerCallback()],
        },
        name="exp",
        restore=None,
        storage="s3://b/p",
    )
    assert args == (None, "s3://b/p", False, [], ())  # the pods write their files: nothing for the driver or trials


class MLflowLike(logger.LoggerCallback):
    def log_trial_result(self, iteration, trial, result):
        raise AssertionError("never called")


class CustomLogger(logger.Logger):
    def on_result(self, result):
        raise AssertionError("never called")


class OwnCSV(logger.CSVLoggerCallback):
    """A subclass of a built-in one is user code too."""


def test_a_logger_callback_of_your_own_goes_to_the_driver_pod_and_a_logger_of_your_own_to_the_trial_pods():
    mine, own_csv = MLflowLike(), OwnCSV()
    args = legacy_run_args(
        {"callbacks": [logger.JsonLoggerCallback(), mine, own_csv]}, name="e", restore=None, storage=None
    )
    assert args.callbacks == [mine, own_csv]  # a subclass of a built-in one is user code too: it runs there
    given = {"loggers": logger.DEFAULT_LOGGERS + (CustomLogger,)}  # Ray 0.8's user guide, "Logging"
    assert legacy_run_args(given, name="e", restore=None, storage=None).loggers == (CustomLogger,)  # the trial pods'
    message = r"loggers: str is not supported by kubetune: an entry of loggers must be a tune.logger.Logger class"
    with pytest.raises(ValueError, match=message):
        tune.run("m:T", name="exp", storage="s3://b/p", loggers=("json",))  # before any cluster is asked
    with pytest.raises(ValueError, match="callbacks: CustomLogger is not supported by kubetune: a callback must be"):
        tune.run("m:T", name="exp", storage="s3://b/p", callbacks=[CustomLogger({}, "/tmp")])


def test_tuner_takes_a_logger_callback_of_your_own_for_the_driver_pod(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    for callbacks in ([MLflowLike()], [logger.JsonLoggerCallback(), logger.TBXLoggerCallback()]):
        with pytest.raises(ClusterUnavailable):  # past the arguments' checks: the next step asks the cluster
            Tuner("m:T", run_config=RunConfig(callbacks=callbacks, storage_path="s3://b/p")).fit()
    with pytest.raises(ValueError, match="callbacks: int is not supported by kubetune"):
        Tuner("m:T", run_config=RunConfig(callbacks=[1])).fit()
