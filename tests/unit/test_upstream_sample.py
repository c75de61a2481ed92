"""Ray Tune's own search-space tests, ported: ``python/ray/tune/tests/test_sample.py`` of Ray 2.x (the
``ray.tune.search.sample`` version with ``tune.report(config)``, read at commit 00d1eee26fdb), assertions
unchanged.

Only the setup is kubetune's: the domains are ``kubetune.search``'s (``ray.tune.search.sample.Float`` ->
``kubetune.search.Float``); Ray's ``generate_variants({"config": config})`` is ``kubetune.search.generate_variants``
(what the operator's ``basic`` searcher hands out); a searcher's ``suggest`` is the operator's searcher built from
the ``kubetune.search`` object as ``tune.run`` sends it, over the run's config (kubetune's searchers take no
``space=``: porting table, Searchers); ``tune.run(...)`` followed by reading the trials' configs is that searcher's
suggestions in order, which is what the operator gives trial after trial (``_mock_objective`` only reports the
config back).

Ported: 17 of the file's 45 tests. Left out:

- the 21 tests of searchers kubetune does not run (porting table, SDK: "Ray's searcher modules of other
  libraries"): ``testConvertAx``, ``testSampleBoundsAx``, ``testPointsToEvaluateAx``, ``testConvertBayesOpt``,
  ``testSampleBoundsBayesOpt``, ``testPointsToEvaluateBayesOpt``, ``testConvertHEBO``, ``testSampleBoundsHEBO``,
  ``testConvertHyperOpt``, ``testConvertHyperOptChooseFromListOfList``, ``testConvertHyperOptNested``,
  ``testConvertHyperOptConstant``, ``testSampleBoundsHyperopt``, ``testPointsToEvaluateHyperOpt``,
  ``testPointsToEvaluateHyperOptNested``, ``testConvertNevergrad``, ``testSampleBoundsNevergrad``,
  ``testPointsToEvaluateNevergrad``, ``testConvertZOOpt``, ``testSampleBoundsZOOpt``, ``testPointsToEvaluateZoOpt``.
- ``testReproducibility``, ``testReproducibilityBasicVariantGenerator``, ``testCategoricalSeedInTrainingLoop``:
  they seed NumPy's global stream or pass NumPy generators (porting table: ``Domain.sample(random_state=...)``
  draws from Python's ``random``; the searcher's seed comes from the Experiment).
- ``testConvertBOHB``, ``testConvertOptuna``: they build ``ConfigSpace``/Optuna spaces, define-by-run functions and
  sampler objects on the client (porting table, BOHB ``space=ConfigSpace`` and Searchers "any sampler object").
- ``testPointsToEvaluateBasicVariantFixedParam``: asserts the warning logged for a point outside the space
  (porting table, "logged as a warning").
- ``testSetSearchPropertiesBackwardsCompatibility``: a custom ``Searcher`` subclass (porting table, SDK: refused).
"""

from __future__ import annotations

import unittest
from collections import defaultdict

import numpy as np

import kubetune.search as sample
from kubetune import search as tune
from kubetune.search import BasicVariantGenerator, OptunaSearch, TuneBOHB, generate_variants, space_spec
from kubetune_operator.algorithms import create_searcher


def assertDictAlmostEqual(a, b):  # noqa: N802 (Ray's name)
    for k, v in a.items():
        assert k in b, f"Key {k} not found in {b}"
        w = b[k]

        assert type(v) is type(w), f"Type {type(v)} is not {type(w)}"

        if isinstance(v, dict):
            assert assertDictAlmostEqual(v, w), f"Subdict {v} != {w}"
        elif isinstance(v, (int, float)):
            assert np.isclose(v, w)
        elif isinstance(v, (list, tuple)):
            # Does not work for nested dicts or lists
            assert all(x == y for x, y in zip(v, w))
        else:
            assert v == w

    return True


def operator_searcher(searcher, config, metric=None, mode=None, num_samples=1):
    """The operator's searcher for a ``kubetune.search`` searcher over the run's ``config`` (as ``tune.run`` sends
    them: the space in JSON, the searcher by name and parameters)."""
    spec = searcher.to_spec()
    space = space_spec(config)
    return create_searcher(
        spec["name"],
        space,
        searcher.metric or metric,
        searcher.mode or mode,
        num_samples,
        spec.get("seed"),
        **spec["params"],
    )


def run_configs(searcher, config, metric, mode, num_samples):
    """The configs ``tune.run`` gives its trials, in order: the operator's searcher's suggestions."""
    live = operator_searcher(searcher, config, metric, mode, num_samples)
    return [live.suggest(f"trial_{i}") for i in range(num_samples)]


class SearchSpaceTest(unittest.TestCase):
    def setUp(self):
        self.config = {
            "func": tune.sample_from(lambda spec: spec.config.uniform * 0.01),
            "uniform": tune.uniform(-5, -1),
            "quniform": tune.quniform(3.2, 5.4, 0.2),
            "loguniform": tune.loguniform(1e-4, 1e-2),
            "qloguniform": tune.qloguniform(1e-4, 1e-1, 5e-5),
            "choice": tune.choice([2, 3, 4]),
            "randint": tune.randint(-9, 15),
            "lograndint": tune.lograndint(1, 10),
            "qrandint": tune.qrandint(-21, 12, 3),
            "qrandint_q3": tune.qrandint(1, 10, 3),
            "qrandint_q1": tune.qrandint(1, 5, 1),
            "qlograndint": tune.qlograndint(2, 20, 2),
            "randn": tune.randn(10, 2),
            "qrandn": tune.qrandn(10, 2, 0.2),
        }

    def _testTuneSampleAPI(self, configs, ignore=None, check_stats=True):  # noqa: N802
        ignore = ignore or []
        stats = defaultdict(list)

        for out in configs:
            for k, v in out.items():
                if k not in ignore:
                    stats[k].append(v)

            if "func" not in ignore:
                self.assertAlmostEqual(out["func"], out["uniform"] * 0.01)

            if "uniform" not in ignore:
                self.assertGreaterEqual(out["uniform"], -5)
                self.assertLess(out["uniform"], -1)

            if "quniform" not in ignore:
                self.assertGreaterEqual(out["quniform"], 3.2)
                self.assertLessEqual(out["quniform"], 5.4)
                self.assertAlmostEqual(out["quniform"] / 0.2, round(out["quniform"] / 0.2))

            if "loguniform" not in ignore:
                self.assertGreaterEqual(out["loguniform"], 1e-4)
                self.assertLess(out["loguniform"], 1e-2)

            if "qloguniform" not in ignore:
                self.assertGreaterEqual(out["qloguniform"], 1e-4)
                self.assertLessEqual(out["qloguniform"], 1e-1)
                self.assertAlmostEqual(out["qloguniform"] / 5e-5, round(out["qloguniform"] / 5e-5))

            if "choice" not in ignore:
                self.assertIn(out["choice"], [2, 3, 4])

            if "randint" not in ignore:
                self.assertGreaterEqual(out["randint"], -9)
                self.assertLess(out["randint"], 15)
                self.assertTrue(isinstance(out["randint"], int))

            if "lograndint" not in ignore:
                self.assertGreaterEqual(out["lograndint"], 1)
                self.assertLess(out["lograndint"], 10)
                self.assertTrue(isinstance(out["lograndint"], int))

            if "qrandint" not in ignore:
                self.assertGreaterEqual(out["qrandint"], -21)
                self.assertLessEqual(out["qrandint"], 12)
                self.assertEqual(out["qrandint"] % 3, 0)
                self.assertTrue(isinstance(out["qrandint"], int))

            if "qrandint_q3" not in ignore:
                self.assertGreaterEqual(out["qrandint_q3"], 1)
                self.assertLessEqual(out["qrandint_q3"], 10)
                self.assertEqual(out["qrandint_q3"] % 3, 0)
                self.assertTrue(isinstance(out["qrandint_q3"], int))

            if "qrandint_q1" not in ignore:
                self.assertGreaterEqual(out["qrandint_q1"], 1)
                self.assertLessEqual(out["qrandint_q1"], 5)
                self.assertEqual(out["qrandint_q1"] % 1, 0)
                self.assertTrue(isinstance(out["qrandint_q1"], int))

            if "qlograndint" not in ignore:
                self.assertGreaterEqual(out["qlograndint"], 2)
                self.assertLessEqual(out["qlograndint"], 20)
                self.assertEqual(out["qlograndint"] % 2, 0)
                self.assertTrue(isinstance(out["qlograndint"], int))

            if "randn" not in ignore:
                # Very improbable
                self.assertGreater(out["randn"], 0)
                self.assertLess(out["randn"], 20)

            if "qrandn" not in ignore:
                self.assertGreater(out["qrandn"], 0)
                self.assertLess(out["qrandn"], 20)
                self.assertAlmostEqual(out["qrandn"] / 0.2, round(out["qrandn"] / 0.2))

        if check_stats:
            for k, v in stats.items():
                if k == "choice":
                    self.assertIn(2, v, msg="choice failed for 2")
                    self.assertIn(3, v, msg="choice failed for 3")
                    self.assertIn(4, v, msg="choice failed for 4")

                elif k == "randint":
                    for i in range(-9, 15):
                        self.assertIn(i, v, msg=f"randint failed for i={i}")

                elif k == "qrandint":
                    for i in range(-21, 13, 3):
                        self.assertIn(i, v, msg=f"qrandint failed for i={i}")

                elif k == "qrandint_q3":
                    for i in range(3, 11, 3):
                        self.assertIn(i, v, msg=f"qrandint_q3 failed for i={i}")

                elif k == "qrandint_q1":
                    for i in range(1, 5, 1):
                        self.assertIn(i, v, msg=f"qrandint_q1 failed for i={i}")

                elif k == "lograndint":
                    for i in range(1, 10):
                        self.assertIn(i, v, msg=f"lograndint failed for i={i}")

                elif k == "qlograndint":
                    for i in range(2, 21, 2):
                        self.assertIn(i, v, msg=f"qlograndint failed for i={i}")

    def testSampleBoundsRandom(self):  # noqa: N802
        config = self.config.copy()

        def config_generator():
            for _ in range(1000):
                for generated, _ in generate_variants(config):
                    yield generated

        self._testTuneSampleAPI(config_generator())

    def testBoundedFloat(self):  # noqa: N802
        bounded = sample.Float(-4.2, 8.3)

        # Don't allow to specify more than one sampler
        with self.assertRaises(ValueError):
            bounded.normal().uniform()

        # Uniform
        samples = bounded.uniform().sample(size=1000)
        self.assertTrue(any(-4.2 < s < 8.3 for s in samples))
        self.assertFalse(np.mean(samples) < -2)

        # Loguniform
        with self.assertRaises(ValueError):
            bounded.loguniform().sample(size=1000)

        bounded_positive = sample.Float(1e-4, 1e-1)
        samples = bounded_positive.loguniform().sample(size=1000)
        self.assertTrue(any(1e-4 < s < 1e-1 for s in samples))

    def testUnboundedFloat(self):  # noqa: N802
        unbounded = sample.Float(None, None)

        # Require min and max bounds for loguniform
        with self.assertRaises(ValueError):
            unbounded.loguniform()

        # Normal
        samples = sample.Float(None, None).normal().sample(size=1000)
        self.assertTrue(any(-5 < s < 5 for s in samples))
        self.assertTrue(-1 < np.mean(samples) < 1)

    def testBoundedInt(self):  # noqa: N802
        bounded = sample.Integer(-3, 12)

        samples = bounded.uniform().sample(size=1000)
        self.assertTrue(any(-3 <= s < 12 for s in samples))
        self.assertFalse(np.mean(samples) < 2)

    def testCategorical(self):  # noqa: N802
        categories = [-2, -1, 0, 1, 2]
        cat = sample.Categorical(categories)

        samples = cat.uniform().sample(size=1000)
        self.assertTrue(any(-2 <= s <= 2 for s in samples))
        self.assertTrue(all(c in samples for c in categories))

    def testFunction(self):  # noqa: N802
        def sample_fn(spec):
            return np.random.uniform(-4, 4)

        fnc = sample.Function(sample_fn)

        samples = fnc.sample(size=1000)
        self.assertTrue(any(-4 < s < 4 for s in samples))
        self.assertTrue(-2 < np.mean(samples) < 2)

    def testFunctionSignature(self):  # noqa: N802
        from functools import partial

        def sample_a():
            return 0

        def sample_b(spec):
            return 1

        def sample_c(spec, b="ok"):
            return 2

        def sample_d_invalid(spec, b):
            return 3

        sample_d_valid = partial(sample_d_invalid, b="ok")

        for sample_fn in [sample_a, sample_b, sample_c, sample_d_valid]:
            fn = tune.sample_from(sample_fn)
            drawn = fn.sample(None)
            self.assertIsNotNone(drawn)

        with self.assertRaises(ValueError):
            fn = tune.sample_from(sample_d_invalid)
            print(fn.sample(None))

    def testQuantized(self):  # noqa: N802
        bounded_positive = sample.Float(1e-4, 1e-1)

        bounded = sample.Float(1e-4, 1e-1)
        with self.assertRaises(ValueError):
            # Granularity too high
            bounded.quantized(5e-4)

        with self.assertRaises(ValueError):
            sample.Float(-1e-1, -1e-4).quantized(5e-4)

        samples = bounded_positive.loguniform().quantized(5e-5).sample(size=1000)

        for drawn in samples:
            factor = drawn / 5e-5
            assert 1e-4 <= drawn <= 1e-1
            self.assertAlmostEqual(factor, round(factor), places=10)

        with self.assertRaises(ValueError):
            sample.Float(0, 32).quantized(3)

        samples = sample.Float(0, 33).quantized(3).sample(size=1000)
        self.assertTrue(all(0 <= s <= 33 for s in samples))

    def testCategoricalDtype(self):  # noqa: N802
        dist = tune.choice([1.0, "str"])

        np.random.seed(1000)
        drawn = dist.sample(size=100)
        self.assertTrue(all((x, type(x)) in [(1.0, float), ("str", str)] for x in drawn))

    def testSampleBoundsBOHB(self):  # noqa: N802
        ignore = [
            "func",
            "quniform",  # BOHB drops quantization
            "qloguniform",  # BOHB drops quantization
            "qrandint",  # BOHB drops quantization
            "qrandint_q3",  # BOHB drops quantization
            "qlograndint",  # BOHB drops quantization
            "randn",  # ConfigSpace 1.2+ doesn't support unbounded normals
            "qrandn",  # ConfigSpace 1.2+ doesn't support unbounded normals
        ]

        config = self.config.copy()
        for k in ignore:
            config.pop(k)

        searcher = operator_searcher(TuneBOHB(metric="a", mode="max"), config, num_samples=1000)

        def config_generator():
            for i in range(1000):
                yield searcher.suggest(f"trial_{i}")

        self._testTuneSampleAPI(config_generator(), ignore=ignore)

    def testSampleBoundsOptuna(self):  # noqa: N802
        # Quantization and log does not seem to work with Optuna
        # Also, qrandint works differently in Optuna (it moves the boundaries)
        ignore = [
            "func",
            "randn",
            "qrandn",
            "qloguniform",
            "qlograndint",
            "qrandint_q3",
        ]

        config = self.config.copy()
        for k in ignore:
            config.pop(k)

        searcher = operator_searcher(OptunaSearch(metric="a", mode="max"), config, num_samples=1000)

        def config_generator():
            for i in range(1000):
                yield searcher.suggest(f"trial_{i}")

        self._testTuneSampleAPI(config_generator(), ignore=ignore)

    def _testPointsToEvaluate(self, cls, config, exact=True, **kwargs):  # noqa: N802
        points_to_evaluate = [{k: v.sample() for k, v in config.items()} for _ in range(2)]
        print(f"Points to evaluate: {points_to_evaluate}")
        searcher = cls(points_to_evaluate=points_to_evaluate, **kwargs)

        trial_configs = run_configs(searcher, config, metric="metric", mode="max", num_samples=5)

        for i in range(len(points_to_evaluate)):
            trial_config = trial_configs[i]
            trial_config_dict = {
                "metric": trial_config["metric"],
                "a": trial_config["a"],
                "b": trial_config["b"],
                "c": trial_config["c"],
            }
            if not exact:
                for k, v in trial_config_dict.items():
                    self.assertAlmostEqual(v, points_to_evaluate[i][k], places=10)
            else:
                self.assertDictEqual(trial_config_dict, points_to_evaluate[i])

    def testPointsToEvaluateBOHB(self):  # noqa: N802
        config = {
            "metric": sample.Categorical([1, 2, 3, 4]).uniform(),
            "a": sample.Categorical(["t1", "t2", "t3", "t4"]).uniform(),
            "b": sample.Integer(0, 5),
            "c": sample.Float(1e-4, 1e-1).loguniform(),
        }

        return self._testPointsToEvaluate(TuneBOHB, config)

    def testPointsToEvaluateOptuna(self):  # noqa: N802
        config = {
            "metric": sample.Categorical([1, 2, 3, 4]).uniform(),
            "a": sample.Categorical(["t1", "t2", "t3", "t4"]).uniform(),
            "b": sample.Integer(0, 5),
            "c": sample.Float(1e-4, 1e-1).loguniform(),
        }

        return self._testPointsToEvaluate(OptunaSearch, config)

    def testPointsToEvaluateBasicVariant(self):  # noqa: N802
        config = {
            "metric": sample.Categorical([1, 2, 3, 4]).uniform(),
            "a": sample.Categorical(["t1", "t2", "t3", "t4"]).uniform(),
            "b": sample.Integer(0, 5),
            "c": sample.Float(1e-4, 1e-1).loguniform(),
        }

        return self._testPointsToEvaluate(BasicVariantGenerator, config)

    def testPointsToEvaluateBasicVariantAdvanced(self):  # noqa: N802
        config = {
            "grid_1": tune.grid_search(["a", "b", "c", "d"]),
            "grid_2": tune.grid_search(["x", "y", "z"]),
            "nested": {
                "random": tune.uniform(2.0, 10.0),
                "dependent": tune.sample_from(lambda spec: -1.0 * spec.config.nested.random),
            },
        }

        points = [
            {"grid_1": "b"},
            {"grid_2": "z"},
            {"grid_1": "a", "grid_2": "y"},
            {"nested": {"random": 8.0}},
        ]

        def add_configurations(points_to_evaluate):
            """Ray's ``searcher.add_configurations(Experiment(config=config, num_samples=6))``: the operator's
            ``basic`` searcher over the space (``sample_from`` values computed here, as each trial's pod does)."""
            return create_searcher("basic", config, num_samples=6, points_to_evaluate=points_to_evaluate)

        # grid_1 * grid_2 are 3 * 4 = 12 variants per complete grid search
        # However if one grid var is set by preset variables, that run
        # is excluded from grid search.
        # Point 1 overwrites grid_1, so the first trial only grid searches
        # over grid_2 (3 trials).
        # The remaining 5 trials search over the whole space (5 * 12 trials)
        searcher = add_configurations([points[0]])
        self.assertEqual(searcher.total, 1 * 3 + 5 * 12)

        # Point 2 overwrites grid_2, so the first trial only grid searches
        # over grid_1 (4 trials).
        # The remaining 5 trials search over the whole space (5 * 12 trials)
        searcher = add_configurations([points[1]])
        self.assertEqual(searcher.total, 1 * 4 + 5 * 12)

        # Point 3 overwrites grid_1 and grid_2, so the first trial does not
        # grid search.
        # The remaining 5 trials search over the whole space (5 * 12 trials)
        searcher = add_configurations([points[2]])
        self.assertEqual(searcher.total, 1 + 5 * 12)

        # When initialized with all points, the first three trials are
        # defined by the logic above. Only 3 trials are grid searched
        # compeletely.
        searcher = add_configurations(points)
        self.assertEqual(searcher.total, 1 * 3 + 1 * 4 + 1 + 3 * 12)

        # Run this and confirm results
        configs = [searcher.variant(i)[0] for i in range(searcher.total)]

        self.assertEqual(len(configs), searcher.total)
        self.assertTrue(all(config["grid_1"] == "b" for config in configs[0:3]))
        self.assertTrue(all(config["grid_2"] == "z" for config in configs[3:7]))
        self.assertTrue(configs[7]["grid_1"] == "a" and configs[7]["grid_2"] == "y")
        self.assertTrue(configs[8]["nested"]["random"] == 8.0)
        self.assertTrue(configs[8]["nested"]["dependent"] == -8.0)

    def testGridSearchGenerator(self):  # noqa: N802
        searcher = operator_searcher(
            BasicVariantGenerator(constant_grid_search=False), {"parameter": tune.grid_search(range(10))}
        )

        trials = [searcher.suggest(f"trial_{i}") for i in range(10)]
        assert [t["parameter"] for t in trials] == list(range(10))

    def testConstantGridSearchBasicVariant(self):  # noqa: N802
        config = {
            "grid": tune.grid_search([1, 2, 3]),
            "rand": tune.uniform(0, 1000),
            "dependent_rand": tune.sample_from(lambda spec: spec.config.rand / 10),
            "dependent_grid": tune.sample_from(lambda spec: spec.config.grid / 10),
        }

        num_samples = 6

        def all_configs(constant_grid_search):
            """Ray's ``next_trial`` until ``is_finished``: the operator's ``basic`` searcher's variants in order."""
            searcher = create_searcher(
                "basic", config, num_samples=num_samples, constant_grid_search=constant_grid_search
            )
            return [searcher.variant(i)[0] for i in range(searcher.total)]

        # First, do not keep random variables constant
        configs = all_configs(constant_grid_search=False)

        for i in range(num_samples):
            sub_configs = configs[i * 3 : i * 3 + 3]
            # These should not be equal, because we sample randomly for
            # each grid search value
            self.assertNotEqual(sub_configs[0]["rand"], sub_configs[1]["rand"])
            self.assertNotEqual(sub_configs[0]["rand"], sub_configs[2]["rand"])

        # Second, keep random variables constant
        configs = all_configs(constant_grid_search=True)

        for i in range(num_samples):
            sub_configs = configs[i * 3 : i * 3 + 3]
            # These should be equal, because we sample randomly first and
            # then keep the random values constant
            self.assertEqual(sub_configs[0]["rand"], sub_configs[1]["rand"])
            self.assertEqual(sub_configs[0]["rand"], sub_configs[2]["rand"])

        # Also, for different samples the random variables should differ
        self.assertEqual(configs[0]["grid"], configs[3]["grid"])
        self.assertNotEqual(configs[0]["rand"], configs[3]["rand"])
