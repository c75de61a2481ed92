"""BOHB: the ``bohb`` searcher's model (kubetune_operator.searchers.bohb), the ``hyperband_bohb`` scheduler's
brackets against Ray's ``HyperBandForBOHB`` on a scripted sequence of results, and both through operator
restarts at any instant (the ``World`` of tests/unit/test_restarts.py)."""

from __future__ import annotations

import json
import math
import statistics

import pytest

import kubetune as tune
from kubetune.schedulers import HyperBandForBOHB
from kubetune.search.bohb import TuneBOHB
from kubetune_operator import journal
from kubetune_operator.algorithms import create_scheduler, create_searcher
from kubetune_operator.controller import ExperimentController
from kubetune_operator.schedulers import CONTINUE, PAUSE, STOP
from kubetune_operator.settings import Settings
from kubetune_operator.spec_intake import InvalidSpec
from tests.unit.test_restarts import KEY, World, experiment

SPACE = {"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}, "opt": {"choice": ["sgd", "adam", "rmsprop"]}}


def loss(config: dict) -> float:
    """Best near x=0.2, y=0.8 with adam."""
    return (config["x"] - 0.2) ** 2 + (config["y"] - 0.8) ** 2 + (0.0 if config["opt"] == "adam" else 0.3)


def searcher(**params):
    return create_searcher("bohb", SPACE, "loss", "min", num_samples=200, seed=5, **params)


def rung(value: float, budget: int) -> dict:
    return {"loss": value, "hyperband_info": {"budget": budget}}


def test_after_enough_results_the_model_prefers_the_good_region():
    """The same 40 trials, each told its loss at budget 1 at once: after the first model (8 results), BOHB's
    configs are better than random draws and mostly use the good choice."""
    configs = {}
    for fraction in (0, 1):
        s = searcher(bohb_config={"random_fraction": fraction})
        configs[fraction] = []
        for i in range(40):
            config = s.suggest(f"t{i}")
            s.on_trial_result(f"t{i}", rung(loss(config), 1))
            configs[fraction].append(config)
        assert s.model_budget() == "1"
    model, drawn = configs[0][10:], configs[1][10:]
    assert statistics.mean(map(loss, model)) < 0.5 * statistics.mean(map(loss, drawn))
    assert sum(c["opt"] == "adam" for c in model) >= 2 * sum(c["opt"] == "adam" for c in drawn)
    assert configs[0][:8] == configs[1][:8]  # no model yet: the same seeded random draws


def test_configs_are_random_until_a_budget_has_more_than_d_good_and_d_bad_results():
    s = searcher()  # d = 3: min_points 4, 15 % good but at least 4, so 8 results make the first model
    for i in range(7):
        s.on_trial_result(f"t{i}", rung(loss(s.suggest(f"t{i}")), 1))
    assert s.model_budget() is None
    s.on_trial_result("t7", rung(loss(s.suggest("t7")), 1))
    assert s.model_budget() == "1"
    for i in range(8):  # a larger budget takes over once it has as many
        s.on_trial_result(f"t{i}", rung(loss(s.suggest(f"t{i}")), 3))
    assert s.model_budget() == "3"


def test_results_without_a_budget_teach_nothing_and_failed_ones_are_the_worst_loss():
    s = searcher()
    s.suggest("a"), s.suggest("b")
    s.on_trial_result("a", {"loss": 0.1})  # no hyperband_info: as Ray's TuneBOHB, not an observation
    s.on_trial_result("b", rung(float("nan"), 1))
    assert s.get_state()["observations"] == {"1": {"b": "inf"}}
    assert json.loads(json.dumps(s.get_state(), allow_nan=False))


def test_a_restored_searcher_suggests_what_the_uninterrupted_one_does():
    calm, stormy = searcher(), searcher()
    expected, got = [], []
    for i in range(40):
        if i % 7 == 3:  # a restart: a new searcher from the saved state
            state = json.loads(json.dumps(stormy.get_state()))
            stormy = searcher()
            stormy.set_state(state)
        for s, out in ((calm, expected), (stormy, got)):
            config = s.suggest(f"t{i}")
            out.append(config)
            s.on_trial_result(f"t{i}", rung(loss(config), 1 if i % 3 else 3))
    assert got == expected
    assert len({json.dumps(c, sort_keys=True) for c in expected}) == 40


def test_bohb_config_is_checked():
    with pytest.raises(ValueError, match="bandwidth_factor is not supported: the densities are Optuna's"):
        searcher(bohb_config={"bandwidth_factor": 3})
    with pytest.raises(ValueError, match="unknown key eta"):
        searcher(bohb_config={"eta": 3})
    with pytest.raises(ValueError, match="random_fraction out of range"):
        searcher(bohb_config={"random_fraction": 2})
    with pytest.raises(ValueError, match="grid_search"):
        create_searcher("bohb", {"x": {"grid_search": [1, 2]}}, "loss", "min")


# ----- HyperBandForBOHB, against Ray 2.x's hb_bohb.py run by hand on the same script -----------------


def test_brackets_fill_from_the_largest_down_and_each_rung_result_carries_its_budget():
    """max_t 9, eta 3: Ray's HyperBandForBOHB makes the brackets (n, r) = (9, 1), (5, 3), (3, 9), in that order
    (HyperBand's are the other way round). Script: nine trials report iteration 1 with values 0.1..0.9; each
    pauses at rung 1 until the ninth arrives, which judges the rung: the best ceil(9/3) = 3 go on (the ninth,
    the best, is answered CONTINUE), the six others end. Each of those nine results reached rung 1: budget 1."""
    hb = create_scheduler("hyperband_bohb", metric="acc", mode="max", max_t=9, reduction_factor=3)
    for i in range(12):
        hb.on_trial_add(f"t{i}")
    assert hb.brackets() == [(9, 1), (5, 3)]
    decisions, budgets = [], []
    for i in range(9):
        decisions.append(hb.on_trial_result(f"t{i}", {"training_iteration": 1, "acc": (i + 1) / 10}))
        budgets.append(hb.take_budget(f"t{i}"))
    assert decisions == [PAUSE] * 8 + [CONTINUE]
    assert budgets == [1] * 9
    assert hb.take_budget("t8") is None  # taken once
    paused = [f"t{i}" for i in range(8)]
    assert sorted(hb.trials_to_stop(paused)) == [f"t{i}" for i in range(6)]
    assert hb.choose_trial_to_run(paused) in ("t6", "t7")
    # below the next rung (3): CONTINUE, no budget; at it: the rung's budget, PAUSE for the others
    assert hb.on_trial_result("t8", {"training_iteration": 2, "acc": 0.9}) == CONTINUE
    assert hb.take_budget("t8") is None
    assert hb.on_trial_result("t8", {"training_iteration": 3, "acc": 0.9}) == PAUSE
    assert hb.take_budget("t8") == 3
    assert hb.on_trial_result("t7", {"training_iteration": 3, "acc": 0.5}) == PAUSE
    assert hb.on_trial_result("t6", {"training_iteration": 3, "acc": 0.1}) == STOP  # last of the rung, worst
    assert hb.take_budget("t6") == 3
    assert hb.choose_trial_to_run(["t7", "t8"]) == "t8"
    assert hb.trials_to_stop(["t7"]) == ["t7"]
    # the last rung is max_t (Ray 2.x's min(r * eta, max_t)): reached with budget 9, then the bracket ends
    assert hb.on_trial_result("t8", {"training_iteration": 9, "acc": 0.95}) == STOP
    assert hb.take_budget("t8") == 9
    # the second bracket (5, 3): its trials run to 3 before their first rung
    assert hb.on_trial_result("t9", {"training_iteration": 1, "acc": 0.5}) == CONTINUE
    assert hb.take_budget("t9") is None
    assert hb.on_trial_result("t9", {"training_iteration": 3, "acc": 0.5}) == PAUSE
    assert hb.take_budget("t9") == 3


def test_a_trial_that_ran_past_its_rung_gives_the_searcher_its_first_result_there_only():
    """A pod whose pause came late (the operator was unreachable) reports iterations 1 and 2 before pausing: the
    observation at budget 1 is its result at iteration 1, as Ray's (which never runs past a pause) has it."""
    hb = create_scheduler("hyperband_bohb", metric="acc", mode="max", max_t=9, reduction_factor=3)
    hb.on_trial_add("t0")
    assert hb.on_trial_result("t0", {"training_iteration": 1, "acc": 0.1}) == PAUSE
    assert hb.take_budget("t0") == 1
    assert hb.on_trial_result("t0", {"training_iteration": 2, "acc": 0.2}) == PAUSE
    assert hb.take_budget("t0") is None


def test_an_unfilled_bracket_is_judged_once_the_search_is_finished():
    """Ray's HyperBandForBOHB judges a bracket whose trials are all paused when nothing runs (no more trials come):
    4 trials in the 9-trial bracket keep ceil(9/3) = 3 >= ... all of them, as Ray's halving by the bracket's n."""
    hb = create_scheduler("hyperband_bohb", metric="acc", mode="max", max_t=9, reduction_factor=3)
    for i in range(4):
        hb.on_trial_add(f"t{i}")
        assert hb.on_trial_result(f"t{i}", {"training_iteration": 1, "acc": i / 10}) == PAUSE
    paused = [f"t{i}" for i in range(4)]
    assert hb.choose_trial_to_run(paused) is None
    assert hb.choose_trial_to_run(paused, search_finished=True) == "t1"  # 3 of 4 go on, the worst (t0) ends
    assert hb.trials_to_stop(paused) == ["t0"]


# ----- through the operator's controller -------------------------------------------------------------


def test_the_sdk_classes_name_what_the_operator_runs():
    searcher_spec = TuneBOHB(metric="loss", mode="min", seed=3, bohb_config={"top_n_percent": 20}).to_spec()
    assert searcher_spec == {"name": "bohb", "params": {"bohb_config": {"top_n_percent": 20}}, "seed": 3}
    scheduler_spec = HyperBandForBOHB(max_t=27).to_spec()
    assert scheduler_spec["name"] == "hyperband_bohb"
    create_searcher("bohb", SPACE, "loss", "min", 4, 3, **searcher_spec["params"])
    create_scheduler("hyperband_bohb", "loss", "min", **scheduler_spec["params"])
    with pytest.raises(ValueError, match="space as the run's config"):
        TuneBOHB(space={"x": 1})
    # Ray's names for them (tune.create_searcher / create_scheduler, ray.tune.schedulers.hb_bohb)
    assert isinstance(tune.create_searcher("bohb", metric="loss", mode="min"), TuneBOHB)
    assert isinstance(tune.create_scheduler("hb_bohb", max_t=9), HyperBandForBOHB)
    from kubetune.schedulers.hb_bohb import HyperBandForBOHB as RayPath

    assert RayPath is HyperBandForBOHB


def test_bohb_with_another_scheduler_is_an_invalid_spec():
    spec = experiment(searchAlgorithm={"name": "bohb"}, scheduler={"name": "asha"})
    with pytest.raises(InvalidSpec, match="searchAlgorithm bohb learns from the rungs of scheduler hyperband_bohb"):
        ExperimentController(spec, Settings(), KEY)


BOHB = {
    "scheduler": {"name": "hyperband_bohb", "params": {"max_t": 9, "reduction_factor": 3}},
    "searchAlgorithm": {"name": "bohb", "seed": 7, "params": {"bohb_config": {"random_fraction": 0}}},
    "numSamples": 20,
}


def test_killed_at_any_instant_bohb_decides_and_suggests_as_an_uninterrupted_run(monkeypatch):
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 500)  # restarts load snapshots too
    calm = World(BOHB)
    expected = calm.run()
    stormy = World(BOHB, kill_at=range(2, 10_000, 3))
    assert stormy.run() == expected
    assert stormy.decisions == calm.decisions
    assert stormy.kills >= 5
    assert len(expected) == 20
    assert {"stop", "pause"} <= set(calm.decisions.values())
    learned = calm.ctl.decisions.searcher.get_state()["observations"]
    # brackets (9, 1), (5, 3), (3, 9), then the next band's (9, 1) takes the last 3: 12 results at rung 1
    assert set(learned) >= {"1", "3"} and len(learned["1"]) == 12
    assert calm.ctl.decisions.searcher.model_budget() is not None
    assert math.isfinite(min(learned["1"].values()))
