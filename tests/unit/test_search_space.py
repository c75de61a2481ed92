"""Parameter-space domains: ranges, scales, quantization, JSON form and spec errors (kubetune.search.sample)."""

from __future__ import annotations

import copy
import math
import random
import statistics

import pytest

from kubetune.search import (
    Categorical,
    Domain,
    Float,
    Integer,
    Normal,
    choice,
    grid_search,
    lograndint,
    loguniform,
    parse_space,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    space_spec,
    space_warnings,
    uniform,
)
from kubetune.search.variants import generate_variants

N = 4000


def draws(domain: Domain, n: int = N, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [domain.sample(random_state=rng) for _ in range(n)]


def on_grid(x: float, q: float) -> bool:
    return math.isclose(x / q, round(x / q), abs_tol=1e-9)


# ----------------------------------------------------------------------------- ranges and types


def test_uniform_stays_in_half_open_range_and_spreads():
    xs = draws(uniform(-2, 3))
    assert all(-2 <= x < 3 for x in xs) and all(isinstance(x, float) for x in xs)
    assert abs(statistics.fmean(xs) - 0.5) < 0.1
    assert min(xs) < -1.9 and max(xs) > 2.9


def test_quniform_rounds_to_multiples_and_reaches_upper_bound():
    xs = draws(quniform(0, 1, 0.25))
    assert set(round(x, 9) for x in xs) == {0.0, 0.25, 0.5, 0.75, 1.0}
    assert all(isinstance(x, float) for x in xs)


def test_loguniform_is_uniform_in_log_space():
    xs = draws(loguniform(1e-4, 1e-1))
    assert all(1e-4 <= x < 1e-1 for x in xs)
    # Each decade holds about a third of the draws; a linear uniform would put ~90% in the top one.
    decades = [sum(1 for x in xs if 10 ** (e - 1) <= x < 10**e) / N for e in (-3, -2, -1)]
    assert all(abs(share - 1 / 3) < 0.04 for share in decades), decades


def test_loguniform_base_does_not_change_the_distribution():
    assert draws(loguniform(1e-3, 1.0, base=2), 200) == pytest.approx(draws(loguniform(1e-3, 1.0), 200))
    assert loguniform(1e-3, 1.0, base=2).to_spec() == {"loguniform": [1e-3, 1.0, 2]}


def test_qloguniform_is_quantized_on_a_log_scale():
    xs = draws(qloguniform(1, 1000, 1))
    assert all(1 <= x <= 1000 and x == int(x) for x in xs)
    assert sum(1 for x in xs if x < 32) / N > 0.4  # log scale: half the mass below sqrt(1000)


def test_randint_excludes_upper_bound_and_hits_every_value():
    xs = draws(randint(3, 8))
    assert set(xs) == {3, 4, 5, 6, 7}
    assert all(type(x) is int for x in xs)


def test_qrandint_multiples_with_upper_bound_included():
    assert set(draws(qrandint(0, 10, 5))) == {0, 5, 10}
    assert set(draws(qrandint(2, 12, 4))) == {4, 8, 12}  # bounds narrowed to multiples of q
    assert all(type(x) is int for x in draws(qrandint(0, 10, 5), 50))


def test_qrandint_with_q_1_is_randint():
    xs = draws(qrandint(1, 5))
    assert set(xs) == {1, 2, 3, 4}
    assert xs == draws(randint(1, 5))


def test_lograndint_log_scale_and_half_open():
    xs = draws(lograndint(1, 1000))
    assert all(1 <= x < 1000 and type(x) is int for x in xs)
    assert abs(sum(1 for x in xs if x < 10) / N - 1 / 3) < 0.04


def test_qlograndint_multiples_of_q():
    xs = draws(qlograndint(10, 1000, 10))
    assert all(10 <= x <= 1000 and x % 10 == 0 for x in xs)
    assert 1000 in xs or max(xs) >= 900
    assert sum(1 for x in xs if x < 100) / N > 0.4


def test_randn_mean_and_sd():
    xs = draws(randn(5.0, 2.0))
    assert abs(statistics.fmean(xs) - 5.0) < 0.15
    assert abs(statistics.stdev(xs) - 2.0) < 0.15
    assert draws(randn(), 1)[0] != draws(randn(), 1, seed=1)[0]


def test_qrandn_is_quantized():
    xs = draws(qrandn(0, 1, 0.5))
    assert all(on_grid(x, 0.5) for x in xs)
    assert len(set(xs)) > 5


def test_choice_keeps_element_types_and_covers_all():
    categories = [1, "two", 3.0, None, True, [4], {"five": 5}]
    xs = draws(choice(categories), 2000)
    for category in categories:
        assert any(x == category and type(x) is type(category) for x in xs), category


def test_sampling_is_deterministic_for_a_seeded_rng():
    for domain in (uniform(0, 1), loguniform(1, 10), randint(0, 100), choice(range(3)), randn()):
        assert draws(domain, 20, seed=7) == draws(domain, 20, seed=7)
        assert draws(domain, 20, seed=7) != draws(domain, 20, seed=8)


# ----------------------------------------------------------------------------- JSON form


ALL_DOMAINS = [
    uniform(0, 1),
    quniform(0, 1, 0.1),
    loguniform(1e-4, 1e-1),
    qloguniform(1, 100, 1),
    randint(1, 10),
    qrandint(0, 100, 10),
    lograndint(1, 1000),
    qlograndint(10, 1000, 10),
    randn(0.5, 2),
    qrandn(0, 1, 0.5),
    choice([16, 32, 64]),
    choice(["a", {"b": 1}]),
]


@pytest.mark.parametrize("domain", ALL_DOMAINS, ids=repr)
def test_to_spec_round_trips_through_parse_space(domain):
    spec = domain.to_spec()
    assert list(spec) == [domain.name] and isinstance(spec[domain.name], list)
    assert parse_space({"x": spec})["x"] == domain


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"uniform": [0, 1]}, uniform(0, 1)),
        ({"uniform": {"lower": 0, "upper": 1}}, uniform(0, 1)),
        ({"quniform": [0, 1, 0.1]}, quniform(0, 1, 0.1)),
        ({"loguniform": {"lower": 1e-4, "upper": 1e-1}}, loguniform(1e-4, 1e-1)),
        ({"qloguniform": {"lower": 1, "upper": 100, "q": 1}}, qloguniform(1, 100, 1)),
        ({"randint": [1, 10]}, randint(1, 10)),
        ({"randint": [1.0, 1e3]}, randint(1, 1000)),  # YAML may give integral floats
        ({"qrandint": [0, 10]}, qrandint(0, 10, 1)),
        ({"qrandint": {"lower": 0, "upper": 10, "q": 5}}, qrandint(0, 10, 5)),
        ({"lograndint": [1, 100]}, lograndint(1, 100)),
        ({"qlograndint": [10, 100, 10]}, qlograndint(10, 100, 10)),
        ({"randn": []}, randn()),
        ({"randn": {"mean": 0, "sd": 1}}, randn(0, 1)),
        ({"randn": {"sd": 3}}, randn(0, 3)),
        ({"qrandn": [0, 1, 0.1]}, qrandn(0, 1, 0.1)),
        ({"choice": [16, 32, 64]}, choice([16, 32, 64])),
        ({"choice": {"categories": ["a", "b"]}}, choice(["a", "b"])),
        ({"grid_search": [1, 2]}, {"grid_search": [1, 2]}),
    ],
)
def test_parse_space_reads_positional_and_keyword_forms(spec, expected):
    assert parse_space({"p": spec})["p"] == expected


def test_domain_classes_and_names():
    assert isinstance(uniform(0, 1), Float) and isinstance(randint(0, 2), Integer)
    assert isinstance(randn(), Normal) and isinstance(choice([1]), Categorical)
    assert [d.name for d in ALL_DOMAINS[:10]] == [
        "uniform",
        "quniform",
        "loguniform",
        "qloguniform",
        "randint",
        "qrandint",
        "lograndint",
        "qlograndint",
        "randn",
        "qrandn",
    ]


def test_parse_space_nested_constants_lists_and_no_mutation():
    spec = {
        "model": {"layers": [{"randint": [1, 4]}, 128], "act": {"choice": ["relu", "tanh"]}},
        "lr": {"loguniform": [1e-4, 1e-1]},
        "opt": {"name": "sgd", "momentum": 0.9},
        "two_keys": {"uniform": [0, 1], "extra": 1},  # not a one-key dict: constant structure
        "grid": {"grid_search": [{"a": 1}, {"a": 2}]},
    }
    before = copy.deepcopy(spec)
    space = parse_space(spec)
    assert spec == before
    assert space["model"]["layers"] == [randint(1, 4), 128]
    assert space["model"]["act"] == choice(["relu", "tanh"])
    assert space["lr"] == loguniform(1e-4, 1e-1)
    assert space["opt"] == {"name": "sgd", "momentum": 0.9}
    assert space["two_keys"] == {"uniform": [0, 1], "extra": 1}
    assert space["grid"] == {"grid_search": [{"a": 1}, {"a": 2}]}


def test_parse_space_keeps_sdk_domains():
    lr = loguniform(1e-3, 1)
    assert parse_space({"lr": lr, "g": grid_search([1, 2])}) == {"lr": lr, "g": {"grid_search": [1, 2]}}


def test_sample_from_is_not_json():
    with pytest.raises(ValueError, match="sample_from"):
        sample_from(lambda spec: 1).to_spec()
    with pytest.raises(ValueError, match="0 or 1 arguments"):
        sample_from(lambda a, b: 1)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"uniform": [1, 1]}, "config.a.b: uniform: lower must be < upper"),
        ({"uniform": [2, 1]}, "lower must be < upper"),
        ({"uniform": [0]}, "bad arguments"),
        ({"uniform": [0, 1, 2]}, "bad arguments"),
        ({"uniform": {"lower": 0, "high": 1}}, "bad arguments"),
        ({"uniform": "0,1"}, "must be a list"),
        ({"uniform": [0, "1"]}, "upper must be a finite number"),
        ({"uniform": [0, float("inf")]}, "finite"),
        ({"uniform": [True, 2]}, "lower must be a finite number"),
        ({"loguniform": [0, 1]}, "config.a.b: loguniform: log scale needs lower > 0"),
        ({"loguniform": [-1, 1]}, "lower > 0"),
        ({"loguniform": [1e-3, 1, 1]}, "base"),
        ({"quniform": [0, 1, 0]}, "q must be > 0"),
        ({"quniform": [0, 1, -0.1]}, "q must be > 0"),
        ({"quniform": [0.05, 1, 0.1]}, "lower=0.05 is not a multiple of q"),
        ({"randint": [1.5, 4]}, "lower must be an integer"),
        ({"randint": [5, 5]}, "lower must be < upper"),
        ({"qrandint": [0, 10, 2.5]}, "q must be an integer"),
        ({"qrandint": [1, 4, 5]}, "fewer than two multiples"),
        ({"lograndint": [0, 10]}, "lower > 0"),
        ({"randn": [0, 0]}, "sd must be > 0"),
        ({"qrandn": [0, 1, 0]}, "q must be > 0"),
        ({"choice": []}, "config.a.b: choice: choice needs a non-empty list"),
        ({"choice": {"categories": "abc"}}, "non-empty list"),
        ({"grid_search": []}, "config.a.b: grid_search: grid_search needs a non-empty iterable"),
        ({"grid_search": {"x": 1}}, "not a string or mapping"),
        ({"grid_search": "abc"}, "not a string or mapping"),
        ({"grid_search": 3}, "non-empty iterable"),
    ],
)
def test_bad_domains_raise_value_error_naming_the_path(spec, message):
    with pytest.raises(ValueError, match="^config.a.b: ") as info:
        parse_space({"a": {"b": spec}})
    assert message in str(info.value)


def test_error_path_names_list_indices():
    with pytest.raises(ValueError, match=r"^spec\.config\.layers\[1\]: randint"):
        parse_space({"layers": [1, {"randint": [3, 2]}]}, path="spec.config")


def test_sdk_factories_validate_too():
    with pytest.raises(ValueError):
        uniform(1, 0)
    with pytest.raises(ValueError):
        loguniform(0, 1)
    with pytest.raises(ValueError):
        choice([])
    with pytest.raises(ValueError):
        grid_search([])


def test_an_object_with_several_domains_is_refused():
    with pytest.raises(ValueError, match=r"config\.lr: one object holds several domains \(choice, uniform\)"):
        parse_space({"lr": {"uniform": [0, 1], "choice": [1, 2]}})


def test_a_misspelled_domain_is_flagged_but_kept_as_a_constant():
    space = {"lr": {"loguniforn": [1e-4, 0.1]}, "opt": {"name": "adam"}, "layers": [{"choise": [1, 2]}]}
    assert parse_space(space)["lr"] == {"loguniforn": [1e-4, 0.1]}
    assert space_warnings(space) == [
        "config.lr: {'loguniforn': ...} is taken as a constant; did you mean the loguniform domain?",
        "config.layers[0]: {'choise': ...} is taken as a constant; did you mean the choice domain?",
    ]
    assert space_warnings({"lr": {"loguniform": [1e-4, 0.1]}, "name": {"adam": 1}}) == []


def test_grid_values_are_parsed_as_spaces_with_their_paths():
    space = parse_space({"g": {"grid_search": [{"uniform": [0, 1]}, {"n": {"randint": [1, 3]}}, "x"]}})
    assert space == {"g": {"grid_search": [uniform(0, 1), {"n": randint(1, 3)}, "x"]}}
    with pytest.raises(ValueError, match=r"^config\.a\.grid_search\[1\]: uniform: lower must be < upper"):
        parse_space({"a": {"grid_search": [1, {"uniform": [1, 0]}]}})


# ----------------------------------------------------------------------------- Ray's Domain API


def test_sample_size_and_random_state_as_rays():
    domain = uniform(2, 3)
    values = domain.sample(size=5, random_state=4)
    assert isinstance(values, list) and len(values) == 5 and all(2 <= v < 3 for v in values)
    assert domain.sample(size=5, random_state=4) == values  # an int seed reproduces
    assert isinstance(domain.sample(random_state=random.Random(1)), float)  # size 1: one value
    random.seed(11)
    first = [randint(0, 10**6).sample() for _ in range(3)]
    random.seed(11)
    assert [randint(0, 10**6).sample() for _ in range(3)] == first  # None: Python's global stream
    assert choice(["a", "b"]).sample(size=3, random_state=0) in ([x, y, z] for x in "ab" for y in "ab" for z in "ab")
    for size in (0, -1, 1.0, True):
        with pytest.raises(ValueError, match="size must be an integer >= 1"):
            domain.sample(size=size)
    with pytest.raises(ValueError, match="random_state must be None, an int seed or a random.Random"):
        domain.sample(random_state="seed")


def test_sample_from_sample_calls_the_function_with_the_config():
    function = sample_from(lambda config: config["a"] * 2)
    assert function.sample({"a": 4}) == 8
    assert function.sample([{"a": 1}, {"a": 2}], size=2) == [2, 4]  # a list: one config per call
    assert sample_from(lambda: "k").sample(size=2) == ["k", "k"]


def test_builders_make_the_factories_domains():
    assert Float(1e-4, 1e-1).loguniform() == loguniform(1e-4, 1e-1)
    assert Float(0, 1).uniform().quantized(0.1) == quniform(0, 1, 0.1)
    assert Float(1, 100).loguniform().quantized(1) == qloguniform(1, 100, 1)
    assert Integer(1, 10).uniform() == randint(1, 10)
    assert Integer(0, 10).quantized(5) == qrandint(0, 10, 5)
    assert Integer(10, 1000).loguniform().quantized(10) == qlograndint(10, 1000, 10)
    assert Float(None, None).normal(0.5, 2) == randn(0.5, 2)
    assert Float(None, None).normal().quantized(0.5) == qrandn(0, 1, 0.5)
    xs = draws(Float(0, 1), 500)  # no sampler chosen: uniform, as Ray's default sampler
    assert all(0 <= x < 1 for x in xs) and min(xs) < 0.05 and max(xs) > 0.95
    assert all(isinstance(x, int) and 3 <= x < 6 for x in draws(Integer(3, 6), 50))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: uniform(0, 1).loguniform(), r"has its sampler already; \.loguniform\(\) would choose another one"),
        (lambda: quniform(0, 1, 0.5).uniform(), "has its sampler already"),
        (lambda: randint(0, 4).loguniform(), "has its sampler already"),
        (lambda: uniform(0, 1).normal(), "has its sampler already"),
        (lambda: Float(0, 1).normal(), "normal sampling takes no bounds"),
        (lambda: Float(None, None).normal(0, 0), "sd must be > 0"),
        (lambda: Float(None, None).uniform(), "lower must be a finite number"),
        (lambda: Float(0, 1).loguniform(), "log scale needs lower > 0"),
        (lambda: Float(0, 1).quantized(0.3), "upper=1 is not a multiple of q=0.3"),
        (lambda: Integer(1, 4).quantized(5), "fewer than two multiples"),
        (lambda: Integer(0, 4).quantized(1.5), "q must be an integer"),
        (lambda: Float(None, None).sample(), "no bounds to sample between"),
    ],
)
def test_builder_errors(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_is_valid_follows_rays_rules():
    assert uniform(0, 1).is_valid(0) and uniform(0, 1).is_valid(1)  # both bounds included, as Ray
    assert not uniform(0, 1).is_valid(1.5) and not uniform(0, 1).is_valid("0.5")
    assert randint(0, 10).is_valid(10) and not randint(0, 10).is_valid(11)
    assert quniform(0, 1, 0.5).is_valid(0.3)  # q is not checked, as Ray
    assert randn().is_valid(1e300) and not randn().is_valid(float("nan"))
    assert choice([1, "a"]).is_valid("a") and not choice([1, "a"]).is_valid(2)
    assert sample_from(lambda: 1).is_valid(object())


def test_a_distribution_kubetune_has_not_is_refused_with_the_known_domains():
    with pytest.raises(ValueError) as caught:
        parse_space({"opt": {"lr": {"gaussian": [0, 1]}}})
    assert str(caught.value) == (
        "config.opt.lr: 'gaussian' is not a domain kubetune knows (use randn(mean, sd)); the domains are: choice, "
        "grid_search, lograndint, loguniform, qlograndint, qloguniform, qrandint, qrandn, quniform, randint, randn, "
        "uniform"
    )
    with pytest.raises(
        ValueError,
        match=r"^config\.w\.grid_search\[0\]: 'LogNormal' is not a domain kubetune knows "
        r"\(kubetune has no LogNormal domain\)",
    ):
        parse_space({"w": {"grid_search": [{"LogNormal": {"mu": 0}}]}})
    with pytest.raises(
        ValueError,
        match=r"^config\.f: 'sample_from' is not a domain kubetune knows \(sample_from is a "
        "Python function",
    ):
        parse_space({"f": {"sample_from": ["lambda c: 1"]}})
    # the same names holding no arguments are constants, as are one-key objects of other names
    space = {"init": {"normal": True}, "net": {"layers": [64, 64]}}
    assert parse_space(space) == space


def test_the_sdk_writes_an_object_named_like_a_domain_as_the_object_it_is():
    # issue 23: SDK values are what they are under any key; a one-key object named like a domain (known
    # or not) travels as {"kubetune/object": ...}, which the operator reads back as that object
    assert space_spec({"init": {"normal": [0, 0.02]}}) == {"init": {"kubetune/object": {"normal": [0, 0.02]}}}
    assert space_spec({"init": {"normal": 0.02}}) == {"init": {"normal": 0.02}}
    assert parse_space(space_spec({"init": {"normal": [0, 0.02]}})) == {"init": {"normal": [0, 0.02]}}


@pytest.mark.parametrize(
    "config",
    [
        {"choice": "adam"},
        {"choice": ["a", "b"]},
        {"uniform": 0.5, "grid_search": 3},
        {"opt": {"choice": ["a", "b"]}},
        {"opt": {"grid_search": 2, "x": 1}},
        {"opt": {"uniform": [1, 2], "choice": 3}},
        {"opt": {"kubetune/object": {"x": 1}}},
        {"opt": {"normal": [0, 1]}},
    ],
)
def test_constants_under_any_key_reach_the_trial_as_they_are(config):
    (variant, _), *rest = generate_variants(space_spec(config))
    assert variant == config and rest == []


def test_a_domain_under_a_key_named_like_a_domain_stays_a_domain():
    variants = generate_variants(space_spec({"uniform": uniform(-5, -1)}), num_samples=3, seed=1)
    assert all(-5 <= config["uniform"] < -1 for config, _ in variants)
    nested = generate_variants(space_spec({"o": {"choice": choice(["a", "b"])}}), num_samples=4, seed=1)
    assert {config["o"]["choice"] for config, _ in nested} <= {"a", "b"}


def test_a_manifest_config_root_is_never_a_domain_and_below_it_the_json_form_is():
    assert parse_space({"choice": ["a", "b"]}) == {"choice": ["a", "b"]}
    assert parse_space({"uniform": [0, 1]}) == {"uniform": [0, 1]}
    assert isinstance(parse_space({"lr": {"uniform": [0, 1]}})["lr"], Domain)
    grid = {"a": {"kubetune/object": {"grid_search": [1, 2]}}}  # the SDK never writes it: tune.grid_search is a grid
    assert generate_variants(grid) == [({"a": {"grid_search": [1, 2]}}, "0")]
