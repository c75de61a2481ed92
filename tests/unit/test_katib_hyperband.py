"""Katib's hyperband as kubetune runs it (searcher ``katib-hyperband``, :mod:`kubetune.search.katib_hyperband`):
the plan's brackets, rung sizes and resource values against the numbers Katib's service computes, written here from
Li et al. (JMLR 2018, Algorithm 1) with Katib's rounding; the searcher's rungs (new draws, then the best configs
copied by metric and mode with the next budget), its waiting for a rung, its end, and a restore from its state.
tests/unit/test_restarts.py runs it through operator kills, tests/unit/test_katib_convert.py converts Katib's
settings to it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from kubetune.search.katib_hyperband import max_bracket, plan, total_trials
from kubetune_operator.algorithms import create_searcher
from kubetune_operator.searchers import FINISHED

DATA = Path(__file__).parent / "data" / "katib"

SPACE = {"lr": {"uniform": [0.01, 0.05]}, "momentum": {"uniform": [0.5, 0.9]}, "num-epochs": 1}


def katib_numbers(r_l: float, eta: int) -> list[list[tuple[int, int]]]:
    """Katib's brackets as ``[(rung size, resource value), ...]``, from the paper's formulas as Katib's service
    rounds them: ``s_max = floor(log_eta(r_l))``, ``n = ceil((s_max + 1) / (s + 1) * eta**s)``, ``r = r_l *
    eta**-s``; rung ``i`` has ``ceil(n * eta**-i)`` trials (Katib's ``n_i``; its next rung is ``ceil(n_i / eta)``
    of them) at ``int(r * eta**i)``. A small epsilon stands in for exact arithmetic."""
    s_max = math.floor(math.log(r_l) / math.log(eta) + 1e-9)
    brackets = []
    for s in range(s_max, -1, -1):
        n = math.ceil((s_max + 1) / (s + 1) * eta**s - 1e-9)
        r = r_l * eta ** (-s)
        brackets.append([(math.ceil(n * eta ** (-i) - 1e-9), int(r * eta**i + 1e-9)) for i in range(s + 1)])
    return brackets


@pytest.mark.parametrize("r_l, eta", [(2, 2), (9, 3), (27, 3), (81, 3), (10, 3), (100, 4), (5.5, 2), (1, 3)])
def test_the_plan_is_katibs_brackets(r_l, eta):
    assert [[tuple(rung) for rung in bracket] for bracket in plan(r_l, eta)] == katib_numbers(r_l, eta)
    assert total_trials(r_l, eta) == sum(size for bracket in katib_numbers(r_l, eta) for size, _ in bracket)


def test_katibs_example_plan():
    """Katib's hyperband.yaml (r_l 2, eta 2): s_max 1; bracket s=1 runs 2 new configs at 1 epoch then the best
    one at 2; bracket s=0 runs 2 new configs at 2 (Katib's service: n = ceil(2 * 2/2), r = 2 * 2**-1, then n = 2,
    r = 2); Katib's parallelTrialCount rule is eta**s_max = 2."""
    settings = {
        s["name"]: s["value"]
        for s in yaml.safe_load((DATA / "hp-tuning/hyperband.yaml").read_text())["spec"]["algorithm"][
            "algorithmSettings"
        ]
    }
    r_l, eta = float(settings["r_l"]), int(settings["eta"])
    assert (settings["resource_name"], r_l, eta) == ("num-epochs", 2, 2)
    assert katib_numbers(r_l, eta) == [[(2, 1), (1, 2)], [(2, 2)]]
    assert [[tuple(rung) for rung in bracket] for bracket in plan(r_l, eta)] == [[(2, 1), (1, 2)], [(2, 2)]]
    assert eta ** max_bracket(r_l, eta) == 2


def test_exact_arithmetic_where_katibs_floats_round_down():
    assert int(math.log(1000) / math.log(10)) == 2  # Katib's s_max
    assert max_bracket(1000, 10) == 3
    assert int(math.log(243) / math.log(3)) == 4
    assert max_bracket(243, 3) == 5


@pytest.mark.parametrize("r_l, eta", [(0.5, 3), (float("nan"), 3), (9, 1), (9, 2.5), (True, 3), (2.0**65, 2)])
def test_bad_settings_are_refused(r_l, eta):
    with pytest.raises(ValueError, match="r_l|eta"):
        plan(r_l, eta)
    assert max_bracket(2.0**64, 2) == 64


def make(mode="min", num_samples=100, seed=1, r_l=9, eta=3, space=None):
    return create_searcher(
        "katib-hyperband",
        space or SPACE,
        "loss",
        mode,
        num_samples,
        seed,
        resource_name="num-epochs",
        r_l=r_l,
        eta=eta,
    )


def suggest_all(searcher, first: int) -> list[tuple[str, dict]]:
    """Suggest until the searcher says "not now" or FINISHED; ``(trial_id, config)`` of each suggestion."""
    out = []
    while True:
        trial = f"t{first + len(out)}"
        config = searcher.suggest(trial)
        if not isinstance(config, dict):
            return out
        out.append((trial, config))


def key(config: dict) -> tuple:
    return config["lr"], config["momentum"]


@pytest.mark.parametrize("mode", ["min", "max"])
def test_each_rung_copies_the_best_of_the_one_before_with_the_next_budget(mode):
    searcher = make(mode)
    rung0 = suggest_all(searcher, 0)
    assert [c["num-epochs"] for _, c in rung0] == [1] * 9
    assert len({key(c) for _, c in rung0}) == 9
    losses = {trial: round(c["lr"] * 100 + c["momentum"], 6) for trial, c in rung0}
    for trial, _ in rung0:
        searcher.on_trial_complete(trial, {"loss": losses[trial], "training_iteration": 1})
    rung1 = suggest_all(searcher, 9)
    best = sorted(rung0, key=lambda tc: losses[tc[0]], reverse=mode == "max")[:3]
    assert [key(c) for _, c in rung1] == [key(c) for _, c in best]  # best first, in the rung's order
    assert [c["num-epochs"] for _, c in rung1] == [3] * 3


def test_a_rung_waits_for_all_its_trials_and_the_same_trial_gets_the_same_config():
    searcher = make()
    rung0 = suggest_all(searcher, 0)
    before = json.dumps(searcher.get_state())
    assert searcher.suggest("t9") is None  # rung 0 runs
    assert json.dumps(searcher.get_state()) == before and searcher.quiet_wait  # the operator journals no "not now"
    assert searcher.suggest("t3") == rung0[3][1]  # a Trial whose create failed is asked for again
    for trial, _ in rung0[:-1]:
        searcher.on_trial_complete(trial, {"loss": 1.0})
        assert searcher.suggest("t9") is None
    searcher.on_trial_complete(rung0[-1][0], {"loss": 0.5})
    config = searcher.suggest("t9")
    assert key(config) == key(rung0[-1][1]) and config["num-epochs"] == 3
    assert searcher.suggest("t9") == config


def test_ties_keep_the_suggestion_order_and_failed_or_valueless_trials_are_never_copied():
    searcher = make()
    rung0 = suggest_all(searcher, 0)
    results = [
        ({"loss": 2.0}, False),
        ({"loss": 0.1}, True),  # failed: not ranked even with a value
        ({"loss": float("nan")}, False),
        (None, False),
        ({"other": 1.0}, False),
        ({"loss": 2.0}, False),
        ({"loss": float("inf")}, False),
        ({"loss": 2.0}, False),
        ({"loss": 3.0}, False),
    ]
    for (trial, _), (result, error) in zip(rung0, results):
        searcher.on_trial_complete(trial, result, error=error)
    rung1 = suggest_all(searcher, 9)
    assert [key(c) for _, c in rung1] == [key(rung0[i][1]) for i in (0, 5, 7)]


def test_fewer_ranked_trials_than_the_next_rung_copies_fewer():
    searcher = make()
    rung0 = suggest_all(searcher, 0)
    for i, (trial, _) in enumerate(rung0):
        searcher.on_trial_complete(trial, {"loss": 1.0} if i == 4 else None, error=i != 4)
    rung1 = suggest_all(searcher, 9)
    assert [key(c) for _, c in rung1] == [key(rung0[4][1])]


def play(searcher, first=0, loss=lambda c: c["lr"]) -> list[dict]:
    """Run every trial to its end (each rung completes before the next is asked for); the configs in order."""
    configs = []
    while True:
        rung = suggest_all(searcher, first + len(configs))
        if not rung:
            assert searcher.suggest(f"t{first + len(configs)}") == FINISHED
            return configs
        for trial, config in rung:
            searcher.on_trial_complete(trial, {"loss": loss(config)})
        configs += [c for _, c in rung]


def test_the_search_ends_after_the_last_bracket():
    configs = play(make())
    assert [c["num-epochs"] for c in configs] == [1] * 9 + [3] * 3 + [9] + [3] * 5 + [9] * 2 + [9] * 3
    new = [configs[i] for i in (*range(9), *range(13, 18), *range(20, 23))]
    assert len({key(c) for c in new}) == 17
    assert all(0.01 <= c["lr"] <= 0.05 and 0.5 <= c["momentum"] <= 0.9 for c in configs)
    assert key(configs[12]) == key(min(configs[9:12], key=lambda c: c["lr"]))
    assert key(configs[18]) == key(min(configs[13:18], key=lambda c: c["lr"]))
    searcher = make(num_samples=11)
    assert len(play(searcher)) == 11


@pytest.mark.parametrize("cut", [0, 4, 9, 10, 12, 13, 19])
def test_a_restored_searcher_suggests_what_the_uninterrupted_one_does(cut):
    """Stopped after ``cut`` trials were suggested (some still running), restored from its JSON state in a new
    instance with another seed: every later suggestion is the one the uninterrupted searcher makes."""
    calm = make(seed=4)
    expected = play(calm)
    stopped = make(seed=4)
    done = []
    while len(done) < cut:
        config = stopped.suggest(f"t{len(done)}")
        if config is None:  # the rung runs: its trials end (those ended before are ignored)
            for i, ended in enumerate(done):
                stopped.on_trial_complete(f"t{i}", {"loss": ended["lr"]})
            continue
        done.append(config)
    state = json.loads(json.dumps(stopped.get_state(), allow_nan=False))
    restored = make(seed=99)
    restored.set_state(state)
    assert json.loads(json.dumps(restored.get_state())) == state
    for i, config in enumerate(done):  # the trials running at the restart end
        restored.on_trial_complete(f"t{i}", {"loss": config["lr"]})
    assert done + play(restored, first=len(done)) == expected
    replayed = make(seed=4)  # the journal's replay: the same calls in the same order
    assert play(replayed) == expected


def test_settings_that_cannot_run_are_refused():
    with pytest.raises(ValueError, match="r_l and resource_name"):
        create_searcher("katib-hyperband", SPACE, "loss", "min", 3, 1, resource_name="num-epochs")
    with pytest.raises(ValueError, match="'epochs' must be a top-level key"):
        create_searcher("katib-hyperband", SPACE, "loss", "min", 3, 1, resource_name="epochs", r_l=9)
    with pytest.raises(ValueError, match="needs metric and mode"):
        create_searcher("katib-hyperband", SPACE, None, None, 3, 1, resource_name="num-epochs", r_l=9)
    with pytest.raises(ValueError, match="eta"):
        create_searcher("katib-hyperband", SPACE, "loss", "min", 3, 1, resource_name="num-epochs", r_l=9, eta=1)
    with pytest.raises(ValueError, match="r_l"):
        create_searcher("katib-hyperband", SPACE, "loss", "min", 3, 1, resource_name="num-epochs", r_l=0.5)
    with pytest.raises(ValueError, match=r"config\.lr: .*no grid_search"):
        make(space={**SPACE, "lr": {"grid_search": [0.01, 0.02]}})
    searcher = make()
    with pytest.raises(ValueError, match="cannot change while it runs"):
        make(r_l=27).set_state(searcher.get_state())
