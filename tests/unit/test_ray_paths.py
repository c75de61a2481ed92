"""Ray's import paths and names with ``ray.tune`` replaced by ``kubetune`` (issue 23.2): each path gives
kubetune's object, a name kubetune cannot honour raises with why and what to use."""

from __future__ import annotations

import importlib
import os

import pytest

import kubetune as tune
from kubetune import Checkpoint, wrap_function
from kubetune.sdk.tuner import CheckpointConfig, Tuner, _checkpoint_args
from kubetune.search import Categorical

PATHS = [
    ("kubetune.schedulers.async_hyperband", "ASHAScheduler", tune.schedulers.ASHAScheduler),
    ("kubetune.schedulers.async_hyperband", "AsyncHyperBandScheduler", tune.schedulers.AsyncHyperBandScheduler),
    ("kubetune.schedulers.hyperband", "HyperBandScheduler", tune.schedulers.HyperBandScheduler),
    ("kubetune.schedulers.median_stopping_rule", "MedianStoppingRule", tune.schedulers.MedianStoppingRule),
    ("kubetune.schedulers.pbt", "PopulationBasedTraining", tune.schedulers.PopulationBasedTraining),
    ("kubetune.schedulers.pbt", "PopulationBasedTrainingReplay", tune.schedulers.PopulationBasedTrainingReplay),
    ("kubetune.schedulers.pb2", "PB2", tune.schedulers.PB2),
    ("kubetune.schedulers.trial_scheduler", "FIFOScheduler", tune.schedulers.FIFOScheduler),
    ("kubetune.schedulers.trial_scheduler", "TrialScheduler", tune.schedulers.TrialScheduler),
    ("kubetune.search.optuna", "OptunaSearch", tune.search.OptunaSearch),
    ("kubetune.search.basic_variant", "BasicVariantGenerator", tune.search.BasicVariantGenerator),
    ("kubetune.search.concurrency_limiter", "ConcurrencyLimiter", tune.search.ConcurrencyLimiter),
    ("kubetune.search.searcher", "Searcher", tune.search.Searcher),
    ("kubetune.suggest", "ConcurrencyLimiter", tune.search.ConcurrencyLimiter),
    ("kubetune.suggest", "BasicVariantGenerator", tune.search.BasicVariantGenerator),
    ("kubetune.suggest.optuna", "OptunaSearch", tune.search.OptunaSearch),
    ("kubetune.suggest.basic_variant", "BasicVariantGenerator", tune.search.BasicVariantGenerator),
    ("kubetune.suggest.suggestion", "ConcurrencyLimiter", tune.search.ConcurrencyLimiter),
    ("kubetune.suggest.suggestion", "Searcher", tune.search.Searcher),
    ("kubetune.suggest.variant_generator", "grid_search", tune.grid_search),
    ("kubetune.suggest.bohb", "TuneBOHB", importlib.import_module("kubetune.search.bohb").TuneBOHB),
    ("kubetune.stopper", "MaximumIterationStopper", tune.stopper.MaximumIterationStopper),
    ("kubetune.stopper", "CombinedStopper", tune.stopper.CombinedStopper),
    ("kubetune.stopper", "TrialPlateauStopper", tune.stopper.TrialPlateauStopper),
    ("kubetune.stopper", "ExperimentPlateauStopper", tune.stopper.ExperimentPlateauStopper),
    ("kubetune.stopper", "TimeoutStopper", tune.stopper.TimeoutStopper),
]


@pytest.mark.parametrize(("module", "name", "expected"), PATHS, ids=[f"{m}.{n}" for m, n, _ in PATHS])
def test_rays_module_paths_give_kubetunes_objects(module, name, expected):
    assert getattr(importlib.import_module(module), name) is expected


def test_tune_and_suggest_attributes():
    assert tune.suggest.OptunaSearch is tune.search.OptunaSearch and tune.suggest.grid_search is tune.grid_search
    for name in ("get_context", "TuneContext", "ResumeConfig", "create_scheduler", "create_searcher"):
        assert name in tune.__all__ and getattr(tune, name) is not None


def test_a_searcher_kubetune_has_not_raises_the_same_reason_under_suggest():
    with pytest.raises(NotImplementedError, match="HyperOptSearch is not supported by kubetune: .*use OptunaSearch"):
        tune.suggest.HyperOptSearch  # noqa: B018
    with pytest.raises(ImportError):
        from kubetune.suggest import NoSuchSearch  # noqa: F401


def test_create_scheduler_and_searcher_by_rays_names():
    asha = tune.create_scheduler("async_hyperband", max_t=10, grace_period=2)
    assert asha.to_spec()["name"] == "asha" and asha.to_spec()["params"]["max_t"] == 10
    assert tune.create_scheduler("medianstopping").to_spec()["name"] == "median_stopping_rule"
    assert tune.create_searcher("optuna", seed=3).to_spec()["name"] == "optuna"
    assert tune.create_searcher("random").to_spec()["name"] == "basic"
    with pytest.raises(ValueError, match=r"^The `scheduler` argument must be one of \['fifo', .*Got: asha$"):
        tune.create_scheduler("asha")
    with pytest.raises(ValueError, match=r"^The `search_alg` argument must be one of .*Got: nope$"):
        tune.create_searcher("nope")
    with pytest.raises(NotImplementedError, match="HyperOptSearch is not supported by kubetune"):
        tune.create_searcher("hyperopt")
    with pytest.raises(NotImplementedError, match="ResourceChangingScheduler is not supported by kubetune"):
        tune.create_scheduler("resource_changing")


def test_get_context_in_a_function_trainable_and_in_the_pod(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBETUNE_EXPERIMENT", "mnist")
    monkeypatch.setenv("KUBETUNE_STORAGE_URI", "s3://b/p/team/mnist/0123abcd/mnist-00003")
    monkeypatch.setenv("KUBETUNE_RESOURCES", '{"cpu": "2", "gpu": 1}')
    seen = {}

    def fn(config):
        context = tune.get_context()
        seen.update(id=context.get_trial_id(), name=context.get_trial_name(), dir=context.get_trial_dir())
        seen.update(exp=context.get_experiment_name(), storage=context.get_storage(), res=context.get_trial_resources())
        seen.update(enabled=tune.is_session_enabled(), ray20_res=tune.get_trial_resources())  # Ray 2.0's names

    t = wrap_function(fn)({}, logdir=str(tmp_path), trial_id="mnist-00003", trial_name="mnist-00003")
    t.train()
    t.stop()
    assert seen == {
        "id": "mnist-00003",
        "name": "mnist-00003",
        "dir": str(tmp_path),
        "exp": "mnist",
        "storage": "s3://b/p/team/mnist/0123abcd/mnist-00003",
        "res": {"cpu": "2", "gpu": 1},
        "enabled": True,
        "ray20_res": {"cpu": "2", "gpu": 1},
    }
    assert isinstance(tune.get_context(), tune.TuneContext) and not tune.is_session_enabled()


def test_get_context_outside_a_trial_gives_none(monkeypatch):
    for name in ("KUBETUNE_TRIAL", "KUBETUNE_EXPERIMENT", "KUBETUNE_STORAGE_URI", "KUBETUNE_RESOURCES"):
        monkeypatch.delenv(name, raising=False)
    context = tune.get_context()
    assert [context.get_trial_id(), context.get_experiment_name(), context.get_trial_resources()] == [None] * 3


def test_the_pod_is_told_its_resources():
    from kubetune_operator.builders import build_pod
    from kubetune_operator.settings import Settings
    from tests.unit.test_builders import env_of, experiment, trial

    exp = experiment(resourcesPerTrial={"cpu": "2", "gpu": 1, "memory": "1Gi"})
    assert env_of(build_pod(exp, trial(exp), 1, Settings()))["KUBETUNE_RESOURCES"] == (
        '{"cpu": "2", "gpu": 1, "memory": "1Gi"}'
    )
    plain = experiment()
    assert env_of(build_pod(plain, trial(plain), 1, Settings()))["KUBETUNE_RESOURCES"] == '{"cpu": "1"}'


def test_resume_config_takes_rays_default_and_refuses_the_rest():
    tune.ResumeConfig().check()
    assert Tuner.restore("exp", trainable="m:f")._restore == "exp"
    assert Tuner.restore("exp", "m:f", resume_config=tune.ResumeConfig())._restore == "exp"
    with pytest.raises(NotImplementedError, match=r"ResumeConfig\(errored='restart'\) is not supported by kubetune"):
        Tuner.restore("exp", "m:f", restart_errored=True)
    with pytest.raises(NotImplementedError, match=r"ResumeConfig\(unfinished='skip'\)"):
        Tuner.restore("exp", "m:f", resume_config=tune.ResumeConfig(unfinished=tune.ResumeConfig.ResumeType.SKIP))


def test_run_takes_a_checkpoint_config():
    cc = CheckpointConfig(
        num_to_keep=2,
        checkpoint_score_attribute="loss",
        checkpoint_score_order="min",
        checkpoint_frequency=5,
        checkpoint_at_end=True,
    )
    assert _checkpoint_args(cc) == (5, True, 2, "min-loss")
    with pytest.raises(ValueError, match="set them in checkpoint_config only"):  # before any cluster is asked
        tune.run("m:f", checkpoint_config=cc, checkpoint_freq=3)


def test_checkpoint_from_dict_round_trips():
    checkpoint = Checkpoint.from_dict({"step": 3, "weights": [1.0, 2.0]})
    assert checkpoint.to_dict() == {"step": 3, "weights": [1.0, 2.0]}
    assert os.path.isfile(os.path.join(checkpoint.to_directory(), "dict_checkpoint.pkl"))
    with pytest.raises(TypeError):
        Checkpoint.from_dict([1])


def test_checkpoint_of_files_has_no_dict(tmp_path):
    with pytest.raises(ValueError, match="holds files, not a dict"):
        Checkpoint.from_directory(tmp_path).to_dict()


def test_categorical_uniform_is_the_same_domain():
    domain = Categorical(["a", "b", "c"]).uniform()
    assert domain == tune.choice(["a", "b", "c"]) and domain.sample(random_state=1) in ("a", "b", "c")


def test_optuna_convert_search_space_follows_ray():
    import optuna.distributions as d  # the SDK's optional dependency, installed for the tests

    space = {
        "a": tune.uniform(0, 1),
        "b": {"c": tune.randint(1, 10)},
        "q": tune.quniform(0, 1, 0.25),
        "e": tune.loguniform(1e-3, 1),
        "f": tune.qrandint(0, 10, 2),
        "g": tune.lograndint(1, 100),
        "h": tune.choice([1, "x"]),
        "k": 3,
    }
    assert tune.search.OptunaSearch.convert_search_space(space) == {
        "a": d.FloatDistribution(0, 1),
        "b/c": d.IntDistribution(1, 9),
        "q": d.FloatDistribution(0, 1, step=0.25),
        "e": d.FloatDistribution(1e-3, 1, log=True),
        "f": d.IntDistribution(0, 10, step=2),
        "g": d.IntDistribution(1, 99, log=True),
        "h": d.CategoricalDistribution([1, "x"]),
    }
    with pytest.raises(ValueError, match="Grid search parameters cannot be automatically converted"):
        tune.search.OptunaSearch.convert_search_space({"a": tune.grid_search([1, 2])})
    with pytest.raises(ValueError, match="does not support parameters of type `Normal`"):
        tune.search.OptunaSearch.convert_search_space({"a": tune.randn()})


@pytest.mark.parametrize(
    "module, name",
    [
        ("kubetune.search.hyperopt", "HyperOptSearch"),
        ("kubetune.suggest.bayesopt", "BayesOptSearch"),
        ("kubetune.search.flaml", "BlendSearch"),
        ("kubetune.schedulers.resource_changing_scheduler", "ResourceChangingScheduler"),
    ],
)
def test_rays_modules_kubetune_has_not_say_why_and_what_instead(module, name):
    with pytest.raises(ModuleNotFoundError, match=f"No module named '{module}': {name} is not supported by kubetune"):
        importlib.import_module(module)
    with pytest.raises(ModuleNotFoundError, match="No module named 'kubetune.search.no_such_library'$"):
        importlib.import_module("kubetune.search.no_such_library")  # other names: Python's own error
