"""A Ray Tune script written with Ray's import paths (``ray.tune`` replaced by ``kubetune``) runs through
``tune.run`` on the local cluster (issue 23.2), with the issue's defects of 23.1 in it: mode without a
metric, a config key named like a domain, a checkpoint written before the function returns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from devcluster.cluster import S3_BUCKET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def sdk_env(cluster):
    """The user's shell after ``eval $(python -m devcluster up)``: kubeconfig and S3 credentials."""
    return {**os.environ, **cluster.env()}


SCRIPT = textwrap.dedent(
    """
    import json, os, sys

    import kubetune as tune  # was: from ray import tune
    from kubetune.schedulers.async_hyperband import ASHAScheduler  # ray.tune.schedulers.async_hyperband
    from kubetune.search.basic_variant import BasicVariantGenerator  # ray.tune.search.basic_variant
    from kubetune.suggest import ConcurrencyLimiter  # Ray 1.x's ray.tune.suggest
    from kubetune.stopper import MaximumIterationStopper  # ray.tune.stopper


    def trainable(config):
        context = tune.get_context()
        for i in range(1, 4):
            tune.report({"_metric": config["x"] * i, "trial": context.get_trial_id(),
                         "cpu": context.get_trial_resources()["cpu"], "opt": config["opt"]})
        with tune.checkpoint_dir(step=3) as d:
            with open(os.path.join(d, "x.txt"), "w") as f:
                f.write(str(config["x"]))


    searcher = BasicVariantGenerator()
    analysis = tune.run(
        trainable,
        name="ray-paths",
        namespace=os.environ["TEST_NAMESPACE"],
        storage=json.loads(os.environ["TEST_STORAGE"]),
        config={"x": tune.grid_search([1, 2, 3]), "opt": {"choice": "adam"}, "u": {"uniform": tune.uniform(-5, -1)}},
        mode="max",  # no metric: Ray's anonymous _metric
        scheduler=ASHAScheduler(max_t=10, grace_period=5),  # decides nothing in 3 iterations
        search_alg=ConcurrencyLimiter(searcher, max_concurrent=2),
        stop=MaximumIterationStopper(10),  # nor this: the function returns after 3 reports
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        verbose=0,
        poll_interval_s=0.5,
    )
    best = analysis.get_best_trial()
    checkpoint = analysis.get_last_checkpoint(best)
    print(json.dumps({
        "total_samples": searcher.total_samples,
        "metric": analysis.default_metric,
        "best": best.config["x"],
        "trials": [[t.trial_id, t.last_result["trial"], t.last_result["cpu"], t.last_result["opt"],
                    -5 <= t.config["u"]["uniform"] < -1, t.evaluated_params["x"], sorted(t.evaluated_params)]
                   for t in analysis.trials],
        "checkpoint": open(os.path.join(checkpoint.path, "x.txt")).read(),
    }))
    """
)


def test_a_script_with_rays_import_paths_runs_through_tune_run(
    operator,
    custom,
    namespace,
    storage_secret,
    sdk_env,
    tmp_path,
):
    script = tmp_path / "ray_script.py"
    script.write_text(SCRIPT)
    env = {
        **sdk_env,
        "TEST_NAMESPACE": namespace,
        "TEST_STORAGE": json.dumps({"uri": f"s3://{S3_BUCKET}/ray-paths", "credentialsSecret": storage_secret}),
        "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "trainable-runtime"), ROOT]),
    }
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["total_samples"] == 3 and out["metric"] == "_metric" and out["best"] == 3
    exp = custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", "ray-paths")
    assert exp["spec"]["metric"] == "_metric" and exp["spec"]["mode"] == "max"
    assert exp["spec"]["config"]["opt"] == {"kubetune/object": {"choice": "adam"}}
    assert exp["status"]["phase"] == "Succeeded"
    names, cpu = [row[0] for row in out["trials"]], exp["spec"]["resourcesPerTrial"]["cpu"]  # the CRD's default
    assert [row[1:] for row in out["trials"]] == [
        [name, cpu, {"choice": "adam"}, True, x, ["u/uniform", "x"]] for name, x in zip(names, (1, 2, 3))
    ]
    assert out["checkpoint"] == "3"  # written after the last report, kept with the final result
