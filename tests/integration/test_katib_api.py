"""Katib's API served by kubetune, driven by Katib's own Python SDK (``kubeflow-katib`` 0.19.0 from the package index,
in ``.venv-katib``: it needs protobuf<5, this environment has 7) on the local cluster.

Katib's ``hp-tuning/random.yaml`` (12 trials, 3 at a time) is created with ``KatibClient.create_experiment``; its
trial command runs ``examples/container-trials/mnist.py`` (the stand-in for Katib's pytorch-mnist image, same flags
and lines) from this checkout instead of the image's ``/opt/pytorch-mnist/mnist.py``: the process node runs
commands on this host. Katib's SDK then waits for ``Succeeded`` and reads the optimal trial and every trial, and
each answer is checked against the native objects that ran it. Katib's ``hp-tuning/hyperband.yaml`` runs its
brackets with a tiny trial command. A Katib Experiment kubetune cannot run is refused with the reason, at admission
where the CRD's rules see it, else by the operator; Katib's SDK raises with it. Then: ``KatibClient.tune`` with a
user's function, Katib's trial-metadata references and a trial template in a ConfigMap, Katib's ``report_metrics()``
from a trial, and the CRD's rules on every example.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sklearn
import yaml
from kubernetes import client

from devcluster.testkit import outside_a_pod, wait_for
from kubetune.sdk.katib_convert import KatibConversionError, convert
from kubetune_operator.status import parse_time
from tests.integration.test_operator import get, posted, trials

ROOT = Path(__file__).resolve().parents[2]
KATIB_PYTHON = ROOT / ".venv-katib" / "bin" / "python"
EXAMPLES = ROOT / "tests" / "unit" / "data" / "katib"
MNIST = ROOT / "examples" / "container-trials" / "mnist.py"
DIGITS = Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz"

# Run by Katib's SDK in .venv-katib: argv[1] the Experiment (JSON), argv[2] its namespace, argv[3] "run" (create,
# wait, read) or "delete"; prints what it read as JSON.
SDK_SCRIPT = """
import json, sys
from kubeflow.katib import KatibClient

experiment, namespace, action = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
name = experiment["metadata"]["name"]
katib = KatibClient(namespace=namespace)
if action == "delete":
    katib.delete_experiment(name, namespace)
    print(json.dumps({"deleted": name}))
    sys.exit(0)
try:
    katib.create_experiment(experiment, namespace=namespace)
except RuntimeError as exc:  # the SDK's message names no reason: the API server's is its cause
    print(json.dumps({"refused": f"{exc}: {exc.__context__}"}))
    sys.exit(0)
try:
    katib.wait_for_experiment_condition(name, namespace, timeout=420, polling_interval=2)
except RuntimeError as exc:
    print(json.dumps({"raised": str(exc)}))
    sys.exit(0)
best = katib.get_optimal_hyperparameters(name, namespace)
out = {
    "succeeded": katib.is_experiment_succeeded(name, namespace),
    "conditions": [[c.type, c.status, c.reason] for c in katib.get_experiment_conditions(name, namespace)],
    "best": {
        "name": best.best_trial_name,
        "assignments": {p.name: p.value for p in best.parameter_assignments},
        "metrics": {m.name: {"min": m.min, "max": m.max, "latest": m.latest} for m in best.observation.metrics},
    },
    "trials": sorted(t.metadata.name for t in katib.list_trials(name, namespace)),
    "details": {
        d["name"]: {
            "assignments": {p.name: p.value for p in d["parameter_assignments"]},
            "metrics": {m.name: m.latest for m in d["metrics"]},
        }
        for d in katib.get_success_trial_details(name, namespace)
    },
}
print(json.dumps(out))
"""


@pytest.fixture(scope="module", autouse=True)
def katib_crds(api):
    """Katib's CRDs for this module only, as the chart's katib.enabled installs them: with them installed, kubectl's
    plain ``experiments`` and ``trials`` may name Katib's kinds (docs/katib.md), which other tests do not expect."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((ROOT / "crds" / "kubeflow.org").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(crd)
        names.append(crd["metadata"]["name"])

    def established(name: str) -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or ()
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(lambda: all(established(n) for n in names), timeout=60, what="Katib's CRDs established")
    yield
    # every Katib Experiment gone first (its test's namespace is being deleted): kopf's finalizer on each is removed
    # by the operator, which stops serving a CRD being deleted, so deleting the CRDs first would leave them stuck
    custom = client.CustomObjectsApi(api)

    def katib_experiments() -> list:
        return custom.list_cluster_custom_object("kubeflow.org", "v1beta1", "experiments")["items"]

    wait_for(lambda: not katib_experiments(), timeout=180, what="the Katib Experiments deleted with their namespaces")
    for name in names:
        ext.delete_custom_resource_definition(name)

    def gone(name: str) -> bool:
        try:
            ext.read_custom_resource_definition(name)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(lambda: all(gone(n) for n in names), timeout=120, what="Katib's CRDs deleted")


def katib_sdk(experiment: dict, namespace: str, cluster, action: str = "run") -> dict:
    """Run :data:`SDK_SCRIPT` with Katib's SDK against the cluster; its JSON output."""
    done = subprocess.run(
        outside_a_pod([str(KATIB_PYTHON), "-c", SDK_SCRIPT, json.dumps(experiment), namespace, action]),
        env={"KUBECONFIG": cluster.env()["KUBECONFIG"], "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def katib_example(path: str, namespace: str) -> dict:
    (doc,) = [d for d in yaml.safe_load_all((EXAMPLES / path).read_text()) if d]
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    return doc


def test_katibs_random_example_runs_through_katibs_sdk_and_reads_back_what_kubetune_ran(
    cluster, operator, custom, namespace
):
    katib = katib_example("hp-tuning/random.yaml", namespace)
    (container,) = katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"]
    assert container["command"][1] == "/opt/pytorch-mnist/mnist.py"
    container["command"][1:2] = [str(MNIST), f"--data={DIGITS}"]
    out = katib_sdk(katib, namespace, cluster)
    assert out.get("succeeded") is True, out
    assert out["conditions"] == [
        ["Created", "True", "ExperimentCreated"],
        ["Running", "False", "ExperimentMaxTrialsReached"],
        ["Succeeded", "True", "ExperimentMaxTrialsReached"],
    ]
    native = get(custom, namespace, "experiments", "random")
    assert native["metadata"]["ownerReferences"][0]["kind"] == "Experiment"
    ran = trials(custom, namespace)
    assert len(ran) == 12 and out["trials"] == sorted(ran)
    assert sorted(out["details"]) == sorted(ran)
    for name, trial in ran.items():
        config, status = trial["spec"]["config"], trial["status"]
        assert status["phase"] == "Succeeded" and status["reason"] == "Completed", (name, status)
        assert 0.01 <= config["lr"] <= 0.05 and 0.5 <= config["momentum"] <= 0.9
        detail = out["details"][name]
        assert detail["assignments"] == {"lr": repr(config["lr"]), "momentum": repr(config["momentum"])}
        assert detail["metrics"] == {"loss": str(status["lastResult"]["loss"])}
    # Katib's default metricStrategies rank a minimized loss by its min over every result: bestTrialScope all
    assert native["spec"]["bestTrialScope"] == "all"
    lowest = {name: t["status"]["metricRange"]["loss"]["min"] for name, t in ran.items()}
    best = native["status"]["bestTrial"]
    assert out["best"]["name"] == best["name"] == min(lowest, key=lowest.get)
    loss = ran[best["name"]]["status"]["metricRange"]["loss"]
    assert out["best"]["metrics"]["loss"] == {
        "min": str(loss["min"]),
        "max": str(loss["max"]),
        "latest": str(ran[best["name"]]["status"]["lastResult"]["loss"]),
    }
    assert best["metricValue"] == min(lowest.values()) == float(out["best"]["metrics"]["loss"]["min"])
    assert out["best"]["assignments"] == out["details"][best["name"]]["assignments"]
    # delete_experiment: the native Experiment, its Trials and the Katib Trials go with it (the garbage collector)
    assert katib_sdk(katib, namespace, cluster, "delete") == {"deleted": "random"}
    wait_for(
        lambda: (
            not trials(custom, namespace)
            and not get(custom, namespace, "experiments", "random")
            and not custom.list_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "trials")["items"]
        ),
        timeout=120,
        what="the Katib Experiment's objects deleted with it",
    )


def test_what_kubetune_cannot_run_is_refused_at_admission_or_by_the_operator_with_the_reason(
    cluster, operator, custom, core, namespace
):
    """Katib's pbt is refused by the CRD's rule, so create_experiment fails with the reason; a reference to
    an annotation the trial's Job does not have (which only the converter sees) ends Failed, reason
    ExperimentRefused, which Katib's SDK raises while it waits, with a Refused event and no native Experiment."""
    out = katib_sdk(katib_example("hp-tuning/simple-pbt.yaml", namespace), namespace, cluster)
    assert "Failed to create Katib Experiment" in out["refused"], out
    assert "spec.algorithm.algorithmName: kubetune does not run Katib's pbt" in out["refused"], out
    katib = katib_example("trial-template/trial-metadata-substitution.yaml", namespace)
    katib["spec"]["trialTemplate"]["trialParameters"][-1]["reference"] = "${trialSpec.Annotations[absent]}"
    out = katib_sdk(katib, namespace, cluster)
    assert "ExperimentRefused" in out["raised"] and "Annotations[absent]" in out["raised"], out
    name = katib["metadata"]["name"]
    assert get(custom, namespace, "experiments", name) == {}  # no native Experiment was created
    found = posted(core, namespace, "Refused", match="Annotations[absent]")
    assert any(e.involved_object.name == name for e in found), found


# Katib's trial-metadata-substitution example's variables, checked by the trial itself: the namespace (argv[1]), the
# Job's kind, apiVersion, label and annotation; its own name is its metric (the trial's index, plus one).
METADATA_TRIAL = """
import os, sys
assert os.environ["TRIAL_NAMESPACE"] == sys.argv[1], os.environ["TRIAL_NAMESPACE"]
assert (os.environ["TRIAL_KIND"], os.environ["TRIAL_API_VERSION"]) == ("Job", "batch/v1")
assert os.environ["TRIAL_LABEL_CUSTOM"] == "custom-label"
assert os.environ["TRIAL_ANNOTATION_CUSTOM"] == "custom-annotation"
print(f"loss={int(os.environ['TRIAL_NAME'].rsplit('-', 1)[1]) + 1}")
"""


def test_katibs_trial_metadata_reaches_the_trial_as_katib_substitutes_it(cluster, operator, custom, namespace):
    """Katib's trial-template/trial-metadata-substitution.yaml: ${trialSpec.Name}, Namespace, Kind, APIVersion,
    Labels[custom-key] and Annotations[custom-key] in the container's env, each trial seeing its own name."""
    katib = katib_example("trial-template/trial-metadata-substitution.yaml", namespace)
    katib["spec"].update(maxTrialCount=3, parallelTrialCount=3)
    template = katib["spec"]["trialTemplate"]
    (container,) = template["trialSpec"]["spec"]["template"]["spec"]["containers"]
    container["command"] = [sys.executable, "-c", METADATA_TRIAL, namespace, "--lr=${trialParameters.learningRate}"]
    out = katib_sdk(katib, namespace, cluster)
    assert out.get("succeeded") is True, out
    ran = trials(custom, namespace)
    assert len(ran) == 3
    for name, trial in ran.items():
        assert trial["status"]["lastResult"]["loss"] == int(name.rsplit("-", 1)[1]) + 1, trial["status"]


# The trial of a template in a ConfigMap: prints Katib's example's metrics from its flags
TEMPLATED_TRIAL = """
import sys
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:])
assert flags["optimizer"] in ("sgd", "adam", "ftrl"), flags
accuracy = round(float(flags["lr"]) * 10 + int(flags["num-layers"]) / 100, 6)
print(f"Train-accuracy={accuracy}")
print(f"Validation-accuracy={accuracy}")
"""


def test_a_trial_template_in_a_labelled_config_map_runs_and_an_unlabelled_one_is_refused(
    cluster, operator, custom, core, namespace
):
    """Katib's trial-template/trial-configmap-source.yaml with its template in a ConfigMap of this namespace labelled
    as Katib's trial-templates (Katib's example names Katib's own namespace); the same ConfigMap without the label
    refuses the Experiment with the reason."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "training-container",
                            "image": "kubetune/trial-python:0.1.0",
                            "command": [sys.executable, "-c", TEMPLATED_TRIAL],
                            "args": [
                                "--lr=${trialParameters.learningRate}",
                                "--num-layers=${trialParameters.numberLayers}",
                                "--optimizer=${trialParameters.optimizer}",
                            ],
                        }
                    ],
                    "restartPolicy": "Never",
                }
            }
        },
    }
    label = {"katib.kubeflow.org/component": "trial-templates"}
    for name, labels in (("trial-templates", label), ("unlabelled", {})):
        body = {"metadata": {"name": name, "labels": labels}, "data": {"defaultTrialTemplate.yaml": yaml.dump(job)}}
        core.create_namespaced_config_map(namespace, body)
    katib = katib_example("trial-template/trial-configmap-source.yaml", namespace)
    katib["spec"]["trialTemplate"]["configMap"]["configMapNamespace"] = namespace
    katib["spec"].update(maxTrialCount=4)
    out = katib_sdk(katib, namespace, cluster)
    assert out.get("succeeded") is True, out
    ran = trials(custom, namespace)
    assert len(ran) == 4
    for trial in ran.values():
        config, status = trial["spec"]["config"], trial["status"]
        expected = round(config["lr"] * 10 + config["num-layers"] / 100, 6)
        assert status["lastResult"]["Validation-accuracy"] == expected, status
    refused = katib_example("trial-template/trial-configmap-source.yaml", namespace)
    refused["metadata"]["name"] = "from-unlabelled"
    refused["spec"]["trialTemplate"]["configMap"].update(configMapNamespace=namespace, configMapName="unlabelled")
    out = katib_sdk(refused, namespace, cluster)
    assert "ExperimentRefused" in out["raised"], out
    found = custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", "from-unlabelled")
    (failed,) = [c for c in found["status"]["conditions"] if c["type"] == "Failed"]
    assert "unlabelled: needs the label katib.kubeflow.org/component: trial-templates" in failed["message"], failed


# Katib's hyperband.yaml trial, tiny: the flags of Katib's pytorch-mnist command, one `loss=` line an epoch (Katib's
# StdOut format), a loss that falls with the epochs and depends on lr and momentum
HYPERBAND_TRIAL = """
import sys
flags = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
epochs, lr, momentum = int(flags["epochs"]), float(flags["lr"]), float(flags["momentum"])
for epoch in range(1, epochs + 1):
    print(f"epoch {epoch} loss={round(abs(lr - 0.03) * 10 + momentum / 10 + 1 / epoch, 6)}", flush=True)
"""


def test_katibs_hyperband_example_runs_its_brackets_through_katibs_sdk(cluster, operator, custom, namespace):
    """Katib's hyperband.yaml (resource_name num-epochs, r_l 2, eta 2, 2 trials at a time) with maxTrialCount 5, its
    whole plan: bracket s=1 runs 2 new configs at 1 epoch, then the one with the lower last loss again at 2 epochs
    once both ended; bracket s=0 runs 2 new configs at 2 epochs; then the search is finished and the Experiment
    succeeds (tests/unit/test_katib_hyperband.py has the numbers from Li et al. and Katib's service)."""
    katib = katib_example("hp-tuning/hyperband.yaml", namespace)
    katib["spec"]["maxTrialCount"] = 5
    (container,) = katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["python3", "/opt/pytorch-mnist/mnist.py"]
    container["command"][1:2] = ["-c", HYPERBAND_TRIAL]
    out = katib_sdk(katib, namespace, cluster)
    assert out.get("succeeded") is True, out
    native = get(custom, namespace, "experiments", "hyperband")
    assert native["spec"]["searchAlgorithm"]["name"] == "katib-hyperband"
    ran = trials(custom, namespace)
    assert len(ran) == 5 and out["trials"] == sorted(ran)
    order = sorted(ran.values(), key=lambda t: t["metadata"]["name"])  # <experiment>-<index:05d>
    configs = [t["spec"]["config"] for t in order]
    assert [c["num-epochs"] for c in configs] == [1, 1, 2, 2, 2]
    for trial in order:
        status = trial["status"]
        assert status["phase"] == "Succeeded" and status["reason"] == "Completed", status
        assert status["iteration"] == trial["spec"]["config"]["num-epochs"], status
    # the copy: rung 0's config with the lower last loss, started only after both of rung 0's trials ended
    best = min(order[:2], key=lambda t: t["status"]["lastResult"]["loss"])
    assert {k: v for k, v in configs[2].items() if k != "num-epochs"} == {
        k: v for k, v in best["spec"]["config"].items() if k != "num-epochs"
    }
    # (a Trial's creation time is to the second; a trial this short may end before the operator saw it run)
    ended = max(parse_time(t["status"]["completionTime"]).replace(microsecond=0) for t in order[:2])
    created = parse_time(order[2]["metadata"]["creationTimestamp"])
    assert created >= ended, (order[2]["metadata"]["creationTimestamp"], ended)
    assert len({(c["lr"], c["momentum"]) for c in configs[:2] + configs[3:]}) == 4  # new configs drawn once
    assert out["details"][order[2]["metadata"]["name"]]["assignments"]["num-epochs"] == "2"


# Katib's median-stop.yaml trial, tiny: the flags of Katib's pytorch-mnist command and its training lines, one every
# --log-interval batches (Katib's StdOut format); the loss falls within the epoch from a level set by lr and momentum
MEDIAN_STOP_TRIAL = """
import sys
flags = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
lr, momentum, batch = float(flags["lr"]), float(flags["momentum"]), int(flags["batch-size"])
for batch_idx in range(0, 40, 10):
    loss = abs(lr - 0.03) * 100 + momentum + 1 / (batch_idx / 10 + 1)
    print(f"Train Epoch: 1 [{batch_idx * batch}/640 ({100.0 * batch_idx / 40:.0f}%)]\tloss={loss:.4f}", flush=True)
"""


def median_stop_losses(config: dict) -> list[float]:
    """The losses :data:`MEDIAN_STOP_TRIAL` prints for ``config``, in order."""
    return [round(abs(config["lr"] - 0.03) * 100 + config["momentum"] + 1 / (k + 1), 4) for k in range(4)]


def test_katibs_median_stop_example_stops_trials_as_katibs_rule_does(cluster, operator, custom, namespace):
    """Katib's median-stop.yaml (min_trials_required 1, start_step 2) with 8 trials one at a time (so each trial's rule
    is known: the trials before it) and a seed: each trial created after one succeeded is judged at its second report
    by its best loss so far against the mean of the succeeded trials' averages over their first two; the ones Katib's
    rule stops are EarlyStopped in both APIs, the others succeed, and Katib's SDK lists only those as succeeded."""
    katib = katib_example("early-stopping/median-stop.yaml", namespace)
    katib["spec"].update(maxTrialCount=8, parallelTrialCount=1)
    katib["spec"]["algorithm"]["algorithmSettings"] = [{"name": "random_state", "value": "11"}]
    (container,) = katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["python3", "/opt/pytorch-mnist/mnist.py"]
    container["command"][1:2] = ["-c", MEDIAN_STOP_TRIAL]
    out = katib_sdk(katib, namespace, cluster)
    assert out.get("succeeded") is True, out
    native = get(custom, namespace, "experiments", "median-stop")
    assert native["spec"]["scheduler"] == {
        "name": "katib-medianstop",
        "params": {"min_trials_required": 1, "start_step": 2},
    }
    order = sorted(trials(custom, namespace).values(), key=lambda t: t["metadata"]["name"])
    assert len(order) == 8
    averages, expected = [], []  # Katib's rule, trial after trial
    for trial in order:
        losses = median_stop_losses(trial["spec"]["config"])
        rule = sum(averages) / len(averages) if averages else None
        stopped = rule is not None and min(losses[:2]) > rule
        expected.append("EarlyStopped" if stopped else "Completed")
        if not stopped:
            averages.append(sum(losses[:2]) / 2)
    assert [t["status"]["reason"] for t in order] == expected, [t["status"] for t in order]
    assert {"EarlyStopped", "Completed"} <= set(expected[1:])  # the seed gives both outcomes under a rule
    assert all(t["status"]["phase"] == "Succeeded" for t in order)
    served = custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", "median-stop")
    early = [t["metadata"]["name"] for t, e in zip(order, expected) if e == "EarlyStopped"]
    assert served["status"]["trialsEarlyStopped"] == len(early)
    assert sorted(served["status"]["earlyStoppedTrialList"]) == early
    assert sorted(out["details"]) == sorted(t["metadata"]["name"] for t in order if t["metadata"]["name"] not in early)


# A Katib trial with the Push collector: Katib's own report_metrics() each epoch, nothing of kubetune's inside
PUSHING_TRIAL = """
import sys
from kubeflow.katib import report_metrics
lr = float(sys.argv[1])
for epoch in range(1, 4):
    report_metrics({"loss": round(lr / epoch, 6), "epoch": epoch})
"""


def test_a_push_trial_reports_with_katibs_report_metrics_to_its_own_pod(cluster, operator, custom, namespace):
    """Katib's report_metrics() in the trial reaches the trial's metrics sidecar: katib-db-manager.kubeflow resolves to
    the pod (hostAliases), KATIB_TRIAL_NAME and the namespace file are there. One trial at a time: the process node's
    pods share this host's network, where a real pod has its own."""
    katib = katib_example("hp-tuning/random.yaml", namespace)
    katib["metadata"]["name"] = "pushed"
    katib["spec"].update(
        maxTrialCount=2,
        parallelTrialCount=1,
        metricsCollectorSpec={"collector": {"kind": "Push"}},
        parameters=[{"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.01", "max": "0.05"}}],
    )
    template = katib["spec"]["trialTemplate"]
    template["trialParameters"] = [{"name": "learningRate", "reference": "lr"}]
    (container,) = template["trialSpec"]["spec"]["template"]["spec"]["containers"]
    container["command"] = [str(KATIB_PYTHON), "-c", PUSHING_TRIAL, "${trialParameters.learningRate}"]
    out = katib_sdk(katib, namespace, cluster)
    assert out.get("succeeded") is True, out
    ran = trials(custom, namespace)
    assert len(ran) == 2
    for name, trial in ran.items():
        lr, status = trial["spec"]["config"]["lr"], trial["status"]
        assert status["iteration"] == 3 and status["lastResult"]["loss"] == round(lr / 3, 6), status
        assert status["lastResult"]["epoch"] == 3
        assert out["details"][name]["metrics"] == {"loss": str(round(lr / 3, 6))}


def test_the_crds_rules_admit_every_example_the_converter_runs_and_refuse_only_what_it_refuses(custom, namespace):
    """Each of Katib's examples, created with the API server's dry run: the CRD's rules refuse none that the converter
    converts, and each refusal is also one of the converter's (the rules are an early subset of its refusals)."""
    refused_at_admission = set()
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in [d for d in yaml.safe_load_all(path.read_text()) if d]:
            doc["metadata"]["namespace"] = namespace
            try:
                convert(copy.deepcopy(doc))
                converts = True
            except KatibConversionError:
                converts = False
            try:
                custom.create_namespaced_custom_object(
                    "kubeflow.org", "v1beta1", namespace, "experiments", doc, dry_run="All"
                )
            except client.ApiException as exc:
                assert exc.status == 422 and not converts, (path, exc.body)
                refused_at_admission.add(path.relative_to(EXAMPLES).as_posix())
    assert "hp-tuning/simple-pbt.yaml" in refused_at_admission
    assert "hp-tuning/hyperband.yaml" not in refused_at_admission  # run by the katib-hyperband searcher
    assert "metrics-collector/custom-metrics-collector.yaml" in refused_at_admission


# Katib's KatibClient.tune() with a function of the user's (its "custom objective" path): Katib's SDK writes the
# function's source into a Job's `bash -c` script that runs it with the trial's parameters and reads what it prints
# (StdOut, tune's default collector). argv[1]: the namespace. Prints the trials' parameters and metrics as JSON.
TUNE_SCRIPT = """
import json, sys
import kubeflow.katib as katib
from kubeflow.katib import KatibClient


def objective(parameters):
    lr = float(parameters["lr"])
    for epoch in range(1, 4):
        print(f"epoch={epoch} loss={round(lr / epoch, 6)}", flush=True)


namespace = sys.argv[1]
client = KatibClient(namespace=namespace)
client.tune(
    name="tuned",
    objective=objective,
    base_image="kubetune/trial-python:0.1.0",
    parameters={"lr": katib.search.double(min=0.01, max=0.05)},
    objective_metric_name="loss",
    objective_type="minimize",
    max_trial_count=3,
    parallel_trial_count=3,
    resources_per_trial={"cpu": "100m", "memory": "200Mi"},
)
client.wait_for_experiment_condition("tuned", namespace, timeout=300, polling_interval=2)
best = client.get_optimal_hyperparameters("tuned", namespace)
details = {
    d["name"]: {
        "assignments": {p.name: p.value for p in d["parameter_assignments"]},
        "metrics": {m.name: m.latest for m in d["metrics"]},
    }
    for d in client.get_success_trial_details("tuned", namespace)
}
print(json.dumps({"best": best.best_trial_name, "details": details}))
"""


def test_katibs_tune_runs_a_users_function_as_katib_would(cluster, operator, custom, namespace, tmp_path):
    """KatibClient.tune(objective=...) needs the function's source in a file (Katib's SDK reads it with inspect):
    the Katib Experiment it creates (a Job running `bash -c` with the function inlined, StdOut) runs unchanged."""
    script = tmp_path / "tune_with_katib.py"
    script.write_text(TUNE_SCRIPT)
    done = subprocess.run(
        outside_a_pod([str(KATIB_PYTHON), str(script), namespace]),
        env={"KUBECONFIG": cluster.env()["KUBECONFIG"], "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    katib = custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", "tuned")
    (container,) = katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["bash", "-c"] and "def objective(parameters):" in container["args"][0]
    ran = trials(custom, namespace)
    assert len(ran) == 3 and sorted(out["details"]) == sorted(ran)
    for name, trial in ran.items():
        lr, status = trial["spec"]["config"]["lr"], trial["status"]
        assert status["phase"] == "Succeeded" and status["iteration"] == 3, (name, status)
        assert out["details"][name]["metrics"] == {"loss": str(round(lr / 3, 6))}
        assert out["details"][name]["assignments"] == {"lr": repr(lr)}
    best = min(ran, key=lambda n: ran[n]["status"]["metricRange"]["loss"]["min"])  # Katib's default strategy
    assert out["best"] == best
