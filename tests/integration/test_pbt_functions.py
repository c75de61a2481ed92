"""PBT with a function in ``hyperparam_mutations`` through ``tune.run`` on the local cluster while the operator
is SIGKILLed every few seconds (issue 23.3): the SDK pickles the lambda to storage, the exploited trials' pods
call it and report the config they chose, and every perturbed Trial ends with a value only the lambda gives."""

from __future__ import annotations

import json
import os
import random
import time

import kubetune as tune
from kubetune.schedulers import PopulationBasedTraining
from tests.integration.test_faults import Killer
from tests.integration.test_operator import trials
from tests.integration.test_sdk import sdk_env, storage  # noqa: F401 - sdk_env is a fixture


class Climb(tune.Trainable):
    """Its score grows by ``lr`` per step, from its checkpoint."""

    def setup(self, config):
        self.score = 0.0

    def step(self):
        time.sleep(0.6)
        self.score += self.config["lr"]
        return {"score": self.score}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "s.json"), "w") as f:
            json.dump({"score": self.score}, f)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "s.json")) as f:
            self.score = json.load(f)["score"]


def test_a_lambda_in_hyperparam_mutations_runs_in_the_exploited_pods_while_the_operator_is_killed(
    operator,
    custom,
    namespace,
    storage_secret,
    sdk_env,  # noqa: F811
):
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        resample_probability=1.0,
        hyperparam_mutations={"lr": lambda: random.uniform(0.5, 0.6)},
    )
    with Killer(operator, every_s=2.5) as killer:
        analysis = tune.run(
            Climb,
            name="pbt-fn",
            namespace=namespace,
            storage=storage(storage_secret),
            config={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4])},
            scheduler=pbt,
            metric="score",
            mode="max",
            stop={"training_iteration": 12},
            max_concurrent_trials=4,
            verbose=0,
            poll_interval_s=0.5,
        )
    assert killer.kills >= 2
    found = trials(custom, namespace)
    assert len(found) == 4 and all(t["status"]["phase"] == "Succeeded" for t in found.values())
    perturbed = [t for t in found.values() if t["status"].get("perturbations")]
    assert perturbed, {n: t["status"].get("reason") for n, t in found.items()}
    for trial in perturbed:  # the lambda's values: no list, domain or factor of the grid gives them
        assert 0.5 <= trial["status"]["config"]["lr"] < 0.6, trial["status"]
        assert 0.5 <= trial["status"]["perturbations"][-1]["newConfig"]["lr"] < 0.6
    by_name = {t.trial_id: t for t in analysis.trials}
    for trial in perturbed:
        assert 0.5 <= by_name[trial["metadata"]["name"]].config["lr"] < 0.6
