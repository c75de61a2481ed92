"""Basic variant generation: counts, grid order, reproducibility, random access, tags (kubetune.search.variants)."""

from __future__ import annotations

import itertools

import pytest

from kubetune.search import (
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
    sdk = {"lr": loguniform(1e-4, 1e-1), "optimizer": grid_search(["sgd", "adam"]),
           "model": {"depth": grid_search([2, 4, 8]), "width": choice([64, 128])}, "epochs": 10}
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
    space = {"lr": grid_search([0.001, 0.1]), "opt": grid_search(["adam/w", "sgd"]), "model": {"act": "relu"},
             "bs": grid_search([16])}
    tags = [tag for _, tag in generate_variants(space, seed=0)]
    assert tags == ["0_bs=16,lr=0.0010,opt=adam_w", "1_bs=16,lr=0.1000,opt=adam_w",
                    "2_bs=16,lr=0.0010,opt=sgd", "3_bs=16,lr=0.1000,opt=sgd"]


def test_tag_of_sampled_values_uses_last_path_key_sorted_by_path():
    config, tag = VariantSpace({"z": {"a": randint(0, 10)}, "b": uniform(0, 1)}, 1, seed=0).variant(0)
    # sorted by full path: ("b",) < ("z", "a"), shown by the last key
    assert tag == f"0_b={config['b']:.4f},a={config['z']['a']}"


def test_tag_without_sampled_values_is_the_index():
    assert [t for _, t in generate_variants({"a": 1}, 3, seed=0)] == ["0", "1", "2"]


def test_format_tag_cleans_values():
    assert format_tag(3, {("x",): "a b/c!", ("y",): True, ("w",): None, ("v",): [1, 2]}) == \
        "3_v=1_2,w=None,x=a_b_c,y=True"


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


def test_sample_from_cycle_and_failure_raise():
    with pytest.raises(ValueError, match="cycle: a, b"):
        VariantSpace({"a": sample_from(lambda c: c["b"]), "b": sample_from(lambda c: c["a"])}, seed=0)\
            .variant(0)
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
