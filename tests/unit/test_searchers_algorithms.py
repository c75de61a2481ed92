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
    with pytest.raises(ValueError, match="unknown optuna sampler 'cma'; valid: random, tpe"):
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


# ----------------------------------------------------------------------------- registry


def test_registry_names_and_classes():
    assert set(SEARCH_ALGORITHMS) == {"basic", "random", "optuna"}
    assert searcher_class("basic") is searcher_class("random") is BasicVariantSearcher
    assert searcher_class("optuna") is OptunaSearch


def test_unknown_algorithm_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown search algorithm 'hyperopt'; valid: basic, optuna, random"):
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
