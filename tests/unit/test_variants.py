"""Basic variant generation: counts, grid order, reproducibility, random access, tags (kubetune.search.variants)."""

from __future__ import annotations

import itertools
import random

import pytest

from kubetune.search import (
    RecursiveDependencyError,
    VariantSpace,
    choice,
    format_tag,
    generate_variants,
    grid_search,
    loguniform,
    randint,
    sample_from,
    uniform,
)

SPACE = {
    "lr": {"loguniform": [1e-4, 1e-1]},
    "optimizer": {"grid_search": ["sgd", "adam"]},
    "model": {"depth": {"grid_search": [2, 4, 8]}, "width": {"choice": [64, 128]}},
    "epochs": 10,
}


def test_total_is_num_samples_times_grid_product():
    assert VariantSpace(SPACE, num_samples=1, seed=0).total == 6
    assert VariantSpace(SPACE, num_samples=4, seed=0).total == 24
    assert len(generate_variants(SPACE, 3, seed=0)) == 18
    assert VariantSpace({"lr": {"uniform": [0, 1]}}, 5, seed=0).total == 5
    assert VariantSpace({"a": 1}, 2, seed=0).total == 2
    assert VariantSpace({}, 1, seed=0).total == 1


def test_grid_sorted_by_path_first_varies_fastest_each_pass_covers_the_grid():
    gen = VariantSpace(SPACE, num_samples=2, seed=1)
    points = [(c["model"]["depth"], c["optimizer"]) for c, _ in (gen.variant(i) for i in range(gen.total))]
    # paths sorted: ("model", "depth") < ("optimizer",), so depth varies fastest.
    one_pass = [(d, o) for o in ("sgd", "adam") for d in (2, 4, 8)]
    assert points == one_pass * 2
    assert gen.grid_size == 6


def test_grid_order_with_three_variables():
    space = {"c": grid_search([1, 2]), "a": grid_search(["x", "y"]), "b": {"z": grid_search([True, False])}}
    configs = [c for c, _ in generate_variants(space, seed=0)]
    expected = [{"c": c, "a": a, "b": {"z": z}} for c, z, a in itertools.product([1, 2], [True, False], "xy")]
    assert configs == expected


def test_fresh_random_draws_for_every_grid_point_and_pass():
    gen = VariantSpace(SPACE, num_samples=3, seed=2)
    lrs = [gen.variant(i)[0]["lr"] for i in range(gen.total)]
    assert len(set(lrs)) == gen.total


def test_values_respect_their_domains_and_constants_are_kept():
    for config, _ in generate_variants(SPACE, 20, seed=3):
        assert 1e-4 <= config["lr"] < 1e-1
        assert config["model"]["width"] in (64, 128)
        assert config["epochs"] == 10


def test_same_seed_same_variants_other_seed_other_variants():
    assert generate_variants(SPACE, 2, seed=5) == generate_variants(SPACE, 2, seed=5)
    assert generate_variants(SPACE, 2, seed=5) != generate_variants(SPACE, 2, seed=6)


def test_random_access_matches_sequential_order_and_survives_a_restart():
    first = VariantSpace(SPACE, num_samples=3, seed=11)
    sequence = [first.variant(i) for i in range(first.total)]
    restarted = VariantSpace(SPACE, num_samples=3, seed=11)  # e.g. a new operator process
    assert [restarted.variant(i) for i in reversed(range(restarted.total))] == sequence[::-1]
    assert restarted.variant(7) == restarted.variant(7)


def test_json_and_sdk_spaces_give_the_same_variants():
    sdk = {
        "lr": loguniform(1e-4, 1e-1),
        "optimizer": grid_search(["sgd", "adam"]),
        "model": {"depth": grid_search([2, 4, 8]), "width": choice([64, 128])},
        "epochs": 10,
    }
    assert generate_variants(sdk, 2, seed=9) == generate_variants(SPACE, 2, seed=9)


def test_a_value_does_not_depend_on_other_parameters_of_the_space():
    small = generate_variants({"lr": uniform(0, 1)}, 4, seed=21)
    large = generate_variants({"lr": uniform(0, 1), "extra": randint(0, 9), "k": 1}, 4, seed=21)
    assert [c["lr"] for c, _ in small] == [c["lr"] for c, _ in large]


def test_seed_none_picks_one_that_reproduces():
    gen = VariantSpace(SPACE, 2)
    assert isinstance(gen.seed, int)
    assert [gen.variant(i) for i in range(gen.total)] == generate_variants(SPACE, 2, seed=gen.seed)


def test_domains_inside_lists_and_deep_nesting():
    space = {"layers": [{"randint": [1, 4]}, 128, {"units": {"choice": [8, 16]}}], "a": {"b": {"c": uniform(0, 1)}}}
    for config, _ in generate_variants(space, 10, seed=4):
        assert 1 <= config["layers"][0] < 4 and config["layers"][1] == 128
        assert config["layers"][2]["units"] in (8, 16)
        assert 0 <= config["a"]["b"]["c"] < 1


def test_configs_are_independent_copies():
    space = {"opts": {"betas": [0.9, 0.99]}, "g": grid_search([{"k": [1]}, {"k": [2]}])}
    gen = VariantSpace(space, 1, seed=0)
    config, _ = gen.variant(0)
    config["opts"]["betas"].append(0)
    config["g"]["k"].append(0)
    assert gen.variant(0)[0] == {"opts": {"betas": [0.9, 0.99]}, "g": {"k": [1]}}
    assert space["opts"]["betas"] == [0.9, 0.99]
    categories = [{"name": "adam"}]
    config, _ = generate_variants({"opt": choice(categories)}, seed=0)[0]
    config["opt"]["name"] = "changed"
    assert categories == [{"name": "adam"}]


# ----------------------------------------------------------------------------- tags


def test_tag_format_is_rays_experiment_tag():
    space = {
        "lr": grid_search([0.001, 0.1]),
        "opt": grid_search(["adam/w", "sgd"]),
        "model": {"act": "relu"},
        "bs": grid_search([16]),
    }
    tags = [tag for _, tag in generate_variants(space, seed=0)]
    assert tags == [
        "0_bs=16,lr=0.0010,opt=adam_w",
        "1_bs=16,lr=0.1000,opt=adam_w",
        "2_bs=16,lr=0.0010,opt=sgd",
        "3_bs=16,lr=0.1000,opt=sgd",
    ]


def test_tag_of_sampled_values_uses_last_path_key_sorted_by_path():
    config, tag = VariantSpace({"z": {"a": randint(0, 10)}, "b": uniform(0, 1)}, 1, seed=0).variant(0)
    # sorted by full path: ("b",) < ("z", "a"), shown by the last key
    assert tag == f"0_b={config['b']:.4f},a={config['z']['a']}"


def test_tag_without_sampled_values_is_the_index():
    assert [t for _, t in generate_variants({"a": 1}, 3, seed=0)] == ["0", "1", "2"]


def test_format_tag_cleans_values():
    assert (
        format_tag(3, {("x",): "a b/c!", ("y",): True, ("w",): None, ("v",): [1, 2]}) == "3_v=1_2,w=None,x=a_b_c,y=True"
    )


# ----------------------------------------------------------------------------- sample_from


def test_sample_from_sees_resolved_values_in_both_styles():
    space = {
        "a": randint(5, 10),
        "b": sample_from(lambda spec: spec.config.a * 2),  # Ray 1.x spec style
        "c": sample_from(lambda config: config["a"] + 1),  # Ray 2.x config style
        "d": sample_from(lambda: "const"),
        "nested": {"e": sample_from(lambda config: config.nested.f * 10), "f": choice([1, 2])},
    }
    for config, tag in generate_variants(space, 5, seed=1):
        assert config["b"] == 2 * config["a"] and config["c"] == config["a"] + 1 and config["d"] == "const"
        assert config["nested"]["e"] == 10 * config["nested"]["f"]
        assert f"b={config['b']}" in tag


def test_sample_from_chains_resolve_in_dependency_order():
    space = {"a": sample_from(lambda c: c["b"] + 1), "b": sample_from(lambda c: c["x"] * 3), "x": 2}
    assert generate_variants(space, seed=0)[0][0] == {"a": 7, "b": 6, "x": 2}


def test_sample_from_cycle_is_rays_recursive_dependency_error_and_failure_raises():
    with pytest.raises(RecursiveDependencyError, match=r"cycle: a, b \(`a` recursively depends on `b`\)$"):
        VariantSpace({"a": sample_from(lambda c: c["b"]), "b": sample_from(lambda c: c["a"])}, seed=0).variant(0)
    with pytest.raises(RecursiveDependencyError, match=r"cycle: n.x, y \(`n.x` recursively depends on `y`\)$"):
        generate_variants(
            {"n": {"x": sample_from(lambda spec: spec.config.y)}, "y": sample_from(lambda c: c["n"]["x"] + 1)}, seed=0
        )
    assert issubclass(RecursiveDependencyError, ValueError)  # spec validation catches it as a bad space
    with pytest.raises(ValueError, match="sample_from at a failed"):
        VariantSpace({"a": sample_from(lambda c: 1 / 0)}, seed=0).variant(0)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("num_samples", [0, -1, 1.5, True, "2"])
def test_bad_num_samples(num_samples):
    with pytest.raises(ValueError, match="num_samples"):
        VariantSpace(SPACE, num_samples, seed=0)


def test_bad_seed_and_index():
    with pytest.raises(ValueError, match="seed"):
        VariantSpace(SPACE, 1, seed="x")
    gen = VariantSpace(SPACE, 1, seed=0)
    for index in (-1, 6, 100):
        with pytest.raises(IndexError):
            gen.variant(index)


def test_bad_space_raises_with_path():
    with pytest.raises(ValueError, match=r"^config\.model\.lr: loguniform"):
        VariantSpace({"model": {"lr": {"loguniform": [0, 1]}}}, seed=0)


def test_draws_are_keyed_by_seed_index_and_path_so_running_experiments_keep_their_configs():
    # The operator regenerates trial i's config after a restart or an upgrade: the key of each draw is part of
    # the contract (a flat grid: one draw per variant, keyed by its index).
    gen = VariantSpace({"lr": uniform(0, 1), "g": grid_search([1, 2]), "m": {"w": randint(0, 100)}}, 2, seed=7)
    config, _ = gen.variant(3)
    assert config["lr"] == uniform(0, 1).sample(random_state=random.Random("7:3:['lr']"))
    assert config["m"]["w"] == randint(0, 100).sample(random_state=random.Random("7:3:['m', 'w']"))


# ----------------------------------------------------------------------------- grid_search over iterables and spaces


def test_grid_search_takes_any_iterable_and_realises_it_once():
    generator = (x * 10 for x in range(3))
    space = {"r": grid_search(range(2)), "t": grid_search(("a", "b")), "g": grid_search(generator)}
    assert VariantSpace(space, 1, seed=0).total == 12
    assert [c["g"] for c, _ in generate_variants(space, seed=0)][::4] == [0, 10, 20]
    assert space["g"] == {"grid_search": [0, 10, 20]}  # the generator was read once, into the space
    for values in ("abc", {"a": 1}, 3, []):
        with pytest.raises(ValueError, match="grid_search needs a non-empty iterable"):
            grid_search(values)


def test_a_grid_value_that_is_a_domain_is_drawn_for_the_trials_that_choose_it():
    sdk = {"a": grid_search([uniform(10, 20), 3, choice(["x", "y"])])}
    json_space = {"a": {"grid_search": [{"uniform": [10, 20]}, 3, {"choice": ["x", "y"]}]}}
    variants = generate_variants(sdk, 2, seed=3)
    assert variants == generate_variants(json_space, 2, seed=3)
    assert len(variants) == 6
    for i, (config, tag) in enumerate(variants):
        if i % 3 == 0:
            assert 10 <= config["a"] < 20 and tag == f"{i}_a={config['a']:.4f}"  # as Ray: the drawn value
        elif i % 3 == 1:
            assert config == {"a": 3} and tag == f"{i}_a=3"
        else:
            assert config["a"] in ("x", "y") and tag == f"{i}_a={config['a']}"
    assert variants[0][0]["a"] != variants[3][0]["a"]  # drawn afresh in each sample


def test_a_grid_value_holding_a_grid_is_expanded_where_chosen_in_rays_order():
    space = {
        "x": uniform(0, 1),
        "b": grid_search([1, 2]),
        "a": grid_search([{"opt": "sgd", "lr": grid_search([0.1, 0.01])}, {"opt": "adam"}]),
    }
    gen = VariantSpace(space, 2, seed=5)
    assert gen.grid_size == 6 and gen.total == 12
    configs = [gen.variant(i)[0] for i in range(gen.total)]
    # Ray: "a" (first path) varies fastest, a chosen value's own grid faster still.
    assert [(c["a"], c["b"]) for c in configs[:6]] == [
        ({"opt": "sgd", "lr": 0.1}, 1),
        ({"opt": "sgd", "lr": 0.01}, 1),
        ({"opt": "adam"}, 1),
        ({"opt": "sgd", "lr": 0.1}, 2),
        ({"opt": "sgd", "lr": 0.01}, 2),
        ({"opt": "adam"}, 2),
    ]
    assert [(c["a"], c["b"]) for c in configs[6:]] == [(c["a"], c["b"]) for c in configs[:6]]
    # Ray draws a level's values before expanding the chosen grid values: x is shared by the lr variants.
    xs = [c["x"] for c in configs]
    assert xs[0] == xs[1] and xs[3] == xs[4] and len({xs[0], xs[2], xs[3], xs[5], xs[6]}) == 5
    assert gen.variant(1)[1] == f"1_a=opt_sgd_lr_0_01,lr=0.0100,b=1,x={xs[1]:.4f}"
    assert [VariantSpace(space, 2, seed=5).variant(i) for i in reversed(range(12))] == [
        gen.variant(i) for i in reversed(range(12))
    ]


def test_a_grid_value_that_is_sample_from_is_computed_for_the_trials_that_choose_it():
    space = {"a": grid_search([sample_from(lambda config: config["b"] * 2), 0]), "b": grid_search([5, 7])}
    assert [(c["a"], c["b"], t) for c, t in generate_variants(space, seed=0)] == [
        (10, 5, "0_a=10,b=5"),
        (0, 5, "1_a=0,b=5"),
        (14, 7, "2_a=14,b=7"),
        (0, 7, "3_a=0,b=7"),
    ]


# ----------------------------------------------------------------------------- constant_grid_search


def test_constant_grid_search_keeps_the_random_values_across_the_grid_of_one_sample():
    space = {"x": uniform(0, 1), "g": grid_search([1, 2, 3]), "h": grid_search(["p", "q"])}
    constant = VariantSpace(space, 3, seed=1, constant_grid_search=True)
    xs = [constant.variant(i)[0]["x"] for i in range(constant.total)]
    assert [len(set(xs[s * 6 : (s + 1) * 6])) for s in range(3)] == [1, 1, 1]  # one value per sample
    assert len(set(xs)) == 3  # a new one in every sample
    fresh = VariantSpace(space, 3, seed=1)
    assert len({fresh.variant(i)[0]["x"] for i in range(fresh.total)}) == 18
    assert [c["g"] for c, _ in generate_variants(space, 1, seed=1, constant_grid_search=True)] == [1, 2, 3] * 2


def test_constant_grid_search_draws_a_grid_values_domain_for_each_grid_point_that_chooses_it():
    # As Ray: the values a chosen grid value brings are drawn when it is expanded, once per choice.
    space = {"a": grid_search([uniform(0, 1), 5]), "b": grid_search([1, 2])}
    configs = [c for c, _ in generate_variants(space, 1, seed=2, constant_grid_search=True)]
    assert [c["a"] for c in configs][1::2] == [5, 5]
    assert configs[0]["a"] != configs[2]["a"]


def test_bad_constant_grid_search():
    with pytest.raises(ValueError, match="constant_grid_search must be true or false"):
        VariantSpace(SPACE, 1, seed=0, constant_grid_search="yes")


# ----------------------------------------------------------------------------- points_to_evaluate


def test_points_to_evaluate_replace_the_first_samples_as_in_rays_example():
    # Ray's BasicVariantGenerator docstring: 4 samples, 3 points, a 2-value grid give 6 trials.
    space = {"a": grid_search([1, 2]), "b": randint(0, 3)}
    points = [{"a": 2, "b": 2}, {"a": 1}, {"b": 2}]
    gen = VariantSpace(space, 4, seed=0, points_to_evaluate=points)
    assert gen.total == 6
    variants = [gen.variant(i) for i in range(6)]
    assert variants[0] == ({"a": 2, "b": 2}, "0")  # nothing left to resolve: the tag is the index
    assert variants[1][0]["a"] == 1 and variants[1][1] == f"1_b={variants[1][0]['b']}"
    assert variants[2:4] == [({"a": 1, "b": 2}, "2_a=1"), ({"a": 2, "b": 2}, "3_a=2")]
    assert [c["a"] for c, _ in variants[4:]] == [1, 2]
    assert points == [{"a": 2, "b": 2}, {"a": 1}, {"b": 2}]  # not modified


def test_points_beyond_num_samples_all_run_and_no_sample_is_left():
    gen = VariantSpace(
        {"a": grid_search([1, 2, 3]), "b": uniform(0, 1)},
        1,
        seed=0,
        points_to_evaluate=[{"a": 9, "b": 0.5}, {"b": 0.25}],
    )
    assert gen.total == 4
    assert [gen.variant(i)[0] for i in range(4)] == [
        {"a": 9, "b": 0.5},
        {"a": 1, "b": 0.25},
        {"a": 2, "b": 0.25},
        {"a": 3, "b": 0.25},
    ]


def test_points_set_nested_keys_and_list_items_and_may_replace_a_whole_object():
    space = {
        "opt": {"lr": loguniform(1e-4, 1e-1), "name": "sgd"},
        "layers": [randint(1, 4), 128],
        "act": {"kind": "relu"},
    }
    points = [{"opt": {"lr": 0.01}, "layers": [2]}, {"act": "tanh", "layers": [3, 64]}]
    gen = VariantSpace(space, 3, seed=0, points_to_evaluate=points)
    assert gen.total == 3
    assert gen.variant(0)[0] == {"opt": {"lr": 0.01, "name": "sgd"}, "layers": [2, 128], "act": {"kind": "relu"}}
    second = gen.variant(1)[0]
    assert second["act"] == "tanh" and second["layers"] == [3, 64] and 1e-4 <= second["opt"]["lr"] < 1e-1


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ([{"opt": {"momentum": 0.9}}], r"points_to_evaluate\[0\]: opt.momentum is not a key of the search space"),
        ([{"lr": 0.1}, {"nope": 1}], r"points_to_evaluate\[1\]: nope is not a key"),
        ([{"layers": [1, 2, 3]}], r"points_to_evaluate\[0\]: layers has 3 items, the search space 2"),
        ([["lr", 0.1]], r"points_to_evaluate\[0\] must be an object"),
        ({"lr": 0.1}, "points_to_evaluate must be a list"),
    ],
)
def test_bad_points_to_evaluate(points, message):
    with pytest.raises(ValueError, match=message):
        VariantSpace(
            {"lr": uniform(0, 1), "opt": {"name": "sgd"}, "layers": [1, 2]}, 2, seed=0, points_to_evaluate=points
        )


def test_random_access_with_points_matches_sequential_order():
    space = {"a": grid_search([1, 2]), "b": uniform(0, 1), "c": grid_search([{"d": grid_search([3, 4])}, 5])}
    points = [{"a": 1}, {"c": 5, "b": 0.5}]
    first = VariantSpace(space, 3, seed=4, points_to_evaluate=points)
    assert first.total == 3 + 2 + 6  # point 1 crosses c (its own grid included), point 2 crosses a, one pass
    sequence = [first.variant(i) for i in range(first.total)]
    again = VariantSpace(space, 3, seed=4, points_to_evaluate=points)
    assert [again.variant(i) for i in reversed(range(again.total))] == sequence[::-1]
    assert [c["c"] for c, _ in sequence[:3]] == [{"d": 3}, {"d": 4}, 5]
    assert [(c["a"], c["b"], c["c"]) for c, _ in sequence[3:5]] == [(1, 0.5, 5), (2, 0.5, 5)]
