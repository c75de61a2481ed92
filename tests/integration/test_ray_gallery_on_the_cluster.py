"""Ray's example gallery on the local cluster: Ray 2.60's own ``ray/tune/examples/*.py`` (from the ``ray`` wheel on the
package index, read at test time into ``~/.cache/kubetune/ray-gallery``), each run as a user's script with
``--smoke-test`` after docs/sdk.md's import rule (``ray.tune.X``, ``ray.train.X`` and ``ray.air.X`` are ``kubetune.X``;
``import ray`` and ``ray.init()``/``ray.shutdown()`` go, there being no Ray cluster; an example's import of another
example becomes a plain import of that file). Each must exit 0 and print what it prints under Ray: its "Best ..."
lines, whose config is the config of the trial that is best by the Experiment's metric and mode (the last result of
each trial, Ray's ``get_best_result`` default). Each runs in its own namespace (two of them share the name
``hyperband_test``). The examples that cannot run here are listed, with the reason, in docs/ray-tune.md ("Ray's
example gallery"). Prints each example's wall time: the issue's gallery figure.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client

from devcluster.ray_gallery import EXAMPLES, best_lines, gallery_folder, port_gallery, ported, run_example, script_env
from tests.integration.test_operator import GROUP, VERSION


@pytest.fixture(scope="module")
def gallery() -> Path:
    return gallery_folder()


def test_the_import_rule_rewrites_only_rays_names():
    assert ported("import ray\nfrom ray import tune\nfrom ray.tune.schedulers import ASHAScheduler\n") == (
        "pass  # was: import ray\nimport kubetune as tune\nfrom kubetune.schedulers import ASHAScheduler\n"
    )
    source = "    ray.init(num_cpus=2)  # force pausing\nfrom ray.tune.examples.pbt_function import f\nx = 'ray.init'\n"
    assert ported(source) == (
        "    pass  # was: ray.init(num_cpus=2)  # force pausing\nfrom pbt_function import f\nx = 'ray.init'\n"
    )
    assert ported("from ray.air import session\nfrom ray.train import Checkpoint\n") == (
        "from kubetune import session\nfrom kubetune import Checkpoint\n"
    )


def test_rays_examples_run_as_under_ray_with_the_import_changed(cluster, operator, core, custom, gallery, tmp_path):
    folder = tmp_path / "examples"
    port_gallery(gallery, folder)
    env, secret = script_env(cluster, tmp_path, "gallery")
    with ThreadPoolExecutor(2) as pool:  # two at a time: most of an example's time is its pods starting
        runs = dict(zip(EXAMPLES, pool.map(lambda n: run_example(n, folder, env, core, secret), EXAMPLES)))
    print()
    for name, (namespace, output, wall) in runs.items():
        print(f"[gallery] {name}: {wall:.1f} s")
        (experiment,) = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "experiments")["items"]
        assert experiment["status"]["phase"] == "Succeeded", (name, experiment["status"])
        trials = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trials")["items"]
        assert trials and all(t["status"]["phase"] == "Succeeded" for t in trials), name
        printed = best_lines(output)
        assert printed, (name, output[-2000:])
        spec = experiment["spec"]
        modes = {o["metric"]: o["mode"] for o in spec.get("objectives", [])} or {spec["metric"]: spec["mode"]}
        for metric, config in printed:
            metric = metric or spec["metric"]  # "Best hyperparameters for gain": that objective's
            mode = modes[metric]
            ranked = [t for t in trials if metric in (t["status"].get("lastResult") or {})]
            best = (max if mode == "max" else min)(ranked, key=lambda t: t["status"]["lastResult"][metric])
            assert config == best["status"].get("config", best["spec"]["config"]), (name, metric, config)
    for namespace, _, _ in runs.values():
        core.delete_namespace(namespace, body=client.V1DeleteOptions(propagation_policy="Background"))
