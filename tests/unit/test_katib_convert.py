"""``kubetune convert katib`` on Katib's own examples (tests/unit/data/katib, Apache-2.0, see its README): each
converted Experiment is accepted by the CRD schema and by the operator's spec check, its configs (drawn by the
operator's basic searcher) stay inside each Katib parameter's feasible space, and its command keeps every word
of Katib's with each parameter in place; the examples kubetune cannot run are refused with the reason. Then the
single fields: each one mapped, or named in a note and a YAML comment."""

from __future__ import annotations

import copy
import io
import json
import math
import re
from pathlib import Path

import pytest
import yaml
from conftest_crds import root_schema, validate
from ruamel.yaml import YAML

from kubetune.sdk.cli import main
from kubetune.sdk.katib_convert import KatibConversionError, convert, convert_text
from kubetune.search.katib_hyperband import total_trials
from kubetune_operator.algorithms import create_searcher
from kubetune_operator.builders import build_pod, trial_object
from kubetune_operator.container_trials import substitute
from kubetune_operator.controller import ExperimentController
from kubetune_operator.searchers import FINISHED
from kubetune_operator.searchers.basic import BasicVariantSearcher
from kubetune_operator.settings import Settings

DATA = Path(__file__).parent / "data" / "katib"
DOCS = Path(__file__).parents[2] / "docs"
CONVERTED = [
    "hp-tuning/random.yaml",
    "hp-tuning/grid.yaml",
    "hp-tuning/hyperband.yaml",
    "hp-tuning/tpe.yaml",
    "hp-tuning/multivariate-tpe.yaml",
    "hp-tuning/cma-es.yaml",
    "hp-tuning/bayesian-optimization.yaml",
    "hp-tuning/sobol.yaml",
    "hp-tuning/hyperopt-distribution.yaml",
    "hp-tuning/optuna-distribution.yaml",
    "early-stopping/median-stop.yaml",
    "early-stopping/median-stop-with-json-format.yaml",
    "metrics-collector/file-metrics-collector.yaml",
    "metrics-collector/file-metrics-collector-with-json-format.yaml",
    "metrics-collector/metrics-collection-strategy.yaml",
    "resume-experiment/long-running-resume.yaml",
    "resume-experiment/from-volume-resume.yaml",
    "trial-template/trial-metadata-substitution.yaml",
]
#: Example -> what the refusal must say.
REFUSED = {
    "hp-tuning/simple-pbt.yaml": r"algorithmName: pbt is Katib's generations .*program must change",
    "metrics-collector/custom-metrics-collector.yaml": r"collector.kind: Custom is refused",
    "kubeflow-training-operator/tfjob-mnist-with-summaries.yaml": r"a kubeflow.org/v1 TFJob trial",
    "kubeflow-trainer/trainjob-pytorch.yaml": r"a trainer.kubeflow.org/v1alpha1 TrainJob trial",
    "trial-template/trial-configmap-source.yaml": r"trialTemplate.configMap: .*put it inline",
}
SAMPLES = 200


def _katib(name: str) -> dict:
    return yaml.safe_load((DATA / name).read_text())


def _accepted(experiment: dict) -> None:
    assert validate(experiment["spec"], root_schema("Experiment")["properties"]["spec"], ".spec") == []
    experiment = {**experiment, "metadata": {**experiment["metadata"], "namespace": "default", "uid": "u-1"}}
    ExperimentController(experiment, Settings(), b"k" * 32)  # raises InvalidSpec with the reason if not


def _primary(katib: dict) -> dict:
    template = katib["spec"]["trialTemplate"]
    name = template.get("primaryContainerName", "training-container")
    containers = template["trialSpec"]["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def test_the_data_covers_every_example_named_here():
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*.yaml")}
    assert on_disk == set(CONVERTED) | set(REFUSED)


@pytest.mark.parametrize("name", CONVERTED)
def test_katibs_example_converts_to_an_experiment_the_crd_and_the_operator_accept(name):
    (conversion,) = convert_text((DATA / name).read_text(), name)
    _accepted(conversion.experiment)
    text = conversion.to_yaml()
    # the YAML written, comments and all, reads back as the Experiment (in YAML 1.2 and in PyYAML's 1.1)
    assert YAML(typ="safe").load(text) == conversion.experiment
    assert yaml.safe_load(text) == conversion.experiment
    for note in conversion.notes:  # every note is a comment of the file
        assert note.katib in text


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_katibs_example_that_kubetune_cannot_run_is_refused_with_the_reason(name):
    with pytest.raises(KatibConversionError, match=REFUSED[name]):
        convert_text((DATA / name).read_text(), name)


def _inside(value, param: dict, grid: bool) -> None:
    """``value`` is one Katib could give ``param``."""
    kind, space = param["parameterType"], param["feasibleSpace"]
    if kind == "categorical":
        assert value in space["list"]
        return
    if kind == "discrete":
        assert str(value) in [str(v) for v in space["list"]]
        return
    step = float(space["step"]) if space.get("step") else None
    low, high = float(space["min"]), float(space["max"])
    if kind == "int" and space.get("distribution") != "normal":
        assert isinstance(value, int) and not isinstance(value, bool)
    if space.get("distribution") == "normal" and not grid:  # Katib's normal is not bounded either
        assert step is None or math.isclose(value / step, round(value / step), abs_tol=1e-9)
        return
    assert low <= value <= high, (param["name"], value)
    if step is not None:
        k = (value - low) / step
        assert math.isclose(k, round(k), abs_tol=1e-6), (param["name"], value)


def _hyperband_configs(spec: dict) -> tuple[list[dict], str]:
    """Every config the converted Experiment's katib-hyperband searcher suggests (without its maxTrialCount),
    each rung ending before the next is asked for; and the resource parameter's name."""
    search = spec["searchAlgorithm"]
    searcher = create_searcher(
        search["name"], spec["config"], spec["metric"], spec["mode"], SAMPLES, 3, **search["params"]
    )
    configs, running = [], []
    while True:
        config = searcher.suggest(f"t{len(configs)}")
        if config is None:
            for i in running:
                searcher.on_trial_complete(f"t{i}", {spec["metric"]: configs[i]["lr"]})
            running = []
            continue
        if not isinstance(config, dict):
            return configs, search["params"]["resource_name"]
        running.append(len(configs))
        configs.append(config)


@pytest.mark.parametrize("name", CONVERTED)
def test_configs_stay_in_katibs_feasible_space_and_commands_keep_every_word(name):
    katib = _katib(name)
    experiment = convert(katib).experiment
    spec = experiment["spec"]
    grid = katib["spec"]["algorithm"]["algorithmName"] == "grid"
    params = {p["name"]: p for p in katib["spec"]["parameters"]}
    if spec["searchAlgorithm"]["name"] == "katib-hyperband":
        configs, resource = _hyperband_configs(spec)
        # the resource parameter takes each rung's budget (Katib's too), whatever its feasibleSpace
        assert {c[resource] for c in configs} == set(range(1, int(spec["searchAlgorithm"]["params"]["r_l"]) + 1))
        params = {k: v for k, v in params.items() if k != resource}
        configs_in_space = [{k: v for k, v in c.items() if k != resource} for c in configs]
    else:
        searcher = BasicVariantSearcher(spec["config"], num_samples=1 if grid else SAMPLES, seed=3)
        configs = configs_in_space = [searcher.variant(i)[0] for i in range(searcher.total)]
    assert all(set(c) == set(params) for c in configs_in_space)
    for config in configs_in_space:
        for key, value in config.items():
            _inside(value, params[key], grid)
    if grid:  # every point of Katib's grid, once
        sizes = [len({c[k] for c in configs}) for k in params]
        assert len(configs) == math.prod(sizes) == len({json.dumps(c, sort_keys=True) for c in configs})
    names = {p["name"] for p in katib["spec"]["parameters"]}  # the trial's metadata is not a parameter
    references = {
        p["name"]: p["reference"] for p in katib["spec"]["trialTemplate"]["trialParameters"] if p["reference"] in names
    }
    container = _primary(katib)
    katib_words = container.get("command", []) + container.get("args", [])
    words = spec["trainable"]["command"] + spec["trainable"].get("args", [])
    assert len(words) == len(katib_words)
    for reference in set(references.values()):
        assert any("${config." + reference + "}" in w for w in words), reference
    for config in configs[:20]:

        def katib_value(match: re.Match, config=config) -> str:
            value = config[references[match.group(1)]]
            return value if isinstance(value, str) else json.dumps(value)

        katib_said = [re.sub(r"\$\{trialParameters\.([^}]*)\}", katib_value, w) for w in katib_words]
        assert [substitute(w, config) for w in words] == katib_said


@pytest.mark.parametrize("name", [n for n in CONVERTED if "grid" not in n])
def test_the_experiments_own_search_algorithm_suggests_inside_katibs_feasible_space(name):
    katib = _katib(name)
    spec = convert(katib).experiment["spec"]
    search = spec["searchAlgorithm"]
    searcher = create_searcher(
        search["name"], spec["config"], spec["metric"], spec["mode"], spec["numSamples"], 5, **search.get("params", {})
    )
    params = {p["name"]: p for p in katib["spec"]["parameters"]}
    for index in range(spec["numSamples"]):
        config = searcher.suggest(f"t{index}")
        for key, value in config.items():
            _inside(value, params[key], grid=False)


def test_katibs_grid_of_doubles_is_every_step_from_min_to_max_inclusive():
    config = convert(_katib("hp-tuning/grid.yaml")).experiment["spec"]["config"]
    assert config == {
        "lr": {"grid_search": [0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05]},
        "momentum": {"grid_search": [0.5, 0.6, 0.7, 0.8, 0.9]},
    }


def test_algorithms_map_to_the_searchers_and_samplers_docs_api_names():
    def search(name: str) -> dict:
        return convert(_katib(name)).experiment["spec"]["searchAlgorithm"]

    assert search("hp-tuning/random.yaml") == {"name": "basic"}
    assert search("hp-tuning/tpe.yaml") == {"name": "optuna", "params": {"sampler": "tpe"}}
    multivariate = {"sampler": "tpe", "sampler_args": {"multivariate": True}}
    assert search("hp-tuning/multivariate-tpe.yaml") == {"name": "optuna", "params": multivariate}
    assert search("hp-tuning/cma-es.yaml") == {"name": "optuna", "params": {"sampler": "cmaes"}}
    sobol = {"sampler": "qmc", "sampler_args": {"qmc_type": "sobol"}}
    assert search("hp-tuning/sobol.yaml") == {"name": "optuna", "params": sobol}
    assert search("hp-tuning/bayesian-optimization.yaml") == {
        "name": "optuna",
        "params": {"sampler": "tpe"},
        "seed": 10,
    }
    notes = convert(_katib("hp-tuning/cma-es.yaml")).notes
    assert any("restart_strategy" in n.katib and "dropped" in n.text for n in notes)


def test_median_stop_becomes_katibs_own_rule_with_its_settings():
    conversion = convert(_katib("early-stopping/median-stop.yaml"))
    assert conversion.experiment["spec"]["scheduler"] == {
        "name": "katib-medianstop",
        "params": {"min_trials_required": 1, "start_step": 2},
    }
    assert not [n for n in conversion.notes if n.katib.startswith("spec.earlyStopping")]  # nothing changes meaning
    assert conversion.experiment["spec"]["podRetentionPolicy"] == {"whenSucceeded": "Retain", "whenFailed": "Retain"}
    katib = _katib("early-stopping/median-stop.yaml")
    katib["spec"]["earlyStopping"]["algorithmSettings"] = []
    conversion = convert(katib)
    assert conversion.experiment["spec"]["scheduler"]["params"] == {"min_trials_required": 3, "start_step": 4}
    (note,) = [n for n in conversion.notes if n.katib == "spec.earlyStopping.algorithmSettings"]
    assert "Katib's defaults (3 and 4)" in note.text


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("min_trials_required", "0", r"min_trials_required\]: must be greater than zero"),
        ("start_step", "0", r"start_step\]: must be greater or equal than one"),
        ("start_step", "two", r"start_step"),
    ],
)
def test_median_stop_settings_katib_refuses_are_refused(setting, value, message):
    katib = _katib("early-stopping/median-stop.yaml")
    katib["spec"]["earlyStopping"]["algorithmSettings"] = [{"name": setting, "value": value}]
    with pytest.raises(KatibConversionError, match=message):
        convert(katib)


def test_the_metrics_collectors_map_to_kubetunes():
    def collector(name: str) -> dict:
        return convert(_katib(name)).experiment["spec"]["metricsCollector"]

    assert collector("hp-tuning/random.yaml") == {"kind": "StdOut"}
    assert collector("metrics-collector/file-metrics-collector.yaml") == {
        "kind": "File",
        "path": "/katib/mnist.log",
        "metricsFormat": ["{metricName: ([\\w|-]+), metricValue: ((-?\\d+)(\\.\\d+)?)}"],
    }
    json_file = "metrics-collector/file-metrics-collector-with-json-format.yaml"
    assert collector(json_file) == {"kind": "File", "path": "/katib/mnist.json", "format": "JSON"}


def _random() -> dict:
    return _katib("hp-tuning/random.yaml")


def test_a_tensorflow_event_directory_and_push_are_kubetunes_collectors_too():
    katib = _random()
    katib["spec"]["metricsCollectorSpec"] = {
        "source": {"fileSystemPath": {"path": "/logs/train", "kind": "Directory"}},
        "collector": {"kind": "TensorFlowEvent"},
    }
    experiment = convert(katib).experiment
    assert experiment["spec"]["metricsCollector"] == {"kind": "TensorFlowEvent", "path": "/logs/train"}
    _accepted(experiment)
    katib["spec"]["metricsCollectorSpec"] = {"collector": {"kind": "Push"}}
    conversion = convert(katib)
    assert conversion.experiment["spec"]["metricsCollector"] == {"kind": "Push", "katibDBManager": True}
    assert any("report_metrics() reaches the trial's metrics sidecar" in n.text for n in conversion.notes)
    _accepted(conversion.experiment)
    katib["spec"]["metricsCollectorSpec"] = {"collector": {"kind": "PrometheusMetric"}}
    with pytest.raises(KatibConversionError, match="PrometheusMetric is refused"):
        convert(katib)


def test_parameter_domains_follow_katibs_bounds_steps_and_distributions():
    def domain(kind: str, **space) -> object:
        katib = _random()
        katib["spec"]["parameters"][0] = {"name": "lr", "parameterType": kind, "feasibleSpace": space}
        return convert(katib).experiment["spec"]["config"]["lr"]

    assert domain("int", min="1", max="5") == {"randint": [1, 6]}  # Katib's max is included
    assert domain("int", min="2", max="10", step="2") == {"qrandint": [2, 10, 2]}
    assert domain("int", min="1", max="9", step="4") == {"choice": [1, 5, 9]}  # 1 is no multiple of 4
    assert domain("int", min="1", max="100", distribution="logUniform") == {"lograndint": [1, 101]}
    assert domain("double", min="0.2", max="0.6", step="0.2") == {"quniform": [0.2, 0.6, 0.2]}
    assert domain("double", min="0.1", max="0.5", step="0.2") == {"choice": [0.1, 0.3, 0.5]}
    assert domain("double", min="0.15", max="0.5", step="0.1") == {"choice": [0.15, 0.25, 0.35, 0.45]}
    assert domain("double", min="0.001", max="0.1", distribution="logUniform") == {"loguniform": [0.001, 0.1]}
    assert domain("double", min="0", max="6", distribution="normal") == {"randn": [3.0, 1.0]}
    assert domain("double", min="1", max="1") == 1.0
    assert domain("categorical", list=["sgd", "adam"]) == {"choice": ["sgd", "adam"]}
    assert domain("discrete", list=["1", "0.5", "1e-3"]) == {"choice": [1, 0.5, "1e-3"]}  # the command's words
    with pytest.raises(KatibConversionError, match="min and max are required"):
        domain("double", min="1")
    with pytest.raises(KatibConversionError, match="needs min above 0"):
        domain("double", min="0", max="1", distribution="logUniform")
    katib = _random()
    katib["spec"]["algorithm"]["algorithmName"] = "grid"
    with pytest.raises(KatibConversionError, match="a grid needs a step for a double parameter"):
        convert(katib)


def test_counts_and_katibs_defaults():
    katib = _random()
    del katib["spec"]["parallelTrialCount"]
    katib["spec"]["maxFailedTrialCount"] = 0
    conversion = convert(katib)
    spec = conversion.experiment["spec"]
    assert (spec["maxConcurrentTrials"], spec["numSamples"], spec["failure"]) == (3, 12, {"maxFailedTrials": 0})
    assert any(n.katib == "spec.parallelTrialCount" and "3" in n.text for n in conversion.notes)
    del katib["spec"]["maxTrialCount"]
    with pytest.raises(KatibConversionError, match="maxTrialCount: missing"):
        convert(katib)


def test_the_pod_maps_to_the_template_and_what_it_cannot_hold_is_noted():
    katib = _random()
    pod = katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]
    pod.update(
        nodeSelector={"gpu": "l4"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
        hostNetwork=True,
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    primary = pod["containers"][0]
    primary.update(
        env=[{"name": "LR", "value": "${trialParameters.learningRate}"}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        workingDir="/opt",
        resources={"limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": 1}},
    )
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    pod["containers"].append({"name": "proxy", "image": "envoy:1", "securityContext": restricted})
    katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["backoffLimit"] = 2
    conversion = convert(katib)
    spec = conversion.experiment["spec"]
    assert spec["template"] == {
        "nodeSelector": {"gpu": "l4"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [{"name": "proxy", "image": "envoy:1", "securityContext": restricted}],
        "env": [{"name": "LR", "value": "${config.lr}"}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    assert spec["resourcesPerTrial"] == {"cpu": "2", "memory": "2Gi", "gpu": 1}
    assert spec["failure"]["maxFailures"] == 2
    dropped = {n.katib for n in conversion.notes if not n.target}
    assert "spec.trialTemplate.trialSpec.spec.template.spec.hostNetwork" in dropped
    assert "spec.trialTemplate.trialSpec.spec.template.spec.containers[training-container].workingDir" in dropped
    text = conversion.to_yaml()
    assert "hostNetwork: dropped" in text and "workingDir: dropped" in text
    _accepted(conversion.experiment)


def test_the_trials_metadata_katib_substitutes_is_the_trials_own_or_the_trial_specs_values():
    (conversion,) = convert_text((DATA / "trial-template/trial-metadata-substitution.yaml").read_text(), "x")
    experiment = conversion.experiment
    experiment["metadata"].update(namespace="team-a", uid="u-1")
    trial = trial_object("team-a", "trial-metadata-substitution-00003", "u-1", 3, {"lr": 0.02, "momentum": 0.7})
    pod = build_pod(experiment, trial, 0, Settings())
    (container,) = pod["spec"]["containers"]
    assert {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("TRIAL_")} == {
        "TRIAL_NAME": "trial-metadata-substitution-00003",  # Katib's ${trialSpec.Name}: the trial's Job's name
        "TRIAL_NAMESPACE": "team-a",
        "TRIAL_KIND": "Job",
        "TRIAL_API_VERSION": "batch/v1",
        "TRIAL_LABEL_CUSTOM": "custom-label",
        "TRIAL_ANNOTATION_CUSTOM": "custom-annotation",
    }
    assert "--lr=0.02" in container["command"]
    assert any("the trial's metadata" in note.text for note in conversion.notes)
    katib = _katib("trial-template/trial-metadata-substitution.yaml")
    katib["spec"]["trialTemplate"]["trialParameters"][-1]["reference"] = "${trialSpec.Annotations[absent]}"
    with pytest.raises(KatibConversionError, match=r"Annotations\[absent\].*neither a parameter"):
        convert(katib)


def test_what_kubetune_cannot_substitute_or_katib_does_not_have_is_refused():
    katib = _random()
    pod = katib["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"lr": "${trialParameters.learningRate}"}
    with pytest.raises(KatibConversionError, match="outside the primary container's command"):
        convert(katib)
    katib = _random()
    _primary(katib)["command"].append("--x=${trialParameters.nope}")
    with pytest.raises(KatibConversionError, match="names no item of trialTemplate.trialParameters"):
        convert(katib)
    katib = _random()
    katib["spec"]["surprise"] = 1
    with pytest.raises(KatibConversionError, match="does not have: surprise"):
        convert(katib)
    katib = _random()
    del _primary(katib)["command"]
    with pytest.raises(KatibConversionError, match="write the entrypoint as command"):
        convert(katib)
    with pytest.raises(KatibConversionError, match="not a Katib Experiment"):
        convert({"apiVersion": "v1", "kind": "Pod"})


def test_a_file_of_several_documents_converts_each_and_names_the_one_refused():
    text = (DATA / "hp-tuning/random.yaml").read_text() + (DATA / "hp-tuning/grid.yaml").read_text()
    assert [c.source for c in convert_text(text)] == ["random", "grid"]
    with pytest.raises(KatibConversionError, match=r"two.yaml \(document 2\): .*r_l and resource_name must be set"):
        convert_text(text.replace("algorithmName: grid", "algorithmName: hyperband"), "two.yaml")


def test_the_command_writes_one_file_per_experiment_or_stdout(tmp_path, capsys):
    files = [str(DATA / "hp-tuning/random.yaml"), str(DATA / "metrics-collector/file-metrics-collector.yaml")]
    assert main(["convert", "katib", *files, "-o", str(tmp_path / "out")]) == 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["file-metrics-collector.yaml", "random.yaml"]
    assert yaml.safe_load((tmp_path / "out" / "random.yaml").read_text())["kind"] == "Experiment"
    capsys.readouterr()
    assert main(["convert", "katib", *files]) == 0
    out = capsys.readouterr().out
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(io.StringIO(out))] == ["random", "file-metrics-collector"]
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert main(["convert", "katib", files[0], str(pod), "-o", str(tmp_path / "none")]) == 2
    assert "pod.yaml (document 1): not a Katib Experiment" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()  # nothing written unless every document converts


def test_the_example_of_docs_katib_md_is_what_the_command_writes():
    block = re.findall(r"```yaml\n(.*?)```", (DOCS / "katib.md").read_text(), re.S)[0]
    assert block == convert_text((DATA / "early-stopping/median-stop.yaml").read_text())[0].to_yaml()


def test_conversion_does_not_change_its_input():
    katib = _random()
    before = copy.deepcopy(katib)
    convert(katib)
    assert katib == before


# ----- Katib's hyperband: the katib-hyperband searcher (tests/unit/test_katib_hyperband.py plays it) -----


def test_katibs_example_converts_to_katib_hyperband_and_runs_its_first_rung():
    """Katib's hyperband.yaml: maxTrialCount 2 stops it after bracket 1's first rung, as in Katib."""
    experiment = convert(yaml.safe_load((DATA / "hp-tuning/hyperband.yaml").read_text())).experiment
    spec = experiment["spec"]
    search = spec["searchAlgorithm"]
    assert search == {"name": "katib-hyperband", "params": {"resource_name": "num-epochs", "r_l": 2, "eta": 2}}
    searcher = create_searcher(
        search["name"], spec["config"], spec["metric"], spec["mode"], spec["numSamples"], 5, **search["params"]
    )
    first = [searcher.suggest(f"t{i}") for i in range(2)]
    assert [c["num-epochs"] for c in first] == [1, 1]
    assert searcher.suggest("t2") == FINISHED


def katib_example(settings: dict | None = None, **spec) -> dict:
    """Katib's hyperband.yaml with its algorithm settings replaced by ``settings`` (None: removed) and ``spec``
    fields set (None: removed)."""
    katib = yaml.safe_load((DATA / "hp-tuning/hyperband.yaml").read_text())
    if settings is not None:
        katib["spec"]["algorithm"]["algorithmSettings"] = [{"name": k, "value": v} for k, v in settings.items()]
    for key, value in spec.items():
        if value is None:
            katib["spec"].pop(key, None)
        else:
            katib["spec"][key] = value
    return katib


EXAMPLE = {"resource_name": "num-epochs", "eta": "2", "r_l": "2"}


@pytest.mark.parametrize(
    "settings, spec, message",
    [
        ({"resource_name": "num-epochs"}, {}, r"r_l and resource_name must be set"),
        ({"r_l": "9"}, {}, r"r_l and resource_name must be set"),
        ({**EXAMPLE, "r_l": "ten"}, {}, r"algorithmSettings\[r_l\]: 'ten' is not a number"),
        ({**EXAMPLE, "r_l": "0.5"}, {}, r"r_l\]: 0.5 is below 1"),
        ({**EXAMPLE, "resource_name": "epochs"}, {}, r"'epochs': value of resource_name setting must be in parameters"),
        ({**EXAMPLE, "eta": "1"}, {}, r"eta\]: 1 is not a whole number >= 2"),
        ({**EXAMPLE, "eta": "2.5"}, {}, r"eta\]: 2.5 is not a whole number >= 2"),
        (
            {**EXAMPLE, "r_l": "9", "eta": "3"},
            {"parallelTrialCount": 8},
            r"parallelTrialCount: 8: must be not less than 9",
        ),
        ({**EXAMPLE, "r_l": "9", "eta": "3"}, {"parallelTrialCount": None}, r"parallelTrialCount: 3: .*less than 9"),
        ({**EXAMPLE, "current_s": "0"}, {}, r"current_s: the state Katib's hyperband service writes back"),
    ],
)
def test_the_converter_refuses_settings_as_katib_validates_them(settings, spec, message):
    with pytest.raises(KatibConversionError, match=message):
        convert(katib_example(settings, **spec))


def test_the_converter_takes_katibs_default_eta_and_counts_the_trials_without_max_trial_count():
    conversion = convert(katib_example({**EXAMPLE, "eta": "0", "r_l": "9"}, parallelTrialCount=9, maxTrialCount=None))
    spec = conversion.experiment["spec"]
    assert spec["searchAlgorithm"]["params"] == {"resource_name": "num-epochs", "r_l": 9, "eta": 3}
    assert spec["numSamples"] == 23 == total_trials(9, 3)
    notes = {n.katib: n.text for n in conversion.notes}
    assert "takes 3" in notes["spec.algorithm.algorithmSettings[eta]"]
    assert "every trial of its brackets" in notes["spec.maxTrialCount"]
    assert "each rung's budget" in notes["spec.parameters[num-epochs]"]
    text = conversion.to_yaml()
    assert "katib-hyperband: 23 trials in 3 brackets" in " ".join(text.split())
    no_eta = convert(katib_example({"resource_name": "num-epochs", "r_l": "9"}, parallelTrialCount=9)).experiment
    assert no_eta["spec"]["searchAlgorithm"]["params"]["eta"] == 3


@pytest.mark.parametrize(
    "strategy, scope",
    [(None, "all"), ("min", "all"), ("latest", None)],
)
def test_the_objectives_strategy_is_how_trials_are_ranked_as_in_katib(strategy, scope):
    """Katib ranks a trial by its objective's strategy, by default the objective's own direction (the min of a
    minimized loss): the best value at any iteration, bestTrialScope all; ``latest`` is kubetune's default."""
    katib = _katib("hp-tuning/random.yaml")
    katib["spec"]["objective"] = {"type": "minimize", "objectiveMetricName": "loss"}
    if strategy:
        katib["spec"]["objective"]["metricStrategies"] = [{"name": "loss", "value": strategy}]
    conversion = convert(katib)
    assert conversion.experiment["spec"].get("bestTrialScope") == scope
    assert not [n for n in conversion.notes if n.katib == "spec.objective.metricStrategies"]
    _accepted(conversion.experiment)


def test_a_strategy_against_the_objective_is_refused_and_other_metrics_strategies_are_noted():
    katib = _katib("hp-tuning/random.yaml")
    katib["spec"]["objective"] = {
        "type": "minimize",
        "objectiveMetricName": "loss",
        "additionalMetricNames": ["accuracy"],
        "metricStrategies": [{"name": "loss", "value": "max"}],
    }
    with pytest.raises(KatibConversionError, match=r"metricStrategies: 'max' for loss, whose objective is to minim"):
        convert(katib)
    katib["spec"]["objective"]["metricStrategies"] = [{"name": "accuracy", "value": "max"}]
    (note,) = [n for n in convert(katib).notes if n.katib == "spec.objective.metricStrategies"]
    assert "dropped for accuracy" in note.text and "status.metricRange" in note.text
