"""Ray Tune's own variant-generation tests, ported: ``python/ray/tune/tests/test_var.py`` of Ray 2.x (its
``ray.tune.search`` version, the whole 2.x copy found; the later file was seen only in part: the same test class,
with Ray's mock trainable in place of ``"PPO"``), assertions unchanged.

Only the setup is kubetune's: Ray's ``BasicVariantGenerator.next_trial`` over an experiment spec becomes
``kubetune.search.generate_variants`` over the spec's ``config`` (the :class:`kubetune.search.VariantSpace` that
the operator's ``basic`` searcher hands out variant by variant), and a trial is what a variant gives: its config,
its tag (Ray's ``experiment_tag``) and its ``evaluated_params`` as ``kubetune.ExperimentAnalysis`` computes them
(the values at the space's domains, grids and ``sample_from`` functions, keyed by path joined with ``/``). In an
Experiment the ``sample_from`` values are computed by each trial's pod (porting table, SDK); here the same code
computes them in the test.

Ported: 9 of the file's 12 tests. Left out:

- ``testParseToTrials``: asserts fields of Ray's ``Trial`` object (its ``str``, ``trainable_name``,
  ``max_failures``, ``local_dir``); kubetune's trials are Kubernetes objects (porting table, SDK: logdir).
- ``testEval``: a ``{"eval": "2 + 2"}`` value is evaluated by Ray (porting table, "eval").
- ``test_resolve_dict``: tests Ray's helper ``resolve_nested_dict``, which kubetune has no counterpart of.
"""

from __future__ import annotations

import random
import unittest

import numpy as np

from kubetune import search as tune
from kubetune.sdk.analysis import _values_at
from kubetune.search import RecursiveDependencyError, generate_variants, grid_search, parse_space
from kubetune.search.variants import find_domains


class VariantTrial:
    """A trial as a variant gives it: config, tag, evaluated parameters."""

    def __init__(self, config, experiment_tag, evaluated_params):
        self.config, self.experiment_tag, self.evaluated_params = config, experiment_tag, evaluated_params


class VariantGeneratorTest(unittest.TestCase):
    def generate_trials(self, spec, name):
        space = spec["config"]
        paths = [path for path, _ in find_domains(parse_space(space))]
        return [
            VariantTrial(config, tag, _values_at(config, paths))
            for config, tag in generate_variants(space, spec.get("num_samples", 1))
        ]

    def testGridSearch(self):
        trials = self.generate_trials(
            {
                "run": "PPO",
                "config": {
                    "bar": {"grid_search": [True, False]},
                    "foo": {"grid_search": [1, 2, 3]},
                    "baz": "asd",
                },
            },
            "grid_search",
        )
        trials = list(trials)
        self.assertEqual(len(trials), 6)
        self.assertEqual(trials[0].config, {"bar": True, "foo": 1, "baz": "asd"})
        self.assertEqual(trials[0].evaluated_params, {"bar": True, "foo": 1})
        self.assertEqual(trials[0].experiment_tag, "0_bar=True,foo=1")

        self.assertEqual(trials[1].config, {"bar": False, "foo": 1, "baz": "asd"})
        self.assertEqual(trials[1].evaluated_params, {"bar": False, "foo": 1})
        self.assertEqual(trials[1].experiment_tag, "1_bar=False,foo=1")

        self.assertEqual(trials[2].config, {"bar": True, "foo": 2, "baz": "asd"})
        self.assertEqual(trials[2].evaluated_params, {"bar": True, "foo": 2})

        self.assertEqual(trials[3].config, {"bar": False, "foo": 2, "baz": "asd"})
        self.assertEqual(trials[3].evaluated_params, {"bar": False, "foo": 2})

        self.assertEqual(trials[4].config, {"bar": True, "foo": 3, "baz": "asd"})
        self.assertEqual(trials[4].evaluated_params, {"bar": True, "foo": 3})

        self.assertEqual(trials[5].config, {"bar": False, "foo": 3, "baz": "asd"})
        self.assertEqual(trials[5].evaluated_params, {"bar": False, "foo": 3})

    def testGridSearchAndEval(self):
        trials = self.generate_trials(
            {
                "run": "PPO",
                "config": {
                    "qux": tune.sample_from(lambda spec: 2 + 2),
                    "bar": grid_search([True, False]),
                    "foo": grid_search([1, 2, 3]),
                    "baz": "asd",
                },
            },
            "grid_eval",
        )
        trials = list(trials)
        self.assertEqual(len(trials), 6)
        self.assertEqual(trials[0].config, {"bar": True, "foo": 1, "qux": 4, "baz": "asd"})
        self.assertEqual(trials[0].evaluated_params, {"bar": True, "foo": 1, "qux": 4})
        self.assertEqual(trials[0].experiment_tag, "0_bar=True,foo=1,qux=4")

    def testConditionResolution(self):
        trials = self.generate_trials(
            {
                "run": "PPO",
                "config": {
                    "x": 1,
                    "y": tune.sample_from(lambda spec: spec.config.x + 1),
                    "z": tune.sample_from(lambda spec: spec.config.y + 1),
                },
            },
            "condition_resolution",
        )
        trials = list(trials)
        self.assertEqual(len(trials), 1)
        self.assertEqual(trials[0].config, {"x": 1, "y": 2, "z": 3})
        self.assertEqual(trials[0].evaluated_params, {"y": 2, "z": 3})
        self.assertEqual(trials[0].experiment_tag, "0_y=2,z=3")

    def testDependentLambda(self):
        trials = self.generate_trials(
            {
                "run": "PPO",
                "config": {
                    "x": grid_search([1, 2]),
                    "y": tune.sample_from(lambda spec: spec.config.x * 100),
                },
            },
            "dependent_lambda",
        )
        trials = list(trials)
        self.assertEqual(len(trials), 2)
        self.assertEqual(trials[0].config, {"x": 1, "y": 100})
        self.assertEqual(trials[1].config, {"x": 2, "y": 200})

    def testDependentGridSearch(self):
        trials = self.generate_trials(
            {
                "run": "PPO",
                "config": {
                    "x": grid_search(
                        [
                            tune.sample_from(lambda spec: spec.config.y * 100),
                            tune.sample_from(lambda spec: spec.config.y * 200),
                        ]
                    ),
                    "y": tune.sample_from(lambda spec: 1),
                },
            },
            "dependent_grid_search",
        )
        trials = list(trials)
        self.assertEqual(len(trials), 2)
        self.assertEqual(trials[0].config, {"x": 100, "y": 1})
        self.assertEqual(trials[1].config, {"x": 200, "y": 1})

    def testDependentGridSearchCallable(self):
        class Normal:
            def __call__(self, _config):
                return random.normalvariate(mu=0, sigma=1)

        class Single:
            def __call__(self, _config):
                return 20

        trials = self.generate_trials(
            {
                "run": "PPO",
                "config": {
                    "x": grid_search([tune.sample_from(Normal()), tune.sample_from(Normal())]),
                    "y": tune.sample_from(Single()),
                },
            },
            "dependent_grid_search",
        )
        trials = list(trials)
        self.assertEqual(len(trials), 2)
        self.assertEqual(trials[0].config["y"], 20)
        self.assertEqual(trials[1].config["y"], 20)

    def testNestedValues(self):
        trials = self.generate_trials(
            {
                "run": "PPO",
                "config": {
                    "x": {"y": {"z": tune.sample_from(lambda spec: 1)}},
                    "y": tune.sample_from(lambda spec: 12),
                    "z": tune.sample_from(lambda spec: spec.config.x.y.z * 100),
                },
            },
            "nested_values",
        )
        trials = list(trials)
        self.assertEqual(len(trials), 1)
        self.assertEqual(trials[0].config, {"x": {"y": {"z": 1}}, "y": 12, "z": 100})
        self.assertEqual(trials[0].evaluated_params, {"x/y/z": 1, "y": 12, "z": 100})

    def testLogUniform(self):
        sampler = tune.loguniform(1e-10, 1e-1)
        results = sampler.sample(None, 1000)
        assert abs(np.log(min(results)) / np.log(10) - -10) < 0.1
        assert abs(np.log(max(results)) / np.log(10) - -1) < 0.1

        sampler_e = tune.loguniform(np.e**-4, np.e, base=np.e)
        results_e = sampler_e.sample(None, 1000)
        assert abs(np.log(min(results_e)) - -4) < 0.1
        assert abs(np.log(max(results_e)) - 1) < 0.1

    def testRecursiveDep(self):
        try:
            list(
                self.generate_trials(
                    {
                        "run": "PPO",
                        "config": {"foo": tune.sample_from(lambda spec: spec.config.foo)},
                    },
                    "recursive_dep",
                )
            )
        except RecursiveDependencyError as e:
            assert "`foo` recursively depends on" in str(e), e
        else:
            raise AssertionError("no RecursiveDependencyError")
