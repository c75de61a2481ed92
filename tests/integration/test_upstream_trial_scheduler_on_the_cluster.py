"""Ray Tune's own scheduler tests that run through ``tune.run``, ported onto the local cluster (issue 23.5).

Source: ``python/ray/tune/tests/test_trial_scheduler.py`` of Ray 2.x (see
``tests/unit/test_upstream_trial_scheduler.py``, which has the tests that need no cluster and lists the ones left
out). The assertions are Ray's, unchanged. The
setup is kubetune's: ``import kubetune as tune``, each run named and given the test's namespace and storage
(:mod:`tests.integration.upstream_setup`), Ray's ``ray.train`` session calls as ``tune.report``/``tune.get_checkpoint``,
and a trial's ``run_metadata.last_result`` as its ``last_result``.

Ported here: ``BOHBSuite::testNonstopBOHB``, ``E2EPopulationBasedTestingSuite::testCheckpointing`` and
``testCheckpointDict``, and ``AsyncHyperBandSuite::testAnonymousMetricEndToEnd{FIFO,ASHA,BOHB,Median,PBT}``
(Ray's ``Trial.TERMINATED`` is ``kubetune.sdk.analysis.TERMINATED``).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter

import pytest

import kubetune as tune
from kubetune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandForBOHB,
    MedianStoppingRule,
    PopulationBasedTraining,
)
from kubetune.sdk.analysis import TERMINATED
from kubetune.search import ConcurrencyLimiter
from kubetune.search.bohb import TuneBOHB
from tests.integration.upstream_setup import on_cluster  # noqa: F401 - fixture


def test_nonstop_bohb(on_cluster):  # noqa: F811 - fixture
    """Ray 2.x ``test_trial_scheduler.py::BOHBSuite::testNonstopBOHB``: with ``stop_last_trials=False`` the
    survivors of HyperBandForBOHB's brackets run on past ``max_t`` to the stop criteria."""

    def train_fn(cfg):
        start = 0
        if tune.get_checkpoint():
            with tune.get_checkpoint().as_directory() as checkpoint_dir:
                with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
                    start = int(f.read())

        for i in range(start, 200):
            time.sleep(0.1)

            with tempfile.TemporaryDirectory() as checkpoint_dir:
                with open(os.path.join(checkpoint_dir, "checkpoint"), "w") as f:
                    f.write(str(i))
                tune.report(dict(episode_reward_mean=i), checkpoint=tune.Checkpoint.from_directory(checkpoint_dir))

    config = {"test_variable": tune.uniform(0, 20)}
    sched = HyperBandForBOHB(max_t=10, reduction_factor=3, stop_last_trials=False)
    alg = ConcurrencyLimiter(TuneBOHB(), 4)
    analysis = tune.run(
        train_fn,
        scheduler=sched,
        search_alg=alg,
        stop={"training_iteration": 32},
        num_samples=20,
        config=config,
        metric="episode_reward_mean",
        mode="min",
        fail_fast="raise",
        name="nonstop-bohb",
        **on_cluster.run,
    )
    counter = Counter(t.last_result.get("training_iteration") for t in analysis.trials)
    assert 32 in counter
    assert counter[32] > 1


@pytest.mark.parametrize(
    "scheduler_cls, searcher",
    [
        (FIFOScheduler, None),
        (AsyncHyperBandScheduler, None),
        (HyperBandForBOHB, TuneBOHB),
        (MedianStoppingRule, None),
        (lambda: PopulationBasedTraining(hyperparam_mutations={"ignored": [1]}), None),
    ],
    ids=["FIFO", "ASHA", "BOHB", "Median", "PBT"],
)
def test_anonymous_metric_end_to_end(on_cluster, scheduler_cls, searcher):  # noqa: F811 - fixture
    """Ray 2.x ``test_trial_scheduler.py::AsyncHyperBandSuite::testAnonymousMetricEndToEnd{FIFO,ASHA,BOHB,Median,
    PBT}``: ``mode`` alone ranks the value a function returns (Ray's ``_metric``) under every scheduler."""

    def train_fn(config):
        return config["value"]

    out = tune.run(
        train_fn,
        mode="max",
        num_samples=1,
        config={"value": tune.uniform(-2.0, 2.0)},
        scheduler=scheduler_cls(),
        search_alg=searcher() if searcher else None,
        name="anonymous-metric",
        **on_cluster.run,
    )

    assert bool(out.best_trial)


def e2e_pbt(perturbation_interval=10):
    """Ray's ``E2EPopulationBasedTestingSuite.basicSetup``."""
    return PopulationBasedTraining(
        metric="mean_accuracy",
        mode="max",
        time_attr="training_iteration",
        perturbation_interval=perturbation_interval,
        resample_probability=0.0,
        quantile_fraction=0.25,
        hyperparam_mutations={"float_factor": lambda: 100.0, "int_factor": lambda: 10, "id_factor": [100]},
        custom_explore_fn=None,
        log_config=False,
    )


TRIAL_HYPERPARAMS = {"float_factor": 2.0, "const_factor": 3, "int_factor": 10, "id_factor": 0}


class PBTCheckpointFile(tune.Trainable):
    """``testCheckpointing``'s trainable: a checkpoint written as a file."""

    def step(self):
        return {"mean_accuracy": self.training_iteration}

    def save_checkpoint(self, path):
        checkpoint = os.path.join(path, "checkpoint")
        with open(checkpoint, "w") as f:
            f.write("OK")

    def reset_config(self, config):
        return True

    def load_checkpoint(self, checkpoint):
        pass


class PBTCheckpointDict(tune.Trainable):
    """``testCheckpointDict``'s trainable: a checkpoint returned as a dict."""

    def setup(self, config):
        self.state = {"hi": 1}

    def step(self):
        return {"mean_accuracy": self.training_iteration}

    def save_checkpoint(self, path):
        return self.state

    def load_checkpoint(self, state):
        self.state = state

    def reset_config(self, config):
        return True


@pytest.mark.parametrize(
    "trainable", [PBTCheckpointFile, PBTCheckpointDict], ids=["testCheckpointing", "testCheckpointDict"]
)
def test_pbt_checkpointing_end_to_end(on_cluster, trainable):  # noqa: F811 - fixture
    """Ray 2.x ``test_trial_scheduler.py::E2EPopulationBasedTestingSuite::testCheckpointing`` and
    ``::testCheckpointDict``: PBT over 3 trials of 30 iterations, a checkpoint every 3; every trial ends
    terminated with a checkpoint."""
    pbt = e2e_pbt(perturbation_interval=10)

    analysis = tune.run(
        trainable,
        num_samples=3,
        scheduler=pbt,
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=3),
        config=TRIAL_HYPERPARAMS,
        stop={"training_iteration": 30},
        name="pbt-checkpointing",
        **on_cluster.run,
    )

    for trial in analysis.trials:
        assert trial.status == TERMINATED
        assert trial.has_checkpoint()
