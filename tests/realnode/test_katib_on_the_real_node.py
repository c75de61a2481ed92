"""Katib's own examples on the real node, served by kubetune's chart (``katib.enabled``): Katib's
``hp-tuning/random.yaml``, ``hp-tuning/tpe.yaml``, ``metrics-collector/file-metrics-collector.yaml`` and
``metrics-collector/file-metrics-collector-with-json-format.yaml`` (``--logger=hypertune``: JSON lines in a file)
applied as Katib's users apply them, changed only in their namespace and their image (``trial-python``:
``examples/container-trials/mnist.py`` at ``/opt/pytorch-mnist/mnist.py``, Katib's pytorch-mnist flags and lines,
Debian's python3 alone). Each runs its 12 trials, 3 at a time, under the ``restricted`` Pod Security Standard, and
ends ``Succeeded`` with Katib's reason; its Katib Trials hold each trial's assignments and its objective's metrics.
Prints the wall time and the time from the create to the first trial pod running (the issue's figures for
``random.yaml``).
"""

from __future__ import annotations

import time

import pytest
import yaml

from devcluster.testkit import wait_for
from tests.integration.test_katib_api import EXAMPLES
from tests.realnode.test_container_trials_on_the_real_node import configs_of
from tests.realnode.test_realnode import trials_of


def katib_conditions(custom, namespace: str, name: str) -> list[list[str]]:
    experiment = custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", name)
    return [[c["type"], c["status"], c["reason"]] for c in (experiment.get("status") or {}).get("conditions") or ()]


@pytest.mark.parametrize(
    "path",
    [
        "hp-tuning/random.yaml",
        "hp-tuning/tpe.yaml",
        "metrics-collector/file-metrics-collector.yaml",
        "metrics-collector/file-metrics-collector-with-json-format.yaml",
    ],
)
def test_katibs_example_runs_unchanged_but_for_its_image(node_cluster, core, custom, team, path):
    (katib,) = [d for d in yaml.safe_load_all((EXAMPLES / path).read_text()) if d]
    name = katib["metadata"]["name"]
    katib["metadata"]["namespace"] = team
    (container,) = katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/kubeflow/katib/pytorch-mnist-cpu:latest"
    container["image"] = node_cluster.node.image("trial-python")
    started = time.monotonic()
    custom.create_namespaced_custom_object("kubeflow.org", "v1beta1", team, "experiments", katib)
    wait_for(
        lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(team).items),
        timeout=180,
        interval=0.2,
        what="the first trial pod running",
    )
    first_pod = time.monotonic() - started
    wait_for(
        lambda: ["Succeeded", "True", "ExperimentMaxTrialsReached"] in katib_conditions(custom, team, name),
        timeout=900,
        interval=1,
        what=f"Katib's {path} to succeed ({katib_conditions(custom, team, name)})",
    )
    wall = time.monotonic() - started
    print(f"\n[katib] {path}: 12 trials, 3 at a time: {wall:.1f} s; first trial pod running after {first_pod:.1f} s")
    ran, configs = trials_of(custom, team, name), configs_of(custom, team, name)
    assert len(ran) == 12 and all(status["phase"] == "Succeeded" for status in ran.values()), ran
    mirrored = custom.list_namespaced_custom_object(
        "kubeflow.org", "v1beta1", team, "trials", label_selector=f"katib.kubeflow.org/experiment={name}"
    )["items"]
    assert sorted(t["metadata"]["name"] for t in mirrored) == sorted(ran)
    for trial in mirrored:
        status, config = ran[trial["metadata"]["name"]], configs[trial["metadata"]["name"]]
        assignments = {p["name"]: float(p["value"]) for p in trial["spec"]["parameterAssignments"]}
        assert assignments == {k: config[k] for k in ("lr", "momentum")}
        metrics = trial["status"]["observation"]["metrics"]
        observed = {m["name"]: float(m["latest"]) for m in metrics}
        objective = katib["spec"]["objective"]
        names = [objective["objectiveMetricName"], *objective.get("additionalMetricNames", ())]
        assert observed == {n: status["lastResult"][n] for n in names}, (observed, status["lastResult"])
        # Katib's default strategies: each metric's min and max over every result (the Trial's metricRange)
        ranges = {m["name"]: {"min": float(m["min"]), "max": float(m["max"])} for m in metrics}
        assert ranges == {n: status["metricRange"][n] for n in names}, (ranges, status["metricRange"])
        assert trial["status"]["conditions"][-1]["type"] == "Succeeded"
