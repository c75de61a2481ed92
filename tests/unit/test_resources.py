"""Ray's resource forms (kubetune.resources) as spec.resourcesPerTrial: one pod, or a head and its workers."""

from __future__ import annotations

import pytest

import kubetune as tune
from kubetune.resources import PlacementGroupFactory, Resources, resources_per_trial
from kubetune.sdk.tuner import trial_resources


def test_a_placement_group_is_the_head_and_identical_workers():
    pgf = tune.PlacementGroupFactory([{"CPU": 1, "GPU": 1}] + [{"CPU": 2, "GPU": 1, "memory": 2**30}] * 3)
    assert resources_per_trial(pgf) == {
        "cpu": 1,
        "gpu": 1,
        "workers": {"replicas": 3, "cpu": 2, "gpu": 1, "memory": str(2**30)},
    }
    assert resources_per_trial(PlacementGroupFactory([{"CPU": 0.5}])) == {"cpu": "500m"}
    # an empty head bundle: the trainable only drives its workers
    assert resources_per_trial(PlacementGroupFactory([{}, {"CPU": 1}])) == {
        "cpu": 0,
        "workers": {"replicas": 1, "cpu": 1},
    }


@pytest.mark.parametrize(
    ("bundles", "words"),
    [
        ([{"CPU": 1}, {"CPU": 2}, {"CPU": 1, "GPU": 1}], "one worker shape per trial"),
        ([{"CPU": 1, "TPU": 1}], "TPU not supported"),
        ([{"CPU": 1, "GPU": 0.5}], "gpu must be a whole number"),
    ],
)
def test_a_placement_group_that_cannot_map_is_refused_with_the_reason(bundles, words):
    with pytest.raises(ValueError, match=words):
        resources_per_trial(PlacementGroupFactory(bundles))


def test_ray_08_extra_resources_become_one_worker_per_extra_gpu_else_per_extra_cpu():
    assert resources_per_trial({"cpu": 1, "gpu": 1, "extra_cpu": 4, "extra_gpu": 4}) == {
        "cpu": 1,
        "gpu": 1,
        "workers": {"replicas": 4, "cpu": 1, "gpu": 1},
    }
    assert resources_per_trial({"CPU": 1, "extra_cpu": 3, "extra_memory": 3 * 2**30}) == {
        "cpu": 1,
        "workers": {"replicas": 3, "cpu": 1, "memory": str(2**30)},
    }
    assert resources_per_trial(Resources(cpu=1, gpu=0, extra_cpu=2, extra_gpu=2)) == {
        "cpu": 1,
        "workers": {"replicas": 2, "cpu": 1, "gpu": 1},
    }
    with pytest.raises(ValueError, match="extra_cpu=2.5 without extra_gpu must be whole"):
        resources_per_trial({"cpu": 1, "extra_cpu": 2.5})
    with pytest.raises(ValueError, match="'tpu' not supported"):
        resources_per_trial({"cpu": 1, "tpu": 1})


class RolloutDriver(tune.Trainable):
    """RLlib's way: the trainable asks for its workers' resources from its config."""

    @classmethod
    def default_resource_request(cls, config):
        workers = config["num_workers"]
        return Resources(cpu=1, gpu=0, extra_cpu=workers * config["cpus_per_worker"], extra_gpu=0)

    def step(self):
        return {"done": True}


def _spec(trainable, config, given=None):
    return resources_per_trial(trial_resources(trainable, given, config))


def test_default_resource_request_with_resources_and_resources_per_trial_reach_the_spec():
    spec = _spec(RolloutDriver, config={"num_workers": 2, "cpus_per_worker": 1})
    assert spec == {"cpu": 1, "workers": {"replicas": 2, "cpu": 1}}
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}])
    assert _spec(tune.with_resources(RolloutDriver, pgf), config={})["workers"] == {"replicas": 1, "cpu": 1}
    spec = _spec(RolloutDriver, config={}, given={"cpu": 2, "extra_gpu": 2, "extra_cpu": 2})
    assert spec == {"cpu": 2, "workers": {"replicas": 2, "cpu": 1, "gpu": 1}}  # resources_per_trial wins
    with pytest.raises(TypeError, match="per-config resources"):
        tune.with_resources(RolloutDriver, lambda config: {"cpu": 1})
