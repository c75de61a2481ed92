"""PB2: the explore step chooses what Ray 2.60's chooses on the same data, the scheduler leaves each exploit's
config open until its explore step is taken (in order, on the data of its exploit), and the operator waits for
it before the exploited trial's next attempt."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from devcluster.testkit import experiment_object, population_rows
from kubetune.env import OUTCOME_COMPLETED, OUTCOME_PAUSED, read_trial_env
from kubetune_operator import explore_pool as explorer
from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.controller import ExperimentController
from kubetune_operator.pbt_perturbation import EXPLORING_MESSAGE
from kubetune_operator.podview import PodView
from kubetune_operator.schedulers.base import PAUSE
from kubetune_operator.schedulers.pb2_gp import TimeVaryingSquaredExp, select, steps
from kubetune_operator.settings import Settings

BOUNDS = {"lr": [1e-4, 0.1], "m": [0.0, 1.0]}


# What Ray 2.60's pb2._explore returned on population_rows(seed, count) for donor t3 (np.random.seed(7) before
# the call, as select's own seed 7), with these configs chosen since the latest time: new lr and m, and the
# time and reward of the row it added. 240 rows: the fitted window is chosen by marginal likelihood.
RAY_CHOICES = [
    (0, 64, None, [0.007723198272287846, 0.7799187898635864], 32.0, 6.199410416177082),
    (0, 64, [[0.0077, 0.78], [0.0077, 0.7]], [0.10000000149011612, 0.0], 32.0, 6.199410416177082),
    (1, 120, None, [0.09894580394029617, 0.3028295338153839], 60.0, 9.84664693185079),
    (1, 120, [[0.099, 0.3]], [0.09378407895565033, 0.6191648840904236], 60.0, 9.84664693185079),
    (2, 240, None, [0.06795507669448853, 0.8037390112876892], 120.0, 20.146023509479047),
]


@pytest.mark.parametrize("seed, count, current, values, time, reward", RAY_CHOICES)
def test_the_explore_step_chooses_what_rays_chooses_on_the_same_data(seed, count, current, values, time, reward):
    job = {"rows": population_rows(seed, count), "bounds": list(BOUNDS.values()), "donor": "t3"}
    outcome = select({**job, "current": current, "seed": 7})
    # float32 values, as Ray's: equal up to the last bits the kernel's arithmetic order changes
    assert outcome["values"] == pytest.approx(values, rel=1e-5, abs=1e-6)
    assert (outcome["time"], outcome["reward"]) == (time, reward)
    assert select({**job, "current": current, "seed": 7}) == outcome  # a pure function of its job


def test_steps_difference_reward_and_time_within_each_trial_and_config():
    rows = [
        ["a", 2.0, [0.1], 1.0],
        ["b", 2.0, [0.5], 2.0],
        ["a", 4.0, [0.1], 3.0],
        ["a", 4.0, [0.3], 2.0],  # a's exploit: a new config starts a new group, no step yet
        ["a", 6.0, [0.3], 5.0],
        ["b", 4.0, [0.5], float("nan")],  # a NaN metric: no step into it nor out of it
        ["b", 6.0, [0.5], 4.0],
    ]
    X, y, trials, rewards = steps(rows)
    assert trials == ["a", "a"] and list(rewards) == [3.0, 5.0]
    assert X.tolist() == [[4.0, 1.0, 0.1], [6.0, 2.0, 0.3]] and y.tolist() == [1.0, 1.5]
    assert select({"rows": rows, "bounds": [[0, 1]], "donor": "b", "current": None, "seed": 0}) == {"values": None}


def test_the_kernels_gradient_is_that_of_its_log_hyperparameters():
    kernel = TimeVaryingSquaredExp(variance=1.7, lengthscale=0.6, epsilon=0.2)
    X = np.random.RandomState(0).uniform(0, 1, (5, 3))
    K, gradient = kernel(X, eval_gradient=True)
    assert np.allclose(np.diag(K), kernel.diag(X)) and np.allclose(K, K.T)
    for i in range(3):
        theta = kernel.theta.copy()
        theta[i] += 1e-6
        numeric = (kernel.clone_with_theta(theta)(X) - K) / 1e-6
        assert np.allclose(gradient[:, :, i], numeric, atol=1e-4), i


def make(**params):
    base = {"time_attr": "training_iteration", "perturbation_interval": 2, "hyperparam_bounds": {"lr": [0.0, 1.0]}}
    return create_scheduler("pb2", "acc", "max", **{**base, **params})


def run_population(scheduler, explore_at_once: bool) -> list:
    """Four trials, lr 0.1..0.4, acc += lr per iteration for 8 iterations; each exploit's explore step taken at
    once, or only after the round of results that follows it. Returns (iteration, trial, donor, config) per
    exploit."""
    names = [f"t{i}" for i in range(4)]
    for i, name in enumerate(names):
        scheduler.on_trial_add(name)
        scheduler.set_trial_config(name, {"lr": 0.1 * (i + 1)})
    acc, log, pending = dict.fromkeys(names, 0.0), [], []
    for iteration in range(1, 9):
        for name in names:
            acc[name] += scheduler._configs[name]["lr"]
            if scheduler.on_trial_result(name, {"training_iteration": iteration, "acc": acc[name]}) == PAUSE:
                exploit = scheduler.take_exploit(name)
                assert exploit["config"] is None and exploit["operations"] == {}
                pending.append((iteration, name, exploit["donor"]))
                if explore_at_once:
                    log.extend(resolve(scheduler, pending))
        log.extend(resolve(scheduler, pending))
    return log


def resolve(scheduler, pending: list) -> list:
    done = []
    while pending:
        iteration, name, donor = pending.pop(0)
        job = scheduler.next_exploration()
        assert (job["trial"], job["donor"]) == (name, donor)
        chosen = scheduler.explored(name, select(job))
        done.append((iteration, name, donor, chosen["config"]))
    assert scheduler.next_exploration() is None
    return done


def test_an_explore_step_taken_late_chooses_what_one_taken_at_once_does():
    """The operator computes explore steps in a worker while results keep coming: a job holds the data as they
    were at its exploit, so its choice does not depend on when it is computed (Ray computes it at once)."""
    at_once = run_population(make(), explore_at_once=True)
    late = run_population(make(), explore_at_once=False)
    assert at_once == late and len(at_once) >= 3
    assert all(0.0 <= config["lr"] <= 1.0 for *_, config in at_once)
    assert len({config["lr"] for *_, config in at_once}) == len(at_once)  # GP choices, not the donor's copies


def test_state_with_open_explore_steps_resumes_to_the_same_choices():
    scheduler = make()
    names = [f"t{i}" for i in range(4)]
    for i, name in enumerate(names):
        scheduler.on_trial_add(name)
        scheduler.set_trial_config(name, {"lr": 0.1 * (i + 1)})
    for iteration in (1, 2, 3, 4):
        for i, name in enumerate(names):
            scheduler.on_trial_result(name, {"training_iteration": iteration, "acc": (i + 1) * iteration})
    assert scheduler.next_exploration() is not None
    clone = make()
    clone.set_state(json.loads(json.dumps(scheduler.get_state(), allow_nan=False)))
    for one in (scheduler, clone):
        job = one.next_exploration()
        one.explored(job["trial"], select(job))
    assert clone.get_state() == scheduler.get_state()
    with pytest.raises(ValueError, match="no open PB2 exploit"):
        clone.explored("t3", {"values": None})


def test_fill_config_samples_missing_bounded_keys_the_same_way_every_time():
    scheduler = make(hyperparam_bounds={"lr": [0.5, 0.6], "opt": {"momentum": [0.8, 0.9]}})
    filled = scheduler.fill_config("exp-00001", {"lr": 0.01, "batch": 32})
    assert filled["lr"] == 0.01 and filled["batch"] == 32 and 0.8 <= filled["opt"]["momentum"] <= 0.9
    assert scheduler.fill_config("exp-00001", {"lr": 0.01, "batch": 32}) == filled
    assert scheduler.fill_config("exp-00002", {"lr": 0.01}) != filled


@pytest.mark.parametrize(
    "bounds, words",
    [
        ({}, "non-empty"),
        ({"lr": [1, 0]}, "low <= high"),
        ({"lr": [0, 1, 2]}, "two numbers"),
        ({"opt": {"m": "x"}}, "hyperparam_bounds.opt.m"),
    ],
)
def test_bad_bounds_are_refused_with_the_key(bounds, words):
    with pytest.raises(ValueError, match=words):
        make(hyperparam_bounds=bounds)


def test_log_config_reaches_the_operators_pb2_from_the_sdk():
    from kubetune.schedulers import PB2

    spec = PB2(time_attr="training_iteration", hyperparam_bounds={"lr": [0.0, 1.0]}, log_config=False).to_spec()
    assert spec["params"]["log_config"] is False
    assert make(log_config=False).log_config is False and make().log_config is True
    assert "log_config" not in PB2(hyperparam_bounds={"lr": [0.0, 1.0]}).to_spec()["params"]  # Ray's default


def experiment():
    return experiment_object(
        image="img",
        config={"lr": {"grid_search": [0.1, 0.2, 0.3, 0.4]}},
        metric="acc",
        mode="max",
        maxConcurrentTrials=4,
        storage={"uri": "s3://bucket/prefix"},
        scheduler={
            "name": "pb2",
            "params": {
                "time_attr": "training_iteration",
                "perturbation_interval": 2,
                "hyperparam_bounds": {"lr": [0.0, 1.0], "momentum": [0.8, 0.99]},
            },
        },
    )


def test_the_operator_waits_for_the_explore_step_then_restarts_the_trial_with_its_config():
    ctl = ExperimentController(experiment(), Settings(), b"k" * 32)
    ctl.restore([])
    plan = ctl.plan({}, 1000.0)
    for m in plan.create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
        assert 0.8 <= m["spec"]["config"]["momentum"] <= 0.99  # filled from its bounds, as Ray's on_trial_add
    ctl.plan({}, 1001.0)
    names = sorted(ctl.trials)
    worst = names[0]
    for it in (1, 2, 3, 4):  # the others first: at 4 the donor has a step (2 -> 4) for the GP to fit
        for i, name in reversed(list(enumerate(names))):
            decision = ctl.record_results(name, 0, [{"training_iteration": it, "acc": i * it}], None)
            assert (decision == "pause") == ((name, it) == (worst, 4)), (name, it, decision)
    ended = {
        f"{worst}-0": PodView(
            f"{worst}-0", worst, 0, "Succeeded", message=json.dumps({"outcome": OUTCOME_PAUSED, "iteration": 4})
        )
    }
    ctl.plan(ended, 1002.0)  # paused, its config not chosen yet: it waits, and says so
    trial = ctl.trials[worst]
    assert (trial.phase, trial.attempt, trial.status["reason"]) == ("Paused", 0, "Exploring")
    assert trial.status["message"] == EXPLORING_MESSAGE and ctl.admission.scheduler_paused() == []
    job = ctl.exploration()
    assert job["trial"] == worst and ctl.plan(ended, 1003.0).create_pods == []
    outcome = select(job)
    ctl.explored(worst, outcome)
    assert ctl.journal.pending[-1] == ["explored", worst, outcome]
    plan = ctl.plan(ended, 1004.0)
    assert (trial.phase, trial.attempt, trial.status["reason"]) == ("Pending", 1, "Perturbed")
    assert [trial.config["lr"], trial.config["momentum"]] == outcome["values"]
    (pod,) = [p for p in plan.create_pods if p["metadata"]["name"] == f"{worst}-1"]
    variables = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    env = read_trial_env(variables, plan.token_secrets[pod["metadata"]["name"]]["stringData"]["config.json"])
    (record,) = trial.status["perturbations"]
    assert env.config == trial.config and env.restore_from.endswith(f"{record['donor']}/checkpoint_000004")
    assert record["operations"] == {} and record["newConfig"] == {
        "lr": trial.config["lr"],
        "momentum": trial.config["momentum"],
    }
    assert ctl.exploration() is None


def reported_four_steps(reverse: bool = False) -> tuple[ExperimentController, list[str]]:
    """A controller whose four trials reported iterations 1 to 4 (trial i's ``acc`` i times the iteration, the
    trials in reverse order when ``reverse``): the worst one's exploit is decided at 4."""
    ctl = ExperimentController(experiment(), Settings(), b"k" * 32)
    ctl.restore([])
    for m in ctl.plan({}, 1000.0).create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
    ctl.plan({}, 1001.0)
    names = sorted(ctl.trials)
    order = list(enumerate(names))
    for it in (1, 2, 3, 4):
        for i, name in reversed(order) if reverse else order:
            ctl.record_results(name, 0, [{"training_iteration": it, "acc": i * it}], None)
    return ctl, names


def test_a_failed_explore_step_keeps_the_donors_config_and_says_so():
    ctl, names = reported_four_steps()
    worst = names[0]
    donor = ctl.decisions.exploits[worst]["donor"]
    ctl.explored(worst, {"error": "LinAlgError: matrix is singular"})
    ended = {
        f"{worst}-0": PodView(
            f"{worst}-0", worst, 0, "Succeeded", message=json.dumps({"outcome": OUTCOME_PAUSED, "iteration": 4})
        )
    }
    plan = ctl.plan(ended, 1002.0)
    assert ctl.trials[worst].config == ctl.trials[donor].config
    assert any(e[1:3] == ("Warning", "ExploreFailed") and "singular" in e[3] for e in plan.events)


def test_the_explorer_hands_a_finished_job_to_the_controller_that_still_wants_it():
    """The daemon's side: a job runs in the worker process, its outcome is journaled by the next step; an
    outcome a reloaded controller no longer wants is dropped."""
    ctl = ExperimentController(experiment(), Settings(), b"k" * 32)
    ctl.restore([])
    for m in ctl.plan({}, 1000.0).create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
    names = sorted(ctl.trials)
    for it in (1, 2, 3, 4):
        for i, name in enumerate(names):
            ctl.record_results(name, 0, [{"training_iteration": it, "acc": i * it}], None)
    job = ctl.exploration()

    async def drive():
        woken = []
        explorer.step(ctl, lambda: woken.append(1))
        for _ in range(600):
            if woken:
                break
            await asyncio.sleep(0.1)
        explorer.step(ctl, lambda: None)
        return woken

    try:
        assert asyncio.run(drive()) == [1]
    finally:
        explorer.shutdown()
    assert ctl.journal.pending[-1] == ["explored", job["trial"], select(job)]
    assert ctl.decisions.exploits[job["trial"]]["config"] is not None and ctl.exploration() is None


def test_an_explore_step_open_when_its_trial_ended_is_journaled_before_the_experiment_ends():
    """A trial whose pod did not hear its pause (the operator was down) runs to its stop; Ray took the explore
    step at the result, so the Experiment stays Running (reason Exploring) until the step is journaled."""
    ctl, names = reported_four_steps(reverse=True)
    job = ctl.exploration()
    ended = {
        f"{name}-0": PodView(
            f"{name}-0", name, 0, "Succeeded", message=json.dumps({"outcome": OUTCOME_COMPLETED, "iteration": 4})
        )
        for name in names
    }
    ctl.plan(ended, 1002.0)
    assert all(ctl.trials[name].phase == "Succeeded" for name in names) and job is not None
    phase = ctl.projection.phase_decision(1003.0)
    assert (phase.phase, phase.reason) == ("Running", "Exploring") and job["trial"] in phase.message
    ctl.explored(job["trial"], select(job))
    ctl.plan(ended, 1004.0)
    assert ctl.exploration() is None and ctl.projection.phase_decision(1005.0).phase == "Succeeded"
