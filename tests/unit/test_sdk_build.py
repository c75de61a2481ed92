"""The SDK's pure parts: the ``tune`` namespace, algorithm specs, Experiment building and shipping."""

from __future__ import annotations

import datetime
import sys
import warnings

import numpy as np
import pytest

import kubetune as tune
from kubetune import shipping
from kubetune.resultkeys import spec_objectives
from kubetune.schedulers import PB2, ASHAScheduler, HyperBandScheduler, MedianStoppingRule, PopulationBasedTraining
from kubetune.sdk.tuner import build_experiment, default_name, experiment_name, split_stop, storage_spec
from kubetune.search import BasicVariantGenerator, ConcurrencyLimiter, OptunaSearch, parse_space
from kubetune.stopper import (
    CombinedStopper,
    ExperimentPlateauStopper,
    FunctionStopper,
    MaximumIterationStopper,
    TimeoutStopper,
    TrialPlateauStopper,
)
from kubetune.storage import open_storage
from kubetune_operator.algorithms import create_scheduler, create_searcher
from kubetune_operator.builtin_stoppers import create_stoppers
from kubetune_operator.experiment_spec import ExperimentSpec

STORAGE = "s3://bucket/root"
TRAINABLE = {"entrypoint": "pkg.mod:Train"}

#: What a Ray Tune 0.8-2.x script reaches for as ``tune.<name>``.
RAY_NAMES = (
    "uniform quniform loguniform qloguniform randn qrandn randint qrandint lograndint qlograndint choice "
    "grid_search sample_from Trainable report get_checkpoint checkpoint_dir Checkpoint track run run_experiments "
    "with_parameters with_resources Stopper ExperimentAnalysis Tuner TuneConfig RunConfig CheckpointConfig "
    "FailureConfig ResultGrid schedulers search stopper TuneError"
).split()


def build(**kwargs):
    kwargs.setdefault("storage", STORAGE)
    return build_experiment("exp", TRAINABLE, **kwargs)


def test_tune_namespace_has_what_a_ray_script_imports():
    missing = [name for name in RAY_NAMES if not hasattr(tune, name)]
    assert missing == []
    assert tune.schedulers.AsyncHyperBandScheduler is tune.schedulers.ASHAScheduler
    assert {tune.search.OptunaSearch, tune.search.BasicVariantGenerator, tune.search.ConcurrencyLimiter}
    assert tune.Callback is tune.callback.Callback  # run in the Experiment's driver pod


@pytest.mark.parametrize(
    "module, name",
    [
        (tune, "SyncConfig"),
        (tune.schedulers, "ResourceChangingScheduler"),
        (tune.search, "HyperOptSearch"),
    ],
)
def test_names_kubetune_cannot_honour_say_why_and_what_instead(module, name):
    with pytest.raises(NotImplementedError, match=f"{name} is not supported by kubetune: .*; use "):
        getattr(module, name)


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError):
        tune.no_such_thing  # noqa: B018


def test_scheduler_specs_are_accepted_by_the_operators_schedulers():
    for spec in (
        ASHAScheduler(max_t=27, grace_period=3, reduction_factor=3),
        HyperBandScheduler(max_t=9),
        MedianStoppingRule(grace_period=1.0, hard_stop=False),
        PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=2,
            hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-1), "bs": [16, 32]},
        ),
        PB2(time_attr="training_iteration", perturbation_interval=2, hyperparam_bounds={"lr": [1e-4, 1e-1]}),
    ):
        body = spec.to_spec()
        scheduler = create_scheduler(body["name"], "acc", "max", **body["params"])
        assert type(scheduler).__name__ == type(spec).__name__.replace("ASHA", "AsyncHyperBand")
    assert ASHAScheduler(max_t=27).to_spec()["params"]["max_t"] == 27


def test_pb2_refuses_user_code_and_wants_bounds():
    with pytest.raises(ValueError, match="custom_explore_fn is user code"):
        PB2(hyperparam_bounds={"lr": [0, 1]}, custom_explore_fn=lambda c: c)
    with pytest.raises(ValueError, match="hyperparam_bounds must be specified"):
        PB2()
    assert PB2(hyperparam_bounds={"lr": [0, 1]}, seed=3).to_spec() == {
        "name": "pb2",
        "params": {
            "time_attr": "time_total_s",
            "perturbation_interval": 60.0,
            "hyperparam_bounds": {"lr": [0, 1]},
            "quantile_fraction": 0.25,
            "require_attrs": True,
            "seed": 3,
        },
    }


def test_median_rule_min_time_slice_is_refused():
    with pytest.raises(ValueError, match="min_time_slice"):
        MedianStoppingRule(min_time_slice=5)


def test_searcher_specs():
    assert OptunaSearch(seed=7, sampler="random").to_spec() == {
        "name": "optuna",
        "params": {"sampler": "random"},
        "seed": 7,
    }
    bohb = OptunaSearch(metric="loss", mode="min", seed=1, prune_early_stopped=True).to_spec()
    assert bohb["params"] == {"prune_early_stopped": True}
    searcher = create_searcher("optuna", {"x": {"uniform": [0, 1]}}, "loss", "min", 2, 1, **bohb["params"])
    assert searcher.prune_early_stopped
    assert BasicVariantGenerator(random_state=3).to_spec() == {"name": "basic", "params": {}, "seed": 3}
    with pytest.raises(ValueError, match="sampler objects"):
        OptunaSearch(sampler=object())
    with pytest.raises(ValueError, match=r"points_to_evaluate\[0\] must be a dict of values \(no domains\)"):
        BasicVariantGenerator(points_to_evaluate=[{"a": tune.uniform(0, 1)}])
    with pytest.raises(ValueError, match="constant_grid_search must be a bool"):
        BasicVariantGenerator(constant_grid_search=1)
    with pytest.raises(ValueError, match="max_concurrent"):
        ConcurrencyLimiter(OptunaSearch(), 0)


def test_basic_variant_generator_spec_is_accepted_by_the_operators_searcher():
    spec = BasicVariantGenerator(
        points_to_evaluate=[{"a": np.int64(2), "b": (1, 2)}, {"a": 1}], constant_grid_search=True, random_state=5
    ).to_spec()
    assert spec == {
        "name": "basic",
        "seed": 5,
        "params": {"points_to_evaluate": [{"a": 2, "b": [1, 2]}, {"a": 1}], "constant_grid_search": True},
    }
    space = {"a": {"grid_search": [1, 2]}, "b": [{"randint": [0, 9]}, 0]}
    searcher = create_searcher(spec["name"], space, num_samples=3, seed=spec["seed"], **spec["params"])
    # Ray's count: point 1 and point 2 replace two samples (one trial each), the third sample runs the grid
    assert searcher.total == 4
    assert [searcher.suggest(f"t{i}")["a"] for i in range(4)] == [2, 1, 1, 2]


def test_build_experiment_maps_ray_arguments():
    space = {"lr": tune.loguniform(1e-4, 1e-1), "layers": tune.grid_search([1, 2]), "n": np.int64(3)}
    body = build(
        config=space,
        num_samples=4,
        metric="acc",
        mode="max",
        stop={"training_iteration": 5},
        time_budget_s=90,
        resources_per_trial={"CPU": 2, "gpu": 1, "memory": 2**30},
        scheduler=ASHAScheduler(max_t=10),
        search_alg=ConcurrencyLimiter(OptunaSearch(seed=1), 3),
        max_concurrent_trials=5,
        checkpoint_freq=2,
        checkpoint_at_end=True,
        keep_checkpoints_num=2,
        checkpoint_score_attr="min-loss",
        max_failures=-1,
        fail_fast=True,
        image="img:1",
        template={"labels": {"team": "a"}},
        queue_name="team-a",
    )
    spec = body["spec"]
    assert body["metadata"] == {"name": "exp"} and body["kind"] == "Experiment"
    assert spec["config"] == {"lr": {"loguniform": [1e-4, 1e-1]}, "layers": {"grid_search": [1, 2]}, "n": 3}
    assert parse_space(spec["config"])["lr"] == tune.loguniform(1e-4, 1e-1)
    assert spec["numSamples"] == 4 and spec["metric"] == "acc" and spec["mode"] == "max"
    assert spec["stop"] == {"training_iteration": 5} and spec["timeBudget"] == "90s"
    assert spec["resourcesPerTrial"] == {"cpu": 2, "gpu": 1, "memory": str(2**30)}
    assert spec["scheduler"]["name"] == "asha" and spec["searchAlgorithm"] == {
        "name": "optuna",
        "params": {},
        "seed": 1,
    }
    assert spec["maxConcurrentTrials"] == 3
    assert spec["checkpoint"] == {"frequency": 2, "atEnd": True, "keep": 2, "scoreAttribute": "min-loss"}
    assert spec["failure"] == {"maxFailures": -1, "maxFailedTrials": 0}
    assert spec["image"] == "img:1" and spec["template"] == {"labels": {"team": "a"}}
    assert spec["queueName"] == "team-a"
    assert spec["storage"] == {"uri": STORAGE}
    parsed = ExperimentSpec.parse(spec)  # the operator reads it as built
    assert parsed.num_samples == 4 and parsed.max_concurrent_trials == 3


def test_build_experiment_defaults_follow_ray():
    spec = build()["spec"]
    assert spec["searchAlgorithm"] == {"name": "basic", "params": {}}
    assert spec["checkpoint"] == {"frequency": 0, "atEnd": False}  # Ray's checkpoint_at_end=False
    assert "scheduler" not in spec and "metric" not in spec and spec["config"] == {} and "queueName" not in spec


def test_metric_and_mode_come_from_the_scheduler_or_clash():
    spec = build(scheduler=ASHAScheduler(metric="loss", mode="min"))["spec"]
    assert (spec["metric"], spec["mode"]) == ("loss", "min")
    with pytest.raises(ValueError, match="set it in one place"):
        build(metric="acc", scheduler=ASHAScheduler(metric="loss", mode="min"))


def test_stoppers_become_spec_stoppers_and_time_budget():
    stop = CombinedStopper(
        MaximumIterationStopper(5),
        TrialPlateauStopper("loss", mode="min"),
        ExperimentPlateauStopper("loss", top=3),
        TimeoutStopper(datetime.timedelta(minutes=2)),
    )
    spec = build(stop=stop, time_budget_s=300, metric="loss", mode="min")["spec"]
    assert spec["timeBudget"] == "120s"
    assert [s["name"] for s in spec["stoppers"]] == ["maximum_iteration", "trial_plateau", "experiment_plateau"]
    create_stoppers(spec["stoppers"], "loss", "min")  # the operator accepts them
    assert spec["stoppers"][2]["params"] == {"metric": "loss", "mode": "min", "std": 0.001, "top": 3, "patience": 0}


def test_nested_stop_dicts_are_flattened():
    assert build(stop={"info": {"acc": 0.9}})["spec"]["stop"] == {"info/acc": 0.9}


class AboveThree(tune.Stopper):
    def __call__(self, trial_id, result):
        return result["score"] > 3


class StopsAll(AboveThree):
    def stop_all(self):
        return True


@pytest.mark.parametrize("stop", [lambda trial_id, result: False, AboveThree()])
def test_user_code_stops_are_not_for_the_operator(stop):
    with pytest.raises(ValueError, match="user code, which the operator does not run"):
        build(stop=stop)
    assert split_stop(stop) == (None, stop)


def test_split_stop_keeps_built_in_stoppers_for_the_operator():
    built_in = MaximumIterationStopper(5)
    ours, user = split_stop(CombinedStopper(built_in, AboveThree(), FunctionStopper(lambda t, r: r["x"] > 1)))
    assert [s.to_spec() for s in ours.stoppers] == [built_in.to_spec()]
    assert user("t", {"score": 0, "x": 2}) and user("t", {"score": 4, "x": 0}) and not user("t", {"score": 0, "x": 0})
    assert split_stop({"training_iteration": 3}) == ({"training_iteration": 3}, None)
    with pytest.raises(ValueError, match="StopsAll.stop_all is not supported"):
        split_stop(StopsAll())


class Count(tune.Trainable):
    def step(self):
        return {"score": self.iteration + 1}


def test_with_stopper_ends_the_trial_at_the_result_the_stopper_stops():
    seen = []

    def stop(trial_id, result):
        seen.append((trial_id, result["training_iteration"]))
        return result["score"] >= 3

    trainable = shipping.with_stopper(Count, stop)(config={}, trial_id="t-1")
    results = [trainable.train() for _ in range(3)]
    assert [r.get("done", False) for r in results] == [False, False, True]
    assert seen == [("t-1", 1), ("t-1", 2), ("t-1", 3)]
    with pytest.raises(TypeError, match="import path"):
        shipping.with_stopper("pkg.mod:Train", stop)


def test_sample_from_needs_the_sdk_to_ship_it_and_non_json_config_is_refused():
    with pytest.raises(ValueError, match="config.b: sample_from is user code, which the operator does not run"):
        build(config={"a": 1, "b": tune.sample_from(lambda c: c["a"] * 2)})
    with pytest.raises(ValueError, match="config.data: a object cannot .*with_parameters"):
        build(config={"data": object()})


def test_sample_from_functions_are_pickled_for_the_trial_pod_which_resolves_them(tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    functions = shipping.FunctionPickles(f"file://{tmp_path}/ns/exp/sdk")
    space = {
        "a": tune.randint(1, 10),
        "nested": {"b": tune.sample_from(lambda spec: spec.config.a * 2)},
        "c": tune.sample_from(lambda config: config["nested"]["b"] + 1),
    }
    spec = build(config=space, sample_from=functions.marker)["spec"]
    marker = spec["config"]["nested"]["b"]
    assert list(marker) == [shipping.FUNCTION_KEY] and marker[shipping.FUNCTION_KEY].startswith(
        f"file://{tmp_path}/ns/exp/sdk/functions/"
    )
    assert parse_space(spec["config"])["nested"]["b"] == marker  # a constant to the operator's searchers
    functions.upload(storage)
    # what a trial pod gets from the operator: the searcher's values, the markers as they are
    trial_config = {**spec["config"], "a": 4}
    assert shipping.resolve_config(trial_config, storage) == {"a": 4, "nested": {"b": 8}, "c": 9}
    assert shipping.resolve_config({"a": 1}, storage) == {"a": 1}


def test_drawn_values_are_reported_only_as_json_that_gives_them_back_and_only_in_place_of_the_functions():
    import numpy as np

    from kubetune.limits import MAX_DEPTH, MAX_FIELD_BYTES

    drawn = {"a": np.float64(0.5), "b": [np.int32(3), "s", None, True], "c": {"d": 2**62}}
    plain = shipping.sampled_as_json(drawn)
    assert plain == {"a": 0.5, "b": [3, "s", None, True], "c": {"d": 2**62}}
    assert type(plain["a"]) is float and type(plain["b"][0]) is int
    deep: dict = {}
    for _ in range(MAX_DEPTH + 1):
        deep = {"x": deep}
    for value in ((1, 2), np.zeros(2), float("nan"), object(), {1: "key"}, 2**64, deep, "x" * MAX_FIELD_BYTES):
        assert shipping.sampled_as_json({"v": value}) is None, value
    marker = {shipping.FUNCTION_KEY: "s3://b/f.pkl"}
    config = {"lr": marker, "layers": [marker, 4], "fixed": {"a": 1.0, "b": "s"}}
    assert shipping.holds_function(config) and not shipping.holds_function({"a": [1, {"b": 2}]})
    assert shipping.draws_for(config, {"lr": 0.1, "layers": [{"any": "value"}, 4], "fixed": {"a": 1, "b": "s"}})
    for changed in (
        {"lr": 0.1, "layers": [1, 5], "fixed": {"a": 1.0, "b": "s"}},  # a value not drawn
        {"lr": 0.1, "layers": [1, 4], "fixed": {"a": 1.0, "b": "s"}, "extra": 1},
        {"lr": 0.1, "layers": [1], "fixed": {"a": 1.0, "b": "s"}},
        {"lr": 0.1, "layers": [1, 4], "fixed": {"a": True, "b": "s"}},
    ):
        assert not shipping.draws_for(config, changed), changed


def test_bad_resources_and_budgets_are_refused():
    with pytest.raises(ValueError, match="'TPU'"):
        build(resources_per_trial={"TPU": 1})
    with pytest.raises(ValueError, match="time_budget_s"):
        build(time_budget_s=0)
    with pytest.raises(ValueError, match="search_alg"):
        build(search_alg=object())


def test_storage_spec(monkeypatch):
    monkeypatch.delenv("KUBETUNE_STORAGE_URI", raising=False)
    monkeypatch.delenv("KUBETUNE_STORAGE_CREDENTIALS_SECRET", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3.local:9000")
    assert storage_spec("s3://b/p") == {"uri": "s3://b/p", "endpoint": "http://s3.local:9000"}
    assert storage_spec({"uri": "s3://b/p", "endpoint": "http://other"})["endpoint"] == "http://other"
    assert storage_spec("file:///data") == {"uri": "file:///data"}
    with pytest.raises(ValueError, match="storage="):
        storage_spec(None)


def test_storage_spec_takes_what_is_left_out_from_the_environment(monkeypatch):
    """``eval $(python -m devcluster up)`` exports these: ``tune.run`` without ``storage=`` uses them."""
    monkeypatch.setenv("KUBETUNE_STORAGE_URI", "s3://kubetune/experiments")
    monkeypatch.setenv("KUBETUNE_STORAGE_CREDENTIALS_SECRET", "s3-creds")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3.local:9000")
    default = {"uri": "s3://kubetune/experiments", "credentialsSecret": "s3-creds", "endpoint": "http://s3.local:9000"}
    assert storage_spec(None) == default
    assert storage_spec({"uri": None, "credentialsSecret": None}) == default  # the CLI's unset flags
    mine = storage_spec({"uri": "s3://mine/p", "credentialsSecret": "my-creds"})
    assert mine == {"uri": "s3://mine/p", "credentialsSecret": "my-creds", "endpoint": "http://s3.local:9000"}
    monkeypatch.setenv("KUBETUNE_STORAGE_CREDENTIALS_SECRET", "")
    assert "credentialsSecret" not in storage_spec(None)


def test_default_name_is_a_kubernetes_name():
    def My_Train_Fn(config):
        pass

    name = default_name(My_Train_Fn)
    assert name.startswith("my-train-fn-") and name == name.lower()


def test_a_ray_experiment_name_becomes_a_kubernetes_name_with_a_warning():
    with pytest.warns(UserWarning, match="'PBT_synch' is 'pbt-synch' in Kubernetes"):
        assert experiment_name("PBT_synch", "m:T") == "pbt-synch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a name that is already one passes unchanged and silently
        assert experiment_name("digits-1", "m:T") == "digits-1"
    assert experiment_name(None, "m:My_T").startswith("my-t-")
    with pytest.raises(ValueError, match="no letter or digit"):
        experiment_name("__", "m:T")


# ------------------------------------------------------------------ shipping


def test_pickles_name_their_python_version_and_refuse_another(monkeypatch):
    data = shipping.dumps({"a": 1})
    assert data.startswith(b"kubetune-pickle python=%d.%d\n" % sys.version_info[:2])
    assert shipping.loads(data) == {"a": 1}
    forged = data.replace(b"python=%d.%d" % sys.version_info[:2], b"python=3.99", 1)
    with pytest.raises(RuntimeError, match=r"pickled by Python 3\.99 but this trial image runs Python 3\.\d+"):
        shipping.loads(forged)


class Fit(tune.Trainable):
    def setup(self, config, data=None, scale=1):
        self.total = float(np.sum(data)) * scale


def test_ship_trainable_by_import_path_or_by_value(tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    base = f"file://{tmp_path}/ns/exp/sdk"
    assert shipping.ship_trainable("pkg.mod:Train", storage, base) == {"entrypoint": "pkg.mod:Train"}
    assert shipping.ship_trainable(np.zeros, storage, base) == {"entrypoint": "numpy:zeros"}
    shipped = shipping.ship_trainable(Fit, storage, base)  # a test module is not installed: by value
    uri = shipped["pickleURI"]
    assert uri.startswith(f"{base}/trainable/")
    assert shipping.loads(storage.get_bytes(uri)).__name__ == "Fit"


def test_with_parameters_uploads_each_object_once_and_pods_load_it(tmp_path, monkeypatch):
    storage = open_storage(f"file://{tmp_path}")
    base = f"file://{tmp_path}/ns/exp/sdk"
    data = np.arange(1000.0)
    wrapped = tune.with_parameters(Fit, data=data, scale=2)
    first = shipping.ship_trainable(wrapped, storage, base)["pickleURI"]
    objects = sorted(p.name for p in (tmp_path / "ns/exp/sdk/parameters").iterdir())
    assert len(objects) == 2
    again = tune.with_parameters(Fit, data=data, scale=2)
    assert again._kubetune_parameters[0].upload(storage, base) == 0  # same objects: nothing uploaded
    raw = storage.get_bytes(first)
    assert len(raw) < data.nbytes  # the trainable carries URIs, not the array
    monkeypatch.setenv("KUBETUNE_NAMESPACE", "ns")
    monkeypatch.setenv("KUBETUNE_EXPERIMENT", "exp")
    monkeypatch.setenv("KUBETUNE_TRIAL", "exp-00000")
    monkeypatch.setenv("KUBETUNE_STORAGE_URI", f"file://{tmp_path}/trial")
    cls = shipping.loads(raw)
    trainable = cls(config={})
    assert trainable.total == pytest.approx(2 * data.sum())


def test_with_parameters_function_keeps_checkpoint_dir(tmp_path):
    seen = {}

    def train(config, checkpoint_dir=None, data=None):
        seen.update(config=config, checkpoint_dir=checkpoint_dir, data=data)

    wrapped = tune.with_parameters(train, data=[1, 2])
    wrapped({"a": 1}, checkpoint_dir="/ck")
    assert seen == {"config": {"a": 1}, "checkpoint_dir": "/ck", "data": [1, 2]}
    with pytest.raises(TypeError, match="not uploaded"):
        shipping.dumps(wrapped)


def test_with_resources_sets_the_pod_shape():
    wrapped = tune.with_resources(Fit, {"cpu": 2, "gpu": 1})
    assert wrapped._kubetune_resources == {"cpu": 2, "gpu": 1} and issubclass(wrapped, Fit)
    with pytest.raises(TypeError, match="one shape"):
        tune.with_resources(Fit, lambda config: {"cpu": 1})


def test_a_multi_objective_optuna_search_with_evaluated_rewards_reaches_the_operators_searcher():
    search = OptunaSearch(
        metric=["loss", "gain"],
        mode=["min", "max"],
        sampler="nsga2",
        sampler_args={"population_size": 4},
        points_to_evaluate=[{"x": 0.5}],
        evaluated_rewards=[[0.25, 1.0]],
        seed=2,
    )
    body = build(config={"x": tune.uniform(0, 1)}, num_samples=3, search_alg=ConcurrencyLimiter(search, 2))
    spec = body["spec"]
    assert spec["objectives"] == [{"metric": "loss", "mode": "min"}, {"metric": "gain", "mode": "max"}]
    assert "metric" not in spec and "mode" not in spec and spec["maxConcurrentTrials"] == 2
    assert spec["searchAlgorithm"]["params"]["evaluated_rewards"] == [[0.25, 1.0]]
    algorithm = spec["searchAlgorithm"]
    searcher = create_searcher(
        algorithm["name"], spec["config"], *spec_objectives(spec), 3, algorithm["seed"], **algorithm["params"]
    )
    assert searcher._study.trials[0].values == [0.25, 1.0]  # evaluated, not run
    with pytest.raises(ValueError, match="mode must give one of max/min per metric"):
        OptunaSearch(metric=["loss", "gain"], mode=["min"])
    with pytest.raises(ValueError, match="evaluated_rewards gives one result per point"):
        OptunaSearch(points_to_evaluate=[{"x": 1}], evaluated_rewards=[1, 2])
    with pytest.raises(ValueError, match="was built with metric"):
        build(config={"x": tune.uniform(0, 1)}, metric="loss", mode="min", search_alg=search)
