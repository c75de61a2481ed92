"""PBT with user code (issue 23.3): functions in ``hyperparam_mutations`` and ``custom_explore_fn`` run in the
exploited trial's pod, which reports the config it chose (journaled once); synchronous PBT (``synch=True``)
decides what Ray's decides. Restarts of the operator are covered by ``test_restarts.py`` (``pbt_functions``,
``pbt_synch``)."""

from __future__ import annotations

import json
import random

import pytest

import kubetune as tune
from devcluster.testkit import experiment_object
from kubetune.env import OUTCOME_PAUSED, read_trial_env
from kubetune.runtime.pbt_explore import explore_in_pod
from kubetune.schedulers import PopulationBasedTraining
from kubetune.shipping import FUNCTION_KEY, FunctionPickles, dumps
from kubetune.storage import FileStorage
from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.controller import ExperimentController
from kubetune_operator.podview import PodView
from kubetune_operator.schedulers.base import PAUSE
from kubetune_operator.schedulers.pbt import PodFunction, explore
from kubetune_operator.settings import Settings

LR_FUNCTION = {FUNCTION_KEY: "s3://bucket/prefix/ns/exp/sdk/functions/lr.pkl"}
CUSTOM_FUNCTION = {FUNCTION_KEY: "s3://bucket/prefix/ns/exp/sdk/functions/custom.pkl"}


class FixedRandom(random.Random):
    def __init__(self, value: float):
        super().__init__(0)
        self.value = value

    def random(self):
        return self.value


# ------------------------------------------------------------------------------- the operator's part


def test_a_function_to_resample_is_left_to_the_pod_and_a_perturbed_one_is_multiplied_here():
    mutations = {"lr": PodFunction("s3://f.pkl"), "nested": {"layers": PodFunction("s3://g.pkl")}}
    config = {"lr": 0.5, "nested": {"layers": 4}, "other": 1}
    in_pod: list = []
    new, ops = explore(config, mutations, 0.25, [1.2, 0.8], FixedRandom(0.1), in_pod)  # below: resample
    assert ops == {"lr": "resample", "nested": {"layers": "resample"}}
    assert new == config  # the pod sets them
    assert in_pod == [
        {"path": ["lr"], "function": "s3://f.pkl", "int": False},
        {"path": ["nested", "layers"], "function": "s3://g.pkl", "int": True},
    ]
    in_pod = []
    new, ops = explore(config, mutations, 0.25, [1.2, 0.8], FixedRandom(0.9), in_pod)  # perturbed here, as Ray
    assert in_pod == [] and new["nested"]["layers"] in (4, 3) and ops["lr"] in ("* 1.2", "* 0.8")


def make_pbt(**params):
    return create_scheduler(
        "pbt",
        "acc",
        "max",
        **{"time_attr": "training_iteration", "perturbation_interval": 2, "resample_probability": 1.0, **params},
    )


def population(pbt, scores):
    for trial in scores:
        pbt.on_trial_add(trial)
        pbt.set_trial_config(trial, {"lr": 0.01, "base": scores[trial]})


def test_the_exploit_carries_the_functions_the_pod_calls_and_the_pods_config_becomes_the_trials():
    pbt = make_pbt(hyperparam_mutations={"lr": LR_FUNCTION}, custom_explore_fn=CUSTOM_FUNCTION)
    population(pbt, {"a": 1.0, "b": 0.0})
    assert pbt.on_trial_result("a", {"training_iteration": 2, "acc": 1.0}) == "continue"  # alone
    assert pbt.on_trial_result("b", {"training_iteration": 2, "acc": 0.0}) == "continue"  # a has no checkpoint
    assert pbt.on_trial_result("a", {"training_iteration": 4, "acc": 2.0}) == "checkpoint"
    assert pbt.on_trial_result("b", {"training_iteration": 4, "acc": 0.0}) == PAUSE
    exploit = pbt.take_exploit("b")
    assert exploit["donor"] == "a" and exploit["operations"] == {"lr": "resample"}
    assert exploit["explore"] == {
        "resample": [{"path": ["lr"], "function": LR_FUNCTION[FUNCTION_KEY], "int": False}],
        "customExploreFn": CUSTOM_FUNCTION[FUNCTION_KEY],
    }
    pbt.explored("b", {"config": {"lr": 0.07, "base": 1.0}})
    assert pbt.get_state()["configs"]["b"] == {"lr": 0.07, "base": 1.0}  # what later exploits of b start from


def test_custom_explore_fn_alone_is_enough_and_bad_function_values_are_refused():
    pbt = make_pbt(custom_explore_fn=CUSTOM_FUNCTION)
    assert pbt.mutations == {}
    with pytest.raises(ValueError, match="hyperparam_mutations"):
        make_pbt()
    with pytest.raises(ValueError, match="custom_explore_fn"):
        make_pbt(hyperparam_mutations={"lr": [1, 2]}, custom_explore_fn="f")
    with pytest.raises(ValueError, match="synch=True is not supported by PB2"):
        create_scheduler("pb2", "acc", "max", hyperparam_bounds={"lr": [0, 1]}, synch=True)


def experiment(**params):
    return experiment_object(
        uid="exp-uid-1234",
        image="img",
        config={"lr": 0.01, "k": {"grid_search": [0, 1, 2, 3]}},
        numSamples=1,
        metric="acc",
        mode="max",
        maxConcurrentTrials=4,
        storage={"uri": "s3://bucket/prefix"},
        scheduler={
            "name": "pbt",
            "params": {
                "time_attr": "training_iteration",
                "perturbation_interval": 2,
                "resample_probability": 1.0,
                "hyperparam_mutations": {"lr": LR_FUNCTION},
                **params,
            },
        },
    )


def pod_env(plan, pod_name):
    (pod,) = [p for p in plan.create_pods if p["metadata"]["name"] == pod_name]
    variables = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    return read_trial_env(variables, plan.token_secrets[pod_name]["stringData"]["config.json"])


def exploited(ctl):
    """Run 4 trials to the exploit of the worst; return its name and the plan that starts its next attempt."""
    plan = ctl.plan({}, 1000.0)
    for m in plan.create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
    ctl.plan({}, 1001.0)
    names = sorted(ctl.trials)
    for it in (1, 2):
        for i, name in enumerate(names):
            ctl.record_results(name, 0, [{"training_iteration": it, "acc": i * it}], None)
    worst = names[0]
    ctl.record_results(worst, 0, [{"training_iteration": 3, "acc": 0}], None)
    assert ctl.record_results(worst, 0, [{"training_iteration": 4, "acc": 0}], None) == "pause"
    ended = PodView(
        f"{worst}-0", worst, 0, "Succeeded", message=json.dumps({"outcome": OUTCOME_PAUSED, "iteration": 4})
    )
    return worst, ctl.plan({f"{worst}-0": ended}, 1002.0)


def test_the_pod_is_told_which_functions_to_call_and_the_config_it_reports_is_journaled_once():
    ctl = ExperimentController(experiment(), Settings(), b"k" * 32)
    ctl.restore([])
    worst, plan = exploited(ctl)
    env = pod_env(plan, f"{worst}-1")
    assert env.pbt_explore == {
        "resample": [{"path": ["lr"], "function": LR_FUNCTION[FUNCTION_KEY], "int": False}],
        "customExploreFn": None,
    }
    assert env.config["lr"] == 0.01 and env.pbt_policy[5] == env.config  # the donor's value until the pod reports
    event = next(e for e in plan.events if e[2] == "TrialPerturbed")
    assert "lr 0.01 -> (chosen in the pod)" in event[3]
    chosen = {**env.config, "lr": 0.0421}
    before = ctl.journal.next_seq
    assert ctl.record_results(worst, 1, [], None, explored=chosen) == "continue"
    assert ctl.journal.pending[-1] == ["explored", worst, {"config": chosen, "attempt": 1}]
    trial = ctl.trials[worst]
    assert trial.config == trial.status["config"] == chosen
    assert trial.status["perturbations"][-1]["newConfig"]["lr"] == 0.0421
    assert ctl.decisions.scheduler.get_state()["configs"][worst] == chosen
    ctl.record_results(worst, 1, [{"training_iteration": 3, "acc": 5}], None, explored={**chosen, "lr": 9.0})
    assert ctl.journal.next_seq == before + 2  # the results; a second report is not journaled
    assert trial.config["lr"] == 0.0421
    # a retry of the attempt runs the chosen config and calls nothing
    failed = PodView(f"{worst}-1", worst, 1, "Failed", exit_code=1, message="boom")
    retry = ctl.plan({f"{worst}-1": failed}, 1003.0)
    names = [p["metadata"]["name"] for p in retry.create_pods]
    if f"{worst}-2" in names:
        env = pod_env(retry, f"{worst}-2")
        assert env.pbt_explore is None and env.config == chosen


def test_a_restarted_operator_gives_the_pod_the_functions_until_it_reports_then_never_again():
    ctl = ExperimentController(experiment(), Settings(), b"k" * 32)
    ctl.restore([])
    worst, _ = exploited(ctl)
    state = json.loads(json.dumps(ctl.snapshot()))
    assert worst in state["podExplores"]
    again = ExperimentController(experiment(), Settings(), b"k" * 32)
    for trial in ctl.trials.values():
        again.observe_trial({**trial.as_object(), "metadata": {"name": trial.name, "uid": trial.uid}})
    again.decisions.load_snapshot(state)
    assert again.decisions.pod_explores[worst]["resample"][0]["path"] == ["lr"]
    again.decisions.replay(["explored", worst, {"config": {"lr": 0.03, "k": 0}}])
    assert worst not in again.decisions.pod_explores and again.trials[worst].config == {"lr": 0.03, "k": 0}


def test_a_replayed_explore_never_undoes_a_later_config_and_a_snapshot_keeps_one_no_status_shows_yet():
    ctl = ExperimentController(experiment(), Settings(), b"k" * 32)
    ctl.restore([])
    worst, _ = exploited(ctl)
    before = dict(ctl.trials[worst].config)
    chosen = {**before, "lr": 0.0421}
    ctl.record_results(worst, 1, [], None, explored=chosen)
    entry = ctl.journal.pending[-1]
    snapshot = json.loads(json.dumps(ctl.snapshot()))
    assert snapshot["podConfigs"] == {worst: [1, chosen]}

    def restarted(attempt: int, config: dict) -> ExperimentController:
        """An operator that finds the Trials as the API holds them: ``worst``'s status of ``attempt``."""
        again = ExperimentController(experiment(), Settings(), b"k" * 32)
        for trial in ctl.trials.values():
            status = {**trial.status, "attempt": attempt, "config": config} if trial.name == worst else trial.status
            again.observe_trial({"metadata": {"name": trial.name, "uid": trial.uid}, "spec": {}, "status": status})
        return again

    later = {**before, "lr": 0.5}  # a later exploit's config, which the status of attempt 2 shows
    again = restarted(2, later)
    again.decisions.replay(entry)
    assert again.trials[worst].config == later
    again = restarted(2, later)
    again.decisions.load_snapshot(snapshot)
    assert again.trials[worst].config == later
    again = restarted(1, before)  # the status write that showed the pod's config was lost: the snapshot has it
    again.decisions.load_snapshot(snapshot)
    assert again.trials[worst].config == again.trials[worst].status["config"] == chosen
    running = PodView(f"{worst}-1", worst, 1, "Running")
    for name in ctl.plan({f"{worst}-1": running}, 1010.0).trial_status:
        ctl.status_written(name)
    assert ctl.trials[worst].written["config"] == chosen and ctl.snapshot()["podConfigs"] == {}


# ------------------------------------------------------------------------------- the pod's part


def test_the_pod_calls_the_functions_as_rays_explore_does(tmp_path):
    storage = FileStorage()
    storage.put_bytes(f"file://{tmp_path}/lr.pkl", dumps(lambda: 7.9))
    storage.put_bytes(f"file://{tmp_path}/custom.pkl", dumps(lambda config: {**config, "seen": config["n"]["lr"]}))
    instruction = {
        "resample": [{"path": ["n", "lr"], "function": f"file://{tmp_path}/lr.pkl", "int": True}],
        "customExploreFn": f"file://{tmp_path}/custom.pkl",
    }
    config = {"n": {"lr": 3}, "b": 1}
    assert explore_in_pod(config, instruction, storage) == {"n": {"lr": 7}, "b": 1, "seen": 7}
    assert config == {"n": {"lr": 3}, "b": 1}
    storage.put_bytes(f"file://{tmp_path}/custom.pkl", dumps(lambda config: None))
    with pytest.raises(ValueError, match="custom_explore_fn must return the new config"):
        explore_in_pod(config, instruction, storage)


# ------------------------------------------------------------------------------- the SDK's part


def test_the_sdk_ships_functions_as_sample_from_functions_and_keeps_rays_checks(tmp_path):
    pbt = PopulationBasedTraining(
        hyperparam_mutations={"lr": lambda: random.uniform(1e-4, 1e-1), "bs": [16, 32], "m": tune.uniform(0, 1)},
        custom_explore_fn=lambda config: config,
        synch=True,
        log_config=False,
    )
    functions = FunctionPickles(f"file://{tmp_path}/sdk")
    spec = pbt.to_spec(on_function=functions.marker)
    params = spec["params"]
    assert set(params["hyperparam_mutations"]["lr"]) == {FUNCTION_KEY} and params["hyperparam_mutations"]["bs"] == [
        16,
        32,
    ]
    assert set(params["custom_explore_fn"]) == {FUNCTION_KEY} and params["synch"] is True
    assert params["log_config"] is False and len(functions.pending) == 2
    assert create_scheduler("pbt", "acc", "max", **params).synch  # the operator takes it
    with pytest.raises(ValueError, match="ship them"):
        pbt.to_spec()
    with pytest.raises(ValueError, match="arbitrary tune.sample_from objects are not supported"):
        PopulationBasedTraining(hyperparam_mutations={"lr": tune.sample_from(lambda spec: 1)})
    with pytest.raises(ValueError, match="at least one of `hyperparam_mutations` or `custom_explore_fn`"):
        PopulationBasedTraining()
    with pytest.raises(ValueError, match="must be either a List"):
        PopulationBasedTraining(hyperparam_mutations={"lr": 0.1})


# ------------------------------------------------------------------------------- synchronous PBT against Ray's

BASES = [0.1, 0.4, 0.2, 0.3]
#: Ray 2.50's exploits on that population (``bench/ray_pbt_reference.py``, synch=True), as ``[trial, donor, trial
#: step, donor step]`` from its ``pbt_global.txt``. Ray logs the trial's last result before the one being
#: decided on for the trial whose result triggers the perturbation (``3, 2, 5, 6``): it perturbs at step 6.
RAY_SYNCH_EXPLOITS = [[0, 1, 2, 2], [2, 1, 4, 4], [3, 2, 5, 6]]


def run_synch(pbt, bases: list[float], steps: int = 8, order=None) -> list[list]:
    """The population of ``bench/ray_pbt_reference.py`` under the operator's scheduler: each running trial steps
    (score += its ``base``) until it is told to pause, in ``order``; the scheduler picks the paused trials to
    resume; an exploit gives the trial its donor's checkpointed step, score and ``base``."""
    trials = [f"t{i}" for i in range(len(bases))]
    state = {t: {"step": 0, "acc": 0.0, "base": b, "saved": {}} for t, b in zip(trials, bases)}
    for t in trials:
        pbt.on_trial_add(t)
        pbt.set_trial_config(t, {"base": state[t]["base"], "lr": 0.01})
    running, paused, done, exploits = list(order or trials), [], set(), []
    while running or paused:
        for t in list(running):
            s = state[t]
            s["step"] += 1
            s["acc"] = round(s["acc"] + s["base"], 6)
            s["saved"][s["step"]] = (s["acc"], s["base"])
            if s["step"] >= steps:  # the stop criteria: the trial completes, the scheduler is told
                running.remove(t)
                done.add(t)
                pbt.on_trial_complete(t)
            elif pbt.on_trial_result(t, {"training_iteration": s["step"], "acc": s["acc"]}) == PAUSE:
                running.remove(t)
                paused.append(t)
            for name, exploit in pbt.take_exploits().items():
                donor = state[exploit["donor"]]
                acc, base = donor["saved"][exploit["iteration"]]
                state[name].update(step=exploit["iteration"], acc=acc, base=base)
                exploits.append(
                    [int(name[1:]), int(exploit["donor"][1:]), exploit["trialIteration"], exploit["iteration"]]
                )
                paused.remove(name)
                running.append(name)  # an exploited trial goes on at once, from its donor's checkpoint
        while True:
            chosen = pbt.choose_trial_to_run(paused, search_finished=True)
            if chosen is None:
                break
            paused.remove(chosen)
            running.append(chosen)
        if not running and paused and all(state[t]["step"] >= steps for t in paused):
            break
    return exploits


@pytest.mark.parametrize("order", [None, ["t3", "t2", "t1", "t0"], ["t1", "t3", "t0", "t2"]])
def test_synchronous_pbt_exploits_the_trials_ray_exploits_with_rays_donors_at_the_same_steps(order):
    pbt = make_pbt(
        hyperparam_mutations={"lr": LR_FUNCTION}, quantile_fraction=0.25, resample_probability=0.5, synch=True
    )
    exploits = run_synch(pbt, BASES, order=order)
    assert [[t, d, di, di] for t, d, _, di in RAY_SYNCH_EXPLOITS] == [[t, d, ti, di] for t, d, ti, di in exploits]


def test_synchronous_pbt_waits_for_the_whole_population_and_for_the_searcher():
    pbt = make_pbt(hyperparam_mutations={"lr": [0.01, 0.1]}, quantile_fraction=0.25, synch=True)
    population(pbt, {"a": 1.0, "b": 0.0, "c": 0.5})
    assert pbt.on_trial_result("a", {"training_iteration": 2, "acc": 2.0}) == PAUSE
    assert pbt.on_trial_result("b", {"training_iteration": 2, "acc": 0.0}) == PAUSE
    assert pbt.choose_trial_to_run(["a", "b"]) is None  # c is not there yet: a and b wait
    assert pbt.on_trial_result("c", {"training_iteration": 2, "acc": 1.0}) == PAUSE
    assert pbt.take_exploits() == {}  # the searcher may still create trials
    assert pbt.choose_trial_to_run(["a", "b", "c"], search_finished=True) == "a"  # all there: perturbed
    (exploit,) = pbt.take_exploits().values()
    assert exploit["donor"] == "a" and exploit["iteration"] == 2
    # next interval: c ends instead of arriving; a and b go on without it
    assert pbt.on_trial_result("a", {"training_iteration": 4, "acc": 4.0}) == PAUSE
    assert pbt.on_trial_result("b", {"training_iteration": 4, "acc": 3.0}) == PAUSE
    assert pbt.take_exploits() == {}
    pbt.on_trial_complete("c")
    assert pbt.choose_trial_to_run(["a", "b"], search_finished=True) in ("a", "b")
    state = json.loads(json.dumps(pbt.get_state()))
    again = make_pbt(hyperparam_mutations={"lr": [0.01, 0.1]}, quantile_fraction=0.25, synch=True)
    again.set_state(state)
    assert again.get_state() == pbt.get_state()


def test_require_attrs_fails_the_experiment_at_a_result_without_time_attr_as_ray_raises():
    ctl = ExperimentController(experiment(time_attr="step"), Settings(), b"k" * 32)
    ctl.restore([])
    plan = ctl.plan({}, 1000.0)
    for m in plan.create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
    ctl.plan({}, 1001.0)
    name = sorted(ctl.trials)[0]
    assert ctl.record_results(name, 0, [{"training_iteration": 1, "acc": 0.5}], None) == "stop"
    assert "step" in ctl.decisions.metric_missing and "require_attrs" in ctl.decisions.metric_missing
    lenient = ExperimentController(experiment(time_attr="step", require_attrs=False), Settings(), b"k" * 32)
    lenient.restore([])
    plan = lenient.plan({}, 1000.0)
    for m in plan.create_trials:
        lenient.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
    lenient.plan({}, 1001.0)
    assert lenient.record_results(name, 0, [{"training_iteration": 1, "acc": 0.5}], None) == "continue"
