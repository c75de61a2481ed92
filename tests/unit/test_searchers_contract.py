"""The searcher contract: every registered search algorithm passes these (one fixture per implementation).

Modelled on Optuna's ``optuna/testing/pytest_storages.py``: a new algorithm
adds its name to ``SEARCHERS`` (and, if needed, a space it supports).
"""

from __future__ import annotations

import json

import pytest

from kubetune_operator.algorithms import SEARCH_ALGORITHMS, create_searcher
from kubetune_operator.searchers import FINISHED, Searcher
from kubetune_operator.searchers.optuna_search import SAMPLERS

#: A space every algorithm supports: no grid_search, randn or sample_from.
SPACE = {
    "lr": {"loguniform": [1e-4, 1e-1]},
    "momentum": {"uniform": [0.5, 0.99]},
    "model": {
        "layers": {"randint": [1, 5]},
        "width": {"qrandint": [32, 256, 32]},
        "act": {"choice": ["relu", "tanh", {"name": "leaky", "slope": 0.1}]},
    },
    "epochs": 3,
    "tags": ["a", "b"],
}
NUM_SAMPLES = 12
#: Algorithm names; ``optuna:<sampler>`` is the optuna searcher with that sampler (and its arguments below).
SEARCHERS = [
    "basic",
    "random",
    "bohb",
    "katib-hyperband",
    "optuna",
    "optuna:random",
    "optuna:cmaes",
    "optuna:qmc",
    "optuna:nsga2",
    "optuna:nsga3",
]
SAMPLER_ARGS = {
    "optuna": {"multivariate": True, "group": True, "n_startup_trials": 4},
    "optuna:cmaes": {"n_startup_trials": 3, "popsize": 4},
    "optuna:qmc": {"qmc_type": "halton", "scramble": True},
    # small populations, so that 12 trials make several generations
    "optuna:nsga2": {"population_size": 4},
    "optuna:nsga3": {"population_size": 4, "dividing_parameter": 2},
}


#: The parameters of algorithms that need some: katib-hyperband's first rung is 16 new configs at epochs 3 (more than
#: NUM_SAMPLES, so every suggestion here is a new draw; tests/unit/test_katib_hyperband.py plays the rungs).
PARAMS = {"katib-hyperband": {"resource_name": "epochs", "r_l": 48, "eta": 4}}


def make(name: str, seed: int = 3, num_samples: int = NUM_SAMPLES) -> Searcher:
    algorithm, _, sampler = name.partition(":")
    params = {"sampler": sampler} if sampler else dict(PARAMS.get(name, {}))
    if name in SAMPLER_ARGS:
        params["sampler_args"] = SAMPLER_ARGS[name]
    return create_searcher(algorithm, SPACE, metric="score", mode="max", num_samples=num_samples, seed=seed, **params)


@pytest.fixture(params=SEARCHERS)
def name(request) -> str:
    return request.param


def score(config: dict) -> float:
    return -abs(config["momentum"] - 0.9) - config["model"]["layers"] / 10


def run(searcher: Searcher, ids: range) -> list[dict]:
    configs = []
    for i in ids:
        config = searcher.suggest(f"trial-{i}")
        assert config != FINISHED
        configs.append(config)
        # a rung result as HyperBandForBOHB hands it (bohb learns from these; the others ignore intermediate results)
        rung = {"score": score(config), "training_iteration": 1, "hyperband_info": {"budget": 1}}
        searcher.on_trial_result(f"trial-{i}", rung)
        searcher.on_trial_complete(f"trial-{i}", {"score": score(config), "training_iteration": 2})
    return configs


def assert_in_space(config: dict) -> None:
    assert 1e-4 <= config["lr"] < 1e-1
    assert 0.5 <= config["momentum"] <= 0.99
    assert 1 <= config["model"]["layers"] < 5
    assert 32 <= config["model"]["width"] <= 256 and config["model"]["width"] % 32 == 0
    assert config["model"]["act"] in SPACE["model"]["act"]["choice"]
    assert config["epochs"] == 3 and config["tags"] == ["a", "b"]


#: Registered algorithms that draw no config themselves, each with the tests of its own contract: ``driver`` passes
#: on what the Experiment's driver pod suggests (tests/unit/test_driver_searcher.py).
NOT_DRAWING = {"driver"}


def test_every_registered_algorithm_is_covered():
    assert {name.partition(":")[0] for name in SEARCHERS} == set(SEARCH_ALGORITHMS) - NOT_DRAWING
    assert {name.partition(":")[2] for name in SEARCHERS if name.startswith("optuna:")} | {"tpe"} == set(SAMPLERS)


def test_suggests_num_samples_configs_in_the_space_then_finished(name):
    searcher = make(name)
    configs = run(searcher, range(NUM_SAMPLES))
    for config in configs:
        assert_in_space(config)
    assert searcher.suggest("one-more") == FINISHED
    assert searcher.suggest("and-another") == FINISHED


def test_configs_are_not_all_the_same(name):
    configs = run(make(name), range(NUM_SAMPLES))
    if name in ("optuna:nsga2", "optuna:nsga3"):  # children take their parents' values (a population of 4)
        assert len({json.dumps(c, sort_keys=True) for c in configs}) >= NUM_SAMPLES - 2
    else:
        assert len({c["lr"] for c in configs}) == NUM_SAMPLES


def test_same_seed_same_first_suggestions(name):
    assert run(make(name, seed=5), range(4)) == run(make(name, seed=5), range(4))
    assert run(make(name, seed=5), range(4)) != run(make(name, seed=6), range(4))


def test_state_is_strict_json_and_resumes_in_a_new_instance(name):
    original = make(name)
    run(original, range(5))
    running = original.suggest("running-at-restart")
    state = json.loads(json.dumps(original.get_state(), allow_nan=False))

    restored = make(name, seed=999)  # the constructor's seed loses to the state's
    restored.set_state(state)
    restored.on_trial_complete("running-at-restart", {"score": score(running)})
    rest = run(restored, range(6, NUM_SAMPLES))
    assert len(rest) == NUM_SAMPLES - 6
    assert restored.suggest("extra") == FINISHED
    assert json.loads(json.dumps(restored.get_state(), allow_nan=False))


def test_restore_is_faithful_and_deterministic(name):
    original = make(name)
    run(original, range(4))
    state = json.loads(json.dumps(original.get_state()))
    clones = [make(name, seed=i) for i in (1, 2)]
    for clone in clones:
        clone.set_state(state)
        assert json.loads(json.dumps(clone.get_state())) == state
    # Two operators restarting from the same state hand out the same next config.
    first, second = (clone.suggest("x") for clone in clones)
    assert first == second
    assert_in_space(first)


def test_a_restored_searcher_continues_as_the_uninterrupted_one(name):
    """Restored mid-run, with a trial running, every later suggestion is the one an operator that never
    restarted makes (for samplers whose state lives in the study too: CMA-ES, the GAs, QMC)."""

    def first_half(searcher):
        run(searcher, range(5))
        running = searcher.suggest("running")
        run(searcher, range(5, 7))
        return running

    def second_half(searcher, running):
        searcher.on_trial_complete("running", {"score": score(running)})
        return run(searcher, range(7, NUM_SAMPLES - 1))

    calm = make(name)
    running = first_half(calm)
    expected = second_half(calm, running)
    stopped = make(name)
    assert first_half(stopped) == running
    restored = make(name, seed=999)
    restored.set_state(json.loads(json.dumps(stopped.get_state(), allow_nan=False)))
    assert second_half(restored, running) == expected
    assert json.loads(json.dumps(restored.get_state())) == json.loads(json.dumps(calm.get_state()))


def test_failed_and_incomplete_trials_do_not_break_it(name):
    searcher = make(name, num_samples=6)
    for i in range(6):
        config = searcher.suggest(f"t{i}")
        assert_in_space(config)
        if i % 3 == 0:
            searcher.on_trial_complete(f"t{i}", error=True)
        elif i % 3 == 1:
            searcher.on_trial_complete(f"t{i}", {"other": 1})  # metric missing
        else:
            searcher.on_trial_complete(f"t{i}", {"score": float("nan")})
        searcher.on_trial_complete(f"t{i}", {"score": 1.0})  # a second completion is ignored
    searcher.on_trial_complete("never-suggested", {"score": 1.0})
    assert searcher.suggest("t6") == FINISHED
    json.dumps(searcher.get_state(), allow_nan=False)


def test_bad_mode_is_rejected(name):
    with pytest.raises(ValueError, match="mode"):
        create_searcher(name.partition(":")[0], SPACE, metric="score", mode="maximize", num_samples=2, seed=0)


def test_bad_space_is_rejected_with_its_path(name):
    with pytest.raises(ValueError, match=r"config\.model\.lr"):
        create_searcher(
            name.partition(":")[0],
            {"model": {"lr": {"loguniform": [0, 1]}}},
            metric="s",
            mode="min",
            num_samples=2,
            seed=0,
        )
