"""Population Based Training: Ray's explore rules and quantiles, the exploit as the operator carries it out
(explored config, donor checkpoint, new attempt), and the same decisions after a restart."""

from __future__ import annotations

import json
import random

import pytest

from devcluster.testkit import experiment_object
from kubetune.env import OUTCOME_PAUSED, read_trial_env
from kubetune.search import parse_space
from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.controller import ExperimentController
from kubetune_operator.podview import PodView
from kubetune_operator.schedulers.base import CHECKPOINT
from kubetune_operator.schedulers.pbt import explore
from kubetune_operator.settings import Settings


class FixedRandom(random.Random):
    """random() always ``value``; choice() always the ``pick``-th element (clamped)."""

    def __init__(self, value: float, pick: int = 0):
        super().__init__(0)
        self.value, self.pick = value, pick

    def random(self):
        return self.value

    def choice(self, seq):
        return seq[min(self.pick, len(seq) - 1)]


MUTATIONS = parse_space(
    {
        "lr": {"uniform": [0.0, 1.0]},
        "batch": [16, 32, 64],
        "opt": {"momentum": [0.8, 0.9, 0.99]},
        "layers": {"randint": [1, 10]},
    }
)


def test_explore_perturbs_numbers_by_a_factor_and_keeps_ints_ints():
    config = {"lr": 0.5, "batch": 32, "opt": {"momentum": 0.9}, "layers": 5, "other": "kept"}
    new, ops = explore(config, MUTATIONS, 0.25, [1.2, 0.8], FixedRandom(0.9, pick=0))
    assert new["lr"] == pytest.approx(0.6) and new["layers"] == 6 and isinstance(new["layers"], int)
    assert ops["lr"] == "* 1.2" and new["other"] == "kept" and config["lr"] == 0.5  # the input is not changed
    assert new["batch"] == 16 and ops["batch"] == "shift left"  # choice([-1, 1]) -> -1
    assert new["opt"] == {"momentum": 0.8} and ops["opt"] == {"momentum": "shift left"}


def test_explore_clamps_list_shifts_and_resamples():
    edge = {"lr": 0.5, "batch": 16, "opt": {"momentum": 0.8}, "layers": 5}
    new, ops = explore(edge, MUTATIONS, 0.25, [1.2, 0.8], FixedRandom(0.9, pick=0))
    assert new["batch"] == 16 and ops["batch"] == "shift left (noop)"
    new, ops = explore(edge, MUTATIONS, 0.25, [1.2, 0.8], FixedRandom(0.1, pick=2))  # below resample_probability
    assert ops == {"lr": "resample", "batch": "resample", "opt": {"momentum": "resample"}, "layers": "resample"}
    assert new["batch"] == 64 and 0 <= new["lr"] <= 1 and 1 <= new["layers"] < 10
    new, ops = explore({**edge, "batch": 24}, MUTATIONS, 0.0, [1.2, 0.8], FixedRandom(0.9, pick=1))
    assert ops["batch"] == "resample" and new["batch"] == 32  # a value outside the list is resampled
    new, ops = explore({}, MUTATIONS, 0.0, [1.2, 0.8], FixedRandom(0.9, pick=1))
    assert ops["lr"] == "resample" and "lr" in new  # a key the config lacks is sampled


def make_pbt(**params):
    params = {
        "time_attr": "training_iteration",
        "perturbation_interval": 2,
        "quantile_fraction": 0.25,
        "hyperparam_mutations": {"lr": [0.001, 0.01, 0.1, 1.0]},
        "resample_probability": 0.0,
        **params,
    }
    return create_scheduler("pbt", "acc", "max", **params)


def feed(pbt, trials, iterations, score):
    decisions = {}
    for it in iterations:
        for t in trials:
            decisions[(t, it)] = pbt.on_trial_result(t, {"training_iteration": it, "acc": score(t, it)})
    return decisions


def test_the_bottom_trial_exploits_a_top_trial_with_a_checkpoint():
    pbt = make_pbt()
    trials = [f"t{i}" for i in range(4)]
    for i, t in enumerate(trials):
        pbt.on_trial_add(t)
        pbt.set_trial_config(t, {"lr": [0.001, 0.01, 0.1, 1.0][i]})
    decisions = feed(pbt, trials, [1, 2], lambda t, it: int(t[1]) * it)  # t3 best, t0 worst
    assert all(decisions[(t, 1)] == "continue" for t in trials)  # before the first interval
    # at iteration 2, in arrival order: t0 alone has a score (no quantiles), then t1, t2, t3 rank
    assert decisions[("t0", 2)] == "continue"
    assert decisions[("t3", 2)] == CHECKPOINT  # top quantile: checkpoint now (Ray saves it)
    assert pbt.take_exploit("t3") is None
    decisions = feed(pbt, ["t0"], [3, 4], lambda t, it: 0)
    assert decisions[("t0", 4)] == "pause"
    exploit = pbt.take_exploit("t0")
    assert exploit["donor"] == "t3" and exploit["iteration"] == 2 and exploit["donorConfig"] == {"lr": 1.0}
    assert exploit["oldConfig"] == {"lr": 0.001} and exploit["config"]["lr"] in (0.1, 1.0)
    assert exploit["operations"]["lr"] in ("shift left", "shift right (noop)")
    assert pbt.take_exploit("t0") is None  # once
    assert pbt.num_perturbations == 1


def test_no_exploit_while_the_donor_has_no_checkpoint_and_finished_trials_do_not_rank():
    pbt = make_pbt()
    for t in ("a", "b"):
        pbt.on_trial_add(t)
        pbt.set_trial_config(t, {"lr": 0.01})
    assert pbt.on_trial_result("a", {"training_iteration": 2, "acc": 1.0}) == "continue"  # alone
    assert pbt.on_trial_result("b", {"training_iteration": 2, "acc": 0.0}) == "continue"  # a: no checkpoint
    pbt.on_trial_complete("a")
    assert pbt._quantiles() == ([], [])


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="hyperparam_mutations"):
        make_pbt(hyperparam_mutations={})
    with pytest.raises(ValueError, match="quantile_fraction"):
        make_pbt(quantile_fraction=0.7)
    with pytest.raises(ValueError, match="perturbation_interval"):
        make_pbt(perturbation_interval=0)


def test_state_round_trip_gives_the_same_decisions():
    def run(restart_at):
        pbt = make_pbt()
        log = []
        for i in range(6):
            pbt.on_trial_add(f"t{i}")
            pbt.set_trial_config(f"t{i}", {"lr": 0.01})
        for it in range(1, 9):
            if it == restart_at:
                saved = json.loads(json.dumps(pbt.get_state()))
                pbt = make_pbt()
                pbt.set_state(saved)
            for i in range(6):
                d = pbt.on_trial_result(f"t{i}", {"training_iteration": it, "acc": (i * 7 + it * 3) % 11})
                log.append((f"t{i}", it, d, pbt.take_exploit(f"t{i}")))
        return log

    uninterrupted = run(None)
    assert any(d == "pause" for _, _, d, _ in uninterrupted)
    assert run(5) == uninterrupted


# ----------------------------------------------------------------- the exploit in the operator


def experiment():
    return experiment_object(
        uid="exp-uid-1234",
        image="img",
        config={"lr": {"grid_search": [0.001, 0.01, 0.1, 1.0]}},
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
                "hyperparam_mutations": {"lr": [0.001, 0.01, 0.1, 1.0]},
                "resample_probability": 0.0,
            },
        },
    )


def test_the_operator_restarts_an_exploited_trial_from_the_donors_checkpoint_with_the_explored_config():
    ctl = ExperimentController(experiment(), Settings(), b"k" * 32)
    ctl.restore([])
    plan = ctl.plan({}, 1000.0)
    for m in plan.create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])
    ctl.plan({}, 1001.0)
    names = sorted(ctl.trials)
    for it in (1, 2):
        for i, name in enumerate(names):
            ctl.record_results(name, 0, [{"training_iteration": it, "acc": i * it}], None)
    worst = names[0]
    assert ctl.record_results(worst, 0, [{"training_iteration": 3, "acc": 0}], None) == "continue"
    assert ctl.record_results(worst, 0, [{"training_iteration": 4, "acc": 0}], None) == "pause"
    # a re-sent result of the old lineage is still told to pause, and a later one never reaches the scheduler
    assert ctl.record_results(worst, 0, [{"training_iteration": 4, "acc": 0}], None) == "pause"
    entries = ctl.journal.next_seq
    assert ctl.record_results(worst, 0, [{"training_iteration": 5, "acc": 0}], None) == "pause"
    assert ctl.journal.next_seq == entries
    ended = PodView(
        f"{worst}-0", worst, 0, "Succeeded", message=json.dumps({"outcome": OUTCOME_PAUSED, "iteration": 4})
    )
    plan = ctl.plan({f"{worst}-0": ended}, 1002.0)
    trial = ctl.trials[worst]
    assert (trial.phase, trial.attempt, trial.status["reason"]) == ("Pending", 1, "Perturbed")
    (record,) = trial.status["perturbations"]
    donor_uri = "s3://bucket/prefix/ns/exp/exp-uid-/exp-00003/checkpoint_000002"
    assert record["donor"] == "exp-00003" and record["iteration"] == 2 and trial.status["restoreFrom"] == donor_uri
    assert trial.status["config"] == trial.config and trial.config["lr"] in (0.1, 1.0)
    (pod,) = [p for p in plan.create_pods if p["metadata"]["name"] == f"{worst}-1"]
    variables = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    env = read_trial_env(variables, plan.token_secrets[pod["metadata"]["name"]]["stringData"]["config.json"])
    assert env.config == trial.config and env.restore_from == donor_uri
    assert any(e[2] == "TrialPerturbed" and "restoring exp-00003 at iteration 2" in e[3] for e in plan.events)
    # the new attempt reports again from the donor's iteration: results 3, 4 count anew
    assert ctl.record_results(worst, 1, [{"training_iteration": 3, "acc": 9}], None) == "continue"
    assert ctl.decisions.applied[worst][0] == 3


def test_the_kept_ranking_gives_rays_quantiles_at_every_step():
    rng = random.Random(5)
    pbt = make_pbt(perturbation_interval=1, quantile_fraction=0.3)
    trials = [f"t{i}" for i in range(40)]
    for t in trials:
        pbt.on_trial_add(t)
        pbt.set_trial_config(t, {"lr": 0.01})
    finished: set[str] = set()
    for step in range(1, 400):
        t = rng.choice(trials)
        if rng.random() < 0.05:
            pbt.on_trial_complete(t)
            finished.add(t)
            continue
        pbt.on_trial_result(t, {"training_iteration": step, "acc": rng.choice([rng.random(), 0.5, float("nan")])})
        pbt.take_exploit(t)
        live = [x for x in pbt._state if pbt._state[x][2] is not None and x not in finished]
        naive = sorted(live, key=lambda x: (pbt._key(pbt._state[x][2]), pbt._order[x]))
        size = min(int(-(-len(naive) * 0.3 // 1)), len(naive) // 2) if len(naive) > 1 else 0
        expected = (naive[:size], naive[len(naive) - size :]) if size else ([], [])
        assert pbt._quantiles() == expected, step


def test_replay_changes_the_config_at_each_step_of_the_policy_from_the_trials_own_checkpoint():
    replay = create_scheduler(
        "pbt_replay", "acc", "max", policy=[[2, {"lr": 0.1}], [4, {"lr": 0.01}], [5, {"lr": 1.0}]]
    )
    replay.on_trial_add("t")
    replay.set_trial_config("t", {"lr": 0.5})
    decisions = [replay.on_trial_result("t", {"training_iteration": i, "acc": 1.0}) for i in (1, 2, 3)]
    assert decisions == ["continue", "pause", "continue"]
    exploit = replay.take_exploit("t")
    assert exploit == {
        "donor": "t",
        "iteration": 2,
        "config": {"lr": 0.1},
        "oldConfig": {"lr": 0.5},
        "donorConfig": {"lr": 0.5},
        "operations": {},
        "trialIteration": 2,
    }
    # two steps passed at once (a late result): the latest config among them
    assert replay.on_trial_result("t", {"training_iteration": 6, "acc": 1.0}) == "pause"
    assert replay.take_exploit("t")["config"] == {"lr": 1.0}
    assert replay.on_trial_result("t", {"training_iteration": 7, "acc": 1.0}) == "continue"
    with pytest.raises(ValueError, match="steps must not decrease"):
        create_scheduler("pbt_replay", "acc", "max", policy=[[3, {}], [2, {}]])


def test_the_sdk_reads_rays_policy_file_along_the_chain_of_exploits():
    from kubetune.schedulers import load_policy

    lines = [
        ["t0", "t3", 2, 2, {"lr": 0.4}, {"lr": 0.5}],  # another trial's exploit, copied from its file
        ["t1", "t0", 4, 4, {"lr": 0.5}, {"lr": 0.6}],
        ["t1", "t2", 8, 6, {"lr": 0.6}, {"lr": 0.7}],
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    initial, policy = load_policy(text)
    assert initial == {"lr": 0.6} and policy == [[6, {"lr": 0.7}]]  # t1's chain ends where t2 was not t1's donor
    chain = [["b", "a", 2, 2, {"lr": 1}, {"lr": 2}], ["c", "b", 4, 4, {"lr": 2}, {"lr": 3}]]
    initial, policy = load_policy("".join(json.dumps(line) + "\n" for line in chain))
    assert initial == {"lr": 1} and policy == [[2, {"lr": 2}], [4, {"lr": 3}]]
    with pytest.raises(ValueError, match="not a PBT policy file"):
        load_policy('{"not": "a list"}\n')
