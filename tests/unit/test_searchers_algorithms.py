"""What each searcher does beyond the contract: basic variant order and random access, Optuna's learning and
replay, and the registry (kubetune_operator.searchers)."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import pytest

from kubetune.search import generate_variants, sample_from
from kubetune_operator.algorithms import SEARCH_ALGORITHMS, create_searcher, searcher_class
from kubetune_operator.searchers import FINISHED
from kubetune_operator.searchers.base import decode_number, encode_number
from kubetune_operator.searchers.basic import BasicVariantSearcher
from kubetune_operator.searchers.optuna_search import OptunaSearch

GRID_SPACE = {"lr": {"loguniform": [1e-4, 1e-1]}, "opt": {"grid_search": ["sgd", "adam", "rmsprop"]}}

# ----------------------------------------------------------------------------- basic / random


def test_basic_suggests_the_generators_variants_in_order():
    searcher = create_searcher("basic", GRID_SPACE, num_samples=2, seed=4)
    assert searcher.total == 6
    suggested = [searcher.suggest(f"t{i}") for i in range(6)]
    assert suggested == [c for c, _ in generate_variants(GRID_SPACE, 2, seed=4)]
    assert searcher.suggest("t6") == FINISHED


def test_basic_suggest_and_random_access():
    searcher = create_searcher("random", GRID_SPACE, num_samples=1, seed=4)
    config = searcher.suggest("t0")
    assert config == searcher.variant(0)[0]
    tag = searcher.variant(0)[1]
    assert tag.startswith("0_lr=") and tag.endswith(",opt=sgd")
    assert searcher.next_index == 1
    assert searcher.variant(2) == searcher.variant(2)  # no state change
    assert searcher.next_index == 1
    with pytest.raises(IndexError):
        searcher.variant(3)


def test_basic_restore_continues_with_the_same_configs():
    original = create_searcher("basic", GRID_SPACE, num_samples=3, seed=None)
    [original.suggest(f"t{i}") for i in range(4)]
    state = original.get_state()
    assert state == {"seed": original.generator.seed, "next_index": 4}
    restored = create_searcher("basic", GRID_SPACE, num_samples=3, seed=None)
    restored.set_state(json.loads(json.dumps(state)))
    assert [restored.suggest(f"r{i}") for i in range(5)] == [original.suggest(f"t{i}") for i in range(4, 9)]


def test_basic_points_and_constant_grid_search_survive_a_restart_from_the_spec():
    params = {"points_to_evaluate": [{"opt": "adam", "lr": 0.01}, {"lr": 0.001}], "constant_grid_search": True}
    original = create_searcher("basic", GRID_SPACE, num_samples=3, seed=None, **params)
    assert original.total == 1 + 3 + 3  # Ray: each point replaces a sample; the second point crosses opt
    first = [original.suggest(f"t{i}") for i in range(3)]
    assert first == [{"opt": "adam", "lr": 0.01}, {"opt": "sgd", "lr": 0.001}, {"opt": "adam", "lr": 0.001}]
    restored = create_searcher("basic", GRID_SPACE, num_samples=3, seed=None, **params)
    restored.set_state(json.loads(json.dumps(original.get_state())))  # another seed in the constructor: the stored wins
    rest = [restored.suggest(f"r{i}") for i in range(4)]
    assert rest == [original.suggest(f"t{i}") for i in range(3, 7)]
    assert rest[0] == {"opt": "rmsprop", "lr": 0.001} and len({c["lr"] for c in rest[1:]}) == 1  # constant lr
    assert restored.suggest("r4") == FINISHED


def test_basic_rejects_an_inconsistent_state():
    searcher = create_searcher("basic", GRID_SPACE, num_samples=1, seed=0)
    with pytest.raises(ValueError, match="next_index"):
        searcher.set_state({"seed": 0, "next_index": 7})


def test_basic_supports_sdk_only_domains():
    searcher = BasicVariantSearcher({"a": {"randint": [1, 3]}, "b": sample_from(lambda c: c["a"] * 10)}, seed=0)
    config = searcher.suggest("t")
    assert config["b"] == 10 * config["a"]


# ----------------------------------------------------------------------------- optuna


def distance_to_optimum(searcher, count: int, prefix: str) -> float:
    """Median |x - 0.3| of ``count`` suggestions, each told ``loss = (x - 0.3)**2`` before the next."""
    distances = []
    for i in range(count):
        config = searcher.suggest(f"{prefix}{i}")
        distances.append(abs(config["x"] - 0.3))
        searcher.on_trial_complete(f"{prefix}{i}", {"loss": (config["x"] - 0.3) ** 2})
    return statistics.median(distances)


def optuna_on_x(mode: str, seed: int = 0, num_samples: int = 60):
    return create_searcher(
        "optuna",
        {"x": {"uniform": [0, 1]}},
        metric="loss",
        mode=mode,
        num_samples=num_samples,
        seed=seed,
        sampler_args={"n_startup_trials": 10},
    )


def test_optuna_minimizes_when_mode_is_min():
    searcher = optuna_on_x("min")
    startup = distance_to_optimum(searcher, 10, "s")  # random start-up: ~0.3
    assert distance_to_optimum(searcher, 10, "w") < 0.3  # warming up
    assert distance_to_optimum(searcher, 20, "l") < 0.15 < startup


def test_optuna_maximizes_when_mode_is_max():
    searcher = optuna_on_x("max")
    distance_to_optimum(searcher, 20, "s")
    assert distance_to_optimum(searcher, 20, "l") > 0.5  # pushed to x = 1, the largest loss


def test_optuna_restart_replays_what_it_learned():
    original = optuna_on_x("min", seed=1)
    distance_to_optimum(original, 30, "t")
    state = json.loads(json.dumps(original.get_state(), allow_nan=False))
    restored, fresh = optuna_on_x("min", seed=1), optuna_on_x("min", seed=1)
    restored.set_state(state)
    # Without the replayed history TPE would start over with random draws, as ``fresh`` does.
    assert distance_to_optimum(restored, 10, "r") < 0.15 < distance_to_optimum(fresh, 10, "r")
    assert len(restored.get_state()["trials"]) == 40


def test_optuna_trial_running_at_restart_is_told_after_it():
    space = {"x": {"uniform": [0, 1]}}
    original = create_searcher("optuna", space, metric="m", mode="max", num_samples=3, seed=2)
    original.suggest("a")
    original.on_trial_complete("a", {"m": 1.0})
    config_b = original.suggest("b")
    restored = create_searcher("optuna", space, metric="m", mode="max", num_samples=3, seed=2)
    restored.set_state(original.get_state())
    assert restored.get_state()["trials"]["b"]["state"] == "running"
    restored.on_trial_complete("b", {"m": 2.0})
    b = restored.get_state()["trials"]["b"]
    assert (b["state"], b["value"]) == ("complete", 2.0)
    assert b["params"] == {"x": config_b["x"]}


def test_optuna_state_encodes_infinite_values():
    searcher = create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="max", num_samples=2, seed=0)
    searcher.suggest("a")
    searcher.on_trial_complete("a", {"m": -math.inf})
    state = searcher.get_state()
    assert state["trials"]["a"]["value"] == "-inf"
    json.dumps(state, allow_nan=False)
    clone = create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="max", num_samples=2, seed=0)
    clone.set_state(state)
    assert clone.get_state() == state


def test_optuna_maps_every_supported_domain():
    space = {
        "u": {"quniform": [0, 1, 0.25]},
        "l": {"qloguniform": [5, 1000, 5]},
        "r": {"randint": [1, 3]},
        "q": {"qrandint": [0, 100, 25]},
        "lr": {"lograndint": [1, 4]},
        "ql": {"qlograndint": [10, 1000, 10]},
        "c": {"choice": [None, [1], {"k": "v"}]},
        "const": {"nested": True},
    }
    searcher = create_searcher("optuna", space, metric="m", mode="max", num_samples=60, seed=0, sampler="random")
    seen = {key: set() for key in ("u", "r", "q", "lr")}
    for i in range(60):
        config = searcher.suggest(f"t{i}")
        assert math.isclose(config["u"] / 0.25, round(config["u"] / 0.25))
        assert 5 <= config["l"] <= 1000 and config["l"] % 5 == 0
        assert config["q"] % 25 == 0 and config["ql"] % 10 == 0 and type(config["ql"]) is int
        assert config["c"] in space["c"]["choice"] and config["const"] == {"nested": True}
        for key in seen:
            seen[key].add(config[key])
        searcher.on_trial_complete(f"t{i}", {"m": 0.0})
    assert seen["r"] == {1, 2} and seen["lr"] <= {1, 2, 3}  # randint/lograndint exclude the upper bound
    assert seen["q"] == {0, 25, 50, 75, 100} and seen["u"] == {0.0, 0.25, 0.5, 0.75, 1.0}


def test_optuna_points_to_evaluate_come_first():
    space = {"x": {"uniform": [0, 1]}, "m": {"act": {"choice": ["relu", {"name": "elu"}]}}, "k": 1}
    points = [{"x": 0.5, "m": {"act": {"name": "elu"}}}, {"x": 0.25, "m/act": "relu"}]
    searcher = create_searcher(
        "optuna", space, metric="s", mode="max", num_samples=3, seed=0, points_to_evaluate=points
    )
    assert searcher.suggest("a") == {"x": 0.5, "m": {"act": {"name": "elu"}}, "k": 1}
    assert searcher.suggest("b") == {"x": 0.25, "m": {"act": "relu"}, "k": 1}
    assert searcher.suggest("c") != FINISHED


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ({"y": 1}, "y not sampled parameters"),
        ({"m": {"act": "gelu"}}, "m/act='gelu' is not one of"),
    ],
)
def test_optuna_bad_points(point, message):
    space = {"x": {"uniform": [0, 1]}, "m": {"act": {"choice": ["relu", "elu"]}}}
    with pytest.raises(ValueError, match=message):
        create_searcher("optuna", space, metric="s", mode="max", num_samples=2, seed=0, points_to_evaluate=[point])


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"a": {"b": {"grid_search": [1, 2]}}}, r"config\.a\.b: optuna search does not support grid_search"),
        ({"n": {"randn": [0, 1]}}, r"config\.n: optuna search does not support randn"),
        ({"f": sample_from(lambda c: 1)}, r"config\.f: optuna search does not support sample_from"),
    ],
)
def test_optuna_rejects_unsupported_domains(space, message):
    with pytest.raises(ValueError, match=message):
        OptunaSearch(space, metric="m", mode="max", num_samples=2, seed=0)


def test_optuna_needs_metric_mode_and_a_known_sampler():
    with pytest.raises(ValueError, match="metric and mode"):
        create_searcher("optuna", {"x": {"uniform": [0, 1]}}, num_samples=2, seed=0)
    with pytest.raises(ValueError, match="unknown optuna sampler 'cma'; valid: cmaes, nsga2, nsga3, qmc, random, tpe"):
        create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="max", sampler="cma")
    with pytest.raises(ValueError, match="sampler_args: .*n_startup"):
        create_searcher(
            "optuna",
            {"x": {"uniform": [0, 1]}},
            metric="m",
            mode="max",
            sampler="random",
            sampler_args={"n_startup_trials": 3},
        )
    with pytest.raises(ValueError, match="searchAlgorithm.seed"):
        create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="max", sampler_args={"seed": 1})
    searcher = create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="max", num_samples=2)
    assert isinstance(searcher.get_state()["seed"], int)
    first = searcher.suggest("a")
    assert searcher.suggest("a") == first  # asked again (a failed Trial create): the same config, no new ask
    assert len(searcher.get_state()["trials"]) == 1


@pytest.mark.parametrize(
    "sampler, args, message",
    [
        ("gp", {}, "optuna sampler 'gp' is not available: Optuna's GPSampler needs PyTorch"),
        (
            "tpe",
            {"gamma": 0.1},
            "sampler_args: gamma is not an argument of the tpe sampler .*valid: consider_endpoints",
        ),
        ("tpe", {"multivariate": 1}, "sampler_args: multivariate must be bool, got 1"),
        ("tpe", {"group": True, "multivariate": False}, "sampler_args: .*group.*multivariate"),
        ("cmaes", {"popsize": 2.5}, "sampler_args: popsize must be int, got 2.5"),
        ("qmc", {"qmc_type": "lattice"}, "sampler_args: .*qmc_type"),
        ("nsga2", {"crossover": "sbx"}, "sampler_args: crossover is not an argument of the nsga2 sampler"),
        ("random", {"n_startup_trials": 3}, "sampler_args: n_startup_trials .*valid: none"),
    ],
)
def test_optuna_sampler_arguments_are_checked(sampler, args, message):
    with pytest.raises(ValueError, match=message):
        create_searcher(
            "optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="max", sampler=sampler, sampler_args=args
        )


def test_optuna_sampler_arguments_reach_the_sampler():
    searcher = create_searcher(
        "optuna",
        {"x": {"uniform": [0, 1]}},
        metric="m",
        mode="max",
        sampler="nsga2",
        sampler_args={"population_size": 6.0, "crossover_prob": 1},
    )
    sampler = searcher._sampler(0)
    assert sampler._population_size == 6  # a whole float is an int
    qmc = create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="max", sampler="qmc", seed=5)
    assert qmc._sampler(0)._seed == qmc._sampler(7)._seed == 5  # one sequence, whatever the trial


def two_objectives(sampler: str, seed: int = 0, num_samples: int = 16, **params):
    return create_searcher(
        "optuna",
        {"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}},
        metric=["loss", "cost"],
        mode=["min", "max"],
        num_samples=num_samples,
        seed=seed,
        sampler=sampler,
        **params,
    )


def tell_two(searcher, ids):
    for i in ids:
        c = searcher.suggest(f"t{i}")
        searcher.on_trial_complete(f"t{i}", {"loss": (c["x"] - 0.3) ** 2, "cost": c["y"] - c["x"]})


@pytest.mark.parametrize("sampler", ["tpe", "random", "qmc", "nsga2", "nsga3"])
def test_optuna_multi_objective_search_tells_every_objective(sampler):
    args = {"sampler_args": {"population_size": 4}} if sampler.startswith("nsga") else {}
    searcher = two_objectives(sampler, **args)
    tell_two(searcher, range(10))
    searcher.suggest("nan")
    searcher.on_trial_complete("nan", {"loss": float("nan"), "cost": 1.0})  # Optuna fails a NaN: so do we
    searcher.suggest("missing")
    searcher.on_trial_complete("missing", {"loss": 1.0})
    study = searcher._study
    assert [d.name for d in study.directions] == ["MINIMIZE", "MAXIMIZE"]
    assert all(len(t.values) == 2 for t in study.trials[:10])
    state = searcher.get_state()["trials"]
    assert state["nan"]["state"] == state["missing"]["state"] == "fail"
    assert state["t0"]["value"] == list(study.trials[0].values)
    assert study.best_trials  # Optuna's own Pareto front of what it was told


def test_optuna_cmaes_refuses_several_objectives():
    with pytest.raises(ValueError, match="optuna sampler 'cmaes' optimizes one objective; metric gives 2"):
        two_objectives("cmaes")


@pytest.mark.parametrize(
    "metric, mode, message",
    [
        (["a"], ["max"], "metric: a list of 2 to 8 result keys"),
        (["a", "b"], ["max"], "mode must give one of max/min per metric"),
        (["a", "a"], ["max", "min"], "distinct non-empty strings"),
        (["a", "b"], "max", "metric and mode of several objectives are both lists"),
        (["a", "b"], ["max", "up"], "mode must be 'max' or 'min'"),
    ],
)
def test_optuna_multi_objective_metric_and_mode_are_checked(metric, mode, message):
    with pytest.raises(ValueError, match=message):
        create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric=metric, mode=mode)


def test_optuna_evaluated_rewards_are_added_as_finished_trials_not_run():
    space = {"x": {"uniform": [0, 1]}, "k": {"choice": ["a", "b"]}}
    points = [{"x": 0.25, "k": "b"}, {"x": 0.75, "k": "a"}]

    def make(seed=0):
        return create_searcher(
            "optuna",
            space,
            metric="m",
            mode="max",
            num_samples=3,
            seed=seed,
            points_to_evaluate=points,
            evaluated_rewards=[0.5, 0.9],
            sampler_args={"n_startup_trials": 1},
        )

    searcher = make()
    study = searcher._study
    assert [(t.params, t.value, t.state.name) for t in study.trials] == [
        ({"x": 0.25, "k": 1}, 0.5, "COMPLETE"),
        ({"x": 0.75, "k": 0}, 0.9, "COMPLETE"),
    ]
    configs = [searcher.suggest(f"t{i}") for i in range(3)]
    assert configs[0] not in points  # the points are not run
    assert searcher.suggest("t3") == FINISHED  # and not counted against num_samples
    for i, c in enumerate(configs[:2]):
        searcher.on_trial_complete(f"t{i}", {"m": c["x"]})
    restored = make(seed=9)
    restored.set_state(json.loads(json.dumps(searcher.get_state())))
    assert len(restored._study.trials) == 5 and restored._study.trials[1].value == 0.9
    assert restored.get_state() == searcher.get_state()
    two = two_objectives("nsga2", points_to_evaluate=[{"x": 0.5, "y": 0.5}], evaluated_rewards=[[0.1, 0.2]])
    assert two._study.trials[0].values == [0.1, 0.2]


@pytest.mark.parametrize(
    "points, rewards, message",
    [
        ([{"x": 0.5, "k": "a"}], [1, 2], r"evaluated_rewards: one result per point of points_to_evaluate \(1\)"),
        ([{"x": 0.5}], [1], r"evaluated_rewards: points_to_evaluate\[0\] lacks k"),
        ([{"x": 0.5, "k": "a"}], [float("nan")], r"evaluated_rewards\[0\] must be a finite number"),
        ([{"x": 0.5, "k": "a"}], [[1, 2]], r"evaluated_rewards\[0\] must be a finite number"),
    ],
)
def test_optuna_bad_evaluated_rewards(points, rewards, message):
    space = {"x": {"uniform": [0, 1]}, "k": {"choice": ["a", "b"]}}
    with pytest.raises(ValueError, match=message):
        create_searcher("optuna", space, metric="m", mode="max", points_to_evaluate=points, evaluated_rewards=rewards)


@pytest.mark.parametrize("sampler", ["cmaes", "qmc", "nsga2"])
def test_optuna_replayed_study_keeps_the_samplers_own_state(sampler):
    """The study a restore rebuilds holds what the sampler wrote besides the trials (CMA-ES's optimizer and
    generations, the GA's generations, QMC's position in its sequence), as the uninterrupted one does, also
    after partial points_to_evaluate (asked with some parameters given)."""
    args = {"cmaes": {"popsize": 4, "n_startup_trials": 2}, "qmc": {}, "nsga2": {"population_size": 4}}[sampler]

    def make(seed=1):
        return create_searcher(
            "optuna",
            {"x": {"uniform": [0, 1]}, "y": {"uniform": [-1, 1]}},
            metric="m",
            mode="min",
            num_samples=20,
            seed=seed,
            sampler=sampler,
            sampler_args=args,
            points_to_evaluate=[{"x": 0.5}],
        )

    original = make()
    for i in range(11):
        c = original.suggest(f"t{i}")
        if i != 4:  # t4 is still running
            original.on_trial_complete(f"t{i}", {"m": (c["x"] - 0.2) ** 2 + c["y"] ** 2})
    restored = make(seed=2)
    restored.set_state(json.loads(json.dumps(original.get_state())))

    def system_attrs(searcher):
        storage, study_id = searcher._study._storage, searcher._study._study_id
        trials = [(t.number, t.state, t.params, t.values, t.system_attrs) for t in searcher._study.trials]
        for *_, attrs in trials:
            attrs.pop("fixed_params", None)  # the replay enqueues every trial's parameters
        return storage.get_study_system_attrs(study_id), trials

    assert system_attrs(restored) == system_attrs(original)
    assert any(attrs for *_, attrs in system_attrs(original)[1]) or system_attrs(original)[0]


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_optuna_tells_early_stopped_trials_as_pruned_at_their_iteration_when_asked(sampler):
    """prune_early_stopped: a trial stopped early is PRUNED with its last value as the intermediate value at its
    training_iteration; one that completed, failed, or ended while the option is off is told as before; a
    restore (add_trials for TPE, the asks-and-tells replay for CMA-ES) rebuilds the same study and then
    suggests what the uninterrupted one suggests."""
    from optuna.trial import TrialState

    def make(prune=True):
        return create_searcher(
            "optuna",
            {"x": {"uniform": [0, 1]}},
            metric="loss",
            mode="min",
            num_samples=12,
            seed=4,
            sampler=sampler,
            sampler_args={"n_startup_trials": 2},
            prune_early_stopped=prune,
        )

    original, ray_like = make(), make(prune=False)
    ends = {"a": (1, True, False), "b": (4, False, False), "c": (2, True, False), "d": (3, True, True)}
    for name, (iteration, early, error) in ends.items():
        for searcher in (original, ray_like):
            config = searcher.suggest(name)
            result = {"loss": config["x"], "training_iteration": iteration}
            searcher.on_trial_complete(name, result, error=error, early_stopped=early)
    trials = {t.number: t for t in original._study.trials}
    assert [trials[i].state for i in range(4)] == [
        TrialState.PRUNED,
        TrialState.COMPLETE,
        TrialState.PRUNED,
        TrialState.FAIL,
    ]
    assert trials[0].intermediate_values == {1: original.get_state()["trials"]["a"]["value"]}
    assert list(trials[2].intermediate_values) == [2] and trials[1].intermediate_values == {}
    assert [t.state for t in ray_like._study.trials] == [TrialState.COMPLETE] * 3 + [TrialState.FAIL]
    state = json.loads(json.dumps(original.get_state(), allow_nan=False))
    assert state["trials"]["a"]["state"] == "pruned" and state["trials"]["a"]["step"] == 1
    restored = make()
    restored.set_state(state)
    rebuilt = [(t.state, t.params, t.value, t.intermediate_values) for t in restored._study.trials]
    assert rebuilt == [(t.state, t.params, t.value, t.intermediate_values) for t in original._study.trials]
    assert [restored.suggest(f"n{i}") for i in range(3)] == [original.suggest(f"n{i}") for i in range(3)]


def test_optuna_prune_early_stopped_is_checked():
    with pytest.raises(ValueError, match="optuna': prune_early_stopped: Input should be a valid boolean"):
        create_searcher("optuna", {"x": {"uniform": [0, 1]}}, metric="m", mode="min", prune_early_stopped="yes")
    with pytest.raises(ValueError, match="prune_early_stopped needs one objective"):
        two_objectives("tpe", prune_early_stopped=True)


# ----------------------------------------------------------------------------- registry


def test_registry_names_and_classes():
    assert set(SEARCH_ALGORITHMS) == {"basic", "random", "optuna", "bohb", "katib-hyperband", "driver"}
    assert searcher_class("basic") is searcher_class("random") is BasicVariantSearcher
    assert searcher_class("optuna") is OptunaSearch


def test_unknown_algorithm_lists_the_valid_ones():
    valid = "basic, bohb, driver, katib-hyperband, optuna, random"
    with pytest.raises(ValueError, match=rf"unknown search algorithm 'hyperopt'; valid: {valid}"):
        create_searcher("hyperopt", {}, num_samples=1)


def test_unknown_parameter_lists_the_valid_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown parameter\(s\) n_trials .*valid: sampler, sampler_args, "
        r"points_to_evaluate",
    ):
        create_searcher("optuna", {}, metric="m", mode="max", n_trials=3)
    with pytest.raises(ValueError, match="valid: points_to_evaluate, constant_grid_search$"):
        create_searcher("basic", {}, shuffle=True)


def test_registry_imports_algorithms_lazily():
    code = (
        "import sys, kubetune_operator.algorithms as s; assert 'optuna' not in sys.modules; "
        "s.create_searcher('basic', {}, num_samples=1); assert 'optuna' not in sys.modules; "
        "s.searcher_class('optuna'); assert 'optuna' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_number_encoding_round_trips():
    for value in (1, 2.5, None, math.inf, -math.inf):
        assert decode_number(json.loads(json.dumps(encode_number(value), allow_nan=False))) == value
    assert math.isnan(decode_number(encode_number(math.nan)))
