"""Katib's ``kubeflow.org/v1beta1`` Experiments rewritten as native kubetune Experiments.

Owns the field-by-field mapping from a Katib Experiment to a kubetune ``kubetune.io/v1alpha1`` Experiment with a
container trial (``spec.trainable.command``), and the notes that go with it: every Katib field is either mapped,
or named in a note that says what changes or why it is dropped, and each note becomes a YAML comment above the
kubetune field it concerns (or in the document's header for a dropped field). A Katib Experiment kubetune cannot
run as written (a trial kind other than a batch/v1 Job, a collector kubetune has not, an algorithm whose
schedulers container trials refuse) is refused with the reason, as :class:`KatibConversionError`.
Called by ``kubetune convert katib`` (:mod:`kubetune.sdk.cli`); docs/katib.md has the mapping table.
Uses ruamel.yaml (the ``sdk`` extra) to write YAML with comments, imported only to read or write YAML: the
operator, which serves Katib's API with :func:`convert` (``kubetune_operator.katib_api``), has no ruamel.
"""

from __future__ import annotations

import io
import json
import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from kubetune.search.katib_hyperband import DEFAULT_ETA, max_bracket, plan, total_trials

__all__ = ["Conversion", "KatibConversionError", "Note", "convert", "convert_text"]

KATIB_API_VERSION = "kubeflow.org/v1beta1"
#: Katib's defaults (experiment_defaults.go).
DEFAULT_PARALLEL_TRIALS = 3
DEFAULT_PRIMARY_CONTAINER = "training-container"
#: The algorithm settings Katib's hyperband service writes back into its Suggestion (HyperBandParam.generate):
#: its state, which an Experiment that sets them starts from.
_HYPERBAND_STATE = {"s_max", "b_l", "n", "r", "current_s", "current_i", "evaluating_trials"}
_WIDTH = 118
_KATIB_REFERENCE = re.compile(r"\$\{trialParameters\.([^}]*)\}")
#: Katib's references to the trial's own name and namespace, and kubetune's for them (docs/api.md).
_TRIAL_METADATA = {"${trialSpec.Name}": "${trial.name}", "${trialSpec.Namespace}": "${trial.namespace}"}
#: Pod fields kubetune's spec.template has under the same name.
_POD_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "runtimeClassName",
    "serviceAccountName",
    "schedulingGates",
    "imagePullSecrets",
    "securityContext",
    "volumes",
)
#: The fields of Katib's ExperimentSpec this module reads (nasConfig is refused).
_SPEC_FIELDS = {
    "parameters",
    "objective",
    "algorithm",
    "earlyStopping",
    "parallelTrialCount",
    "maxTrialCount",
    "maxFailedTrialCount",
    "trialTemplate",
    "metricsCollectorSpec",
    "resumePolicy",
}
#: The order of the converted spec's fields: the trial, the space, the objective, the search, the limits, the pod.
_ORDER = (
    "image",
    "trainable",
    "metricsCollector",
    "config",
    "numSamples",
    "metric",
    "mode",
    "goal",
    "bestTrialScope",
    "searchAlgorithm",
    "scheduler",
    "maxConcurrentTrials",
    "failure",
    "resourcesPerTrial",
    "podRetentionPolicy",
    "template",
)
#: Katib's algorithms that kubetune runs as Optuna samplers: sampler, fixed sampler_args, and the Katib
#: settings that map to sampler_args (Katib's name -> Optuna's).
_OPTUNA = {
    "tpe": ("tpe", {}, {"n_EI_candidates": "n_ei_candidates", "prior_weight": "prior_weight"}),
    "multivariate-tpe": (
        "tpe",
        {"multivariate": True},
        {"n_startup_trials": "n_startup_trials", "n_ei_candidates": "n_ei_candidates"},
    ),
    "cmaes": ("cmaes", {}, {}),
    "sobol": ("qmc", {"qmc_type": "sobol"}, {}),
    "bayesianoptimization": ("tpe", {}, {"n_initial_points": "n_startup_trials"}),
}
_INT_ARGS = {"n_ei_candidates", "n_startup_trials"}


class KatibConversionError(ValueError):
    """The document cannot be converted: not a Katib Experiment, a malformed field, or a feature kubetune cannot
    run as written. The message names the field and says why."""


@dataclass
class Note:
    """What became of one Katib field.

    Attributes:
        katib: the Katib field, as a path (``spec.objective.metricStrategies``).
        text: what changes, or why the field is dropped.
        target: the kubetune field the note is written above, as a tuple of keys; empty for a dropped field
            (the note goes in the document's header).
    """

    katib: str
    text: str
    target: tuple[str, ...] = ()


@dataclass
class Conversion:
    """A converted Experiment with its notes.

    Attributes:
        experiment: the kubetune Experiment (plain JSON-like values).
        notes: what changed or was dropped, one note per Katib field concerned.
        source: the Katib Experiment's name, for messages.
    """

    experiment: dict
    notes: list[Note] = field(default_factory=list)
    source: str = ""

    def to_yaml(self) -> str:
        """The Experiment as YAML, each note a comment above its field or in the header.

        Returns:
            One YAML document (no ``---``).
        """
        doc = _commented(self.experiment)
        header = [f"Converted from Katib's Experiment {self.source} by `kubetune convert katib` (docs/katib.md)."]
        header += [f"{n.katib}: {n.text}" for n in self.notes if not n.target]
        doc.yaml_set_start_comment("\n".join(line for text in header for line in _wrap(text, 0)))
        above: dict[tuple[str, ...], list[str]] = {}
        for note in self.notes:
            if note.target:
                above.setdefault(note.target, []).append(f"{note.katib}: {note.text}")
        for path, texts in above.items():
            _comment_above(doc, path, texts)
        out = io.StringIO()
        _yaml().dump(doc, out)
        return out.getvalue()


def _yaml():
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = _WIDTH
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _commented(value: Any, parent_key: str = "") -> Any:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, dict):
        out = CommentedMap((k, _commented(v, k)) for k, v in value.items())
        if parent_key in ("config",):  # a parameter per line, its domain in flow style
            for v in out.values():
                if isinstance(v, CommentedMap):
                    v.fa.set_flow_style()
        return out
    if isinstance(value, list):
        return CommentedSeq(_commented(v) for v in value)
    return value


def _wrap(text: str, indent: int) -> list[str]:
    return textwrap.wrap(text, width=_WIDTH - indent - 2, subsequent_indent="  ", break_on_hyphens=False)


def _comment_above(doc: Any, path: tuple[str, ...], texts: list[str]) -> None:
    node = doc
    for key in path[:-1]:
        node = node[key]
    indent = 2 * (len(path) - 1)
    lines = [line for text in texts for line in _wrap(text, indent)]
    node.yaml_set_comment_before_after_key(path[-1], before="\n".join(lines), indent=indent)


def convert_text(text: str, source: str = "<input>") -> list[Conversion]:
    """Convert every Katib Experiment of a YAML stream (documents separated by ``---``).

    Args:
        text: the file's content.
        source: the file's name, for messages.

    Returns:
        One :class:`Conversion` per non-empty document, in order.

    Raises:
        KatibConversionError: the text is not YAML, holds no document, or a document is not a Katib Experiment
            or cannot be converted (the message names the file and the document's position).
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        docs = [d for d in YAML(typ="safe").load_all(text) if d is not None]
    except YAMLError as exc:
        raise KatibConversionError(f"{source}: not YAML: {' '.join(str(exc).split())}") from None
    if not docs:
        raise KatibConversionError(f"{source}: no YAML document")
    out = []
    for number, doc in enumerate(docs, 1):
        try:
            out.append(convert(doc))
        except KatibConversionError as exc:
            raise KatibConversionError(f"{source} (document {number}): {exc}") from None
    return out


def convert(katib: Any) -> Conversion:
    """Convert one Katib Experiment.

    Args:
        katib: the Katib Experiment as loaded from YAML or JSON.

    Returns:
        The kubetune Experiment and the notes.

    Raises:
        KatibConversionError: ``katib`` is not a ``kubeflow.org/v1beta1`` Experiment, a field is malformed, or it
            uses what kubetune cannot run as written (the message says which field and why).
    """
    if not isinstance(katib, dict) or katib.get("kind") != "Experiment" or katib.get("apiVersion") != KATIB_API_VERSION:
        found = f"{katib.get('apiVersion')} {katib.get('kind')}" if isinstance(katib, dict) else type(katib).__name__
        raise KatibConversionError(f"not a Katib Experiment ({KATIB_API_VERSION} Experiment): found {found}")
    return _Converter(katib).run()


def _number(text: Any, what: str, integer: bool = False) -> float | int:
    try:
        value = int(str(text)) if integer else float(str(text))
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise KatibConversionError(f"{what}: {text!r} is not {kind}") from None
    if not math.isfinite(value):
        raise KatibConversionError(f"{what}: {text!r} is not a finite number")
    return value


def _list_value(text: Any) -> Any:
    """A ``discrete`` value as the number whose JSON text is Katib's string (so the command gets the same
    word), else the string itself."""
    text = str(text)
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if json.dumps(value) == text:
            return value
    return text


def _decimals(*texts: str) -> int:
    return max((len(t.split(".")[1]) if "." in t and "e" not in t.lower() else 0) for t in texts)


def _is_multiple(value: float, step: float) -> bool:
    return math.isclose(value / step, round(value / step), abs_tol=1e-9)


class _Converter:
    def __init__(self, katib: dict):
        self.katib = katib
        self.spec = katib.get("spec")
        if not isinstance(self.spec, dict):
            raise KatibConversionError("spec: missing")
        self.notes: list[Note] = []
        self.out: dict[str, Any] = {}
        self.algorithm = ((self.spec.get("algorithm") or {}).get("algorithmName")) or ""
        self.hyperband_plan: tuple[float, int] | None = None  # (r_l, eta) of Katib's hyperband

    def note(self, katib: str, text: str, *target: str) -> None:
        self.notes.append(Note(katib, text, tuple(target)))

    def run(self) -> Conversion:
        meta = self.katib.get("metadata") or {}
        if not meta.get("name"):
            raise KatibConversionError("metadata.name: missing (a generateName is not converted)")
        metadata = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}
        for key in sorted(set(meta) - {"name", "namespace", "labels", "annotations"}):
            self.note(f"metadata.{key}", "dropped: the API server sets it")
        for key in sorted(set(self.katib) - {"apiVersion", "kind", "metadata", "spec"}):
            self.note(key, "dropped: the operator writes a kubetune Experiment's status")
        if self.spec.get("nasConfig"):
            raise KatibConversionError("spec.nasConfig: neural architecture search (ENAS, DARTS) has no kubetune form")
        unknown = sorted(set(self.spec) - _SPEC_FIELDS - {"nasConfig"})
        if unknown:
            raise KatibConversionError(f"spec: fields Katib's v1beta1 Experiment does not have: {', '.join(unknown)}")
        self.trial_template()
        self.metrics_collector()
        self.parameters()
        self.objective()
        self.search()
        self.early_stopping()
        self.counts()
        self.resume_policy()
        spec = {k: self.out[k] for k in _ORDER if k in self.out}
        experiment = {"apiVersion": "kubetune.io/v1alpha1", "kind": "Experiment", "metadata": metadata, "spec": spec}
        return Conversion(experiment, self.notes, meta["name"])

    # ----- parameters ---------------------------------------------------------------------------------------------
    def parameters(self) -> None:
        params = self.spec.get("parameters")
        if not isinstance(params, list) or not params:
            raise KatibConversionError("spec.parameters: missing or empty")
        config: dict[str, Any] = {}
        for index, param in enumerate(params):
            where = f"spec.parameters[{index}]"
            name = (param or {}).get("name")
            if not name or not isinstance(name, str):
                raise KatibConversionError(f"{where}.name: missing")
            if "." in name:
                raise KatibConversionError(
                    f"{where}.name: {name!r} has a dot, which kubetune's ${{config.NAME}} reads as a nested key"
                )
            config[name] = self.domain(param, f"spec.parameters[{name}]")
        self.out["config"] = config

    def domain(self, param: dict, where: str) -> Any:
        kind = param.get("parameterType")
        space = param.get("feasibleSpace") or {}
        name = param["name"]
        target = ("spec", "config", name)
        grid = self.algorithm == "grid"
        if kind in ("categorical", "discrete"):
            values = space.get("list")
            if not isinstance(values, list) or not values:
                raise KatibConversionError(f"{where}.feasibleSpace.list: missing for a {kind} parameter")
            values = [str(v) for v in values] if kind == "categorical" else [_list_value(v) for v in values]
            return {"grid_search" if grid else "choice": values}
        if kind not in ("double", "int"):
            raise KatibConversionError(f"{where}.parameterType: {kind!r} is not double, int, discrete or categorical")
        integer = kind == "int"
        if "min" not in space or "max" not in space:
            raise KatibConversionError(f"{where}.feasibleSpace: min and max are required for a {kind} parameter")
        low = _number(space["min"], f"{where}.feasibleSpace.min", integer)
        high = _number(space["max"], f"{where}.feasibleSpace.max", integer)
        if low > high:
            raise KatibConversionError(f"{where}.feasibleSpace: min {low} is above max {high}")
        step = space.get("step") or None
        step = _number(step, f"{where}.feasibleSpace.step", integer) if step is not None else None
        if step is not None and step <= 0:
            raise KatibConversionError(f"{where}.feasibleSpace.step: must be above 0, got {step}")
        distribution = space.get("distribution") or "uniform"
        if distribution not in ("uniform", "logUniform", "normal", "logNormal"):
            raise KatibConversionError(f"{where}.feasibleSpace.distribution: {distribution!r} is not Katib's")
        if low == high:
            self.note(where, "min equals max: a constant", *target)
            return low
        if grid:
            if distribution != "uniform":
                self.note(
                    f"{where}.feasibleSpace.distribution", "dropped: a grid takes every step, as Katib's", *target
                )
            return {"grid_search": self.steps(low, high, step, integer, space, where)}
        if distribution in ("normal", "logNormal"):
            return self.bell(low, high, step, integer, distribution, where, target)
        log = distribution == "logUniform"
        if log and low <= 0:
            raise KatibConversionError(f"{where}.feasibleSpace.min: a logUniform parameter needs min above 0")
        if integer:
            if step is None or step == 1:
                return {"lograndint" if log else "randint": [low, high + 1]}  # Katib's max is included
            if low % step == 0:
                return {"qlograndint" if log else "qrandint": [low, high, step]}
        elif step is None:
            return {"loguniform" if log else "uniform": [low, high]}
        elif _is_multiple(low, step) and _is_multiple(high, step):
            return {"qloguniform" if log else "quniform": [low, high, step]}
        values = self.steps(low, high, step, integer, space, where)
        self.note(
            f"{where}.feasibleSpace.step",
            "min is not a multiple of step, which kubetune's quantized domains need: a choice of min + k*step"
            + (", drawn uniformly, not on a log scale" if log else ""),
            *target,
        )
        return {"choice": values}

    @staticmethod
    def steps(low, high, step, integer: bool, space: dict, where: str) -> list:
        if integer:
            return list(range(low, high + 1, step or 1))
        if step is None:
            raise KatibConversionError(f"{where}.feasibleSpace.step: a grid needs a step for a double parameter")
        digits = _decimals(str(space["min"]), str(space["step"]))
        count = int(math.floor((high - low) / step + 1e-9))
        return [round(low + k * step, digits) if digits else low + k * step for k in range(count + 1)]

    def bell(self, low, high, step, integer: bool, distribution: str, where: str, target: tuple) -> dict:
        if distribution == "logNormal":
            if low <= 0:
                raise KatibConversionError(f"{where}.feasibleSpace.min: a logNormal parameter needs min above 0")
            self.note(
                f"{where}.feasibleSpace.distribution",
                "logNormal: kubetune has no log-normal domain; log-uniform over [min, max] instead (changes meaning: "
                "Katib's values centre on the geometric mean and may leave [min, max])",
                *target,
            )
            if integer:
                return {"lograndint": [low, high + 1]}
            return {"loguniform": [low, high]}
        # Katib's: min and max three standard deviations out (12 digits: no 0.030000000000000002)
        mean, sd = float(f"{(low + high) / 2:.12g}"), float(f"{(high - low) / 6:.12g}")
        quantum = step if step is not None else (1 if integer else None)
        self.note(
            f"{where}.feasibleSpace.distribution",
            f"normal: N(mean {mean:g}, sd {sd:g}) as Katib's hyperopt algorithms draw it; values may leave [min, max]"
            + (" and are whole floats (3.0)" if integer else ""),
            *target,
        )
        return {"qrandn": [mean, sd, quantum]} if quantum is not None else {"randn": [mean, sd]}

    # ----- objective, search, early stopping --------------------------------------------------------------------
    def objective(self) -> None:
        objective = self.spec.get("objective") or {}
        metric, kind = objective.get("objectiveMetricName"), objective.get("type")
        if not metric:
            raise KatibConversionError("spec.objective.objectiveMetricName: missing")
        if kind not in ("minimize", "maximize"):
            raise KatibConversionError(f"spec.objective.type: {kind!r} is not minimize or maximize")
        self.out["metric"], self.out["mode"] = metric, "min" if kind == "minimize" else "max"
        if objective.get("goal") is not None:
            self.out["goal"] = _number(objective["goal"], "spec.objective.goal")
        extra = objective.get("additionalMetricNames") or []
        if extra:
            self.note(
                "spec.objective.additionalMetricNames",
                f"{', '.join(extra)}: no field needed, every metric a trial prints is recorded in its results",
                "spec",
                "metric",
            )
        strategies = {s.get("name"): s.get("value") for s in objective.get("metricStrategies") or []}
        strategy = strategies.get(metric) or self.out["mode"]  # Katib's default: the objective's own direction
        if strategy == self.out["mode"]:  # the best value at any iteration, as Katib ranks by default
            self.out["bestTrialScope"] = "all"
        elif strategy != "latest":
            raise KatibConversionError(
                f"spec.objective.metricStrategies: {strategy!r} for {metric}, whose objective is to {kind} it: "
                f"kubetune ranks a trial by its best {metric} value at any iteration (bestTrialScope all, the "
                f"strategy {self.out['mode']!r}) or by its last one ('latest'), not by its worst"
            )
        others = sorted(k for k in strategies if k != metric)
        if others:
            self.note(
                "spec.objective.metricStrategies",
                f"dropped for {', '.join(others)}: only the objective's strategy ranks trials (as in Katib); each "
                "Trial's status.metricRange has every metric's least and greatest value",
            )

    def search(self) -> None:
        algorithm = self.spec.get("algorithm") or {}
        name = self.algorithm
        settings = {s.get("name"): s.get("value") for s in algorithm.get("algorithmSettings") or []}
        where = "spec.algorithm"
        if name == "pbt":
            raise KatibConversionError(
                f"{where}.algorithmName: pbt is Katib's generations of trials, each handed its parent's folder on a "
                "volume at suggestion_trial_dir; kubetune's pbt scheduler (Ray's) restores a donor's checkpoint "
                "folder itself, which the container asks to save by writing .kubetune-save in it: the trial's "
                "program must change, so the file is not converted (docs/api.md, 'Checkpoints of a container trial')"
            )
        seed = settings.pop("random_state", None)
        search: dict[str, Any] = {}
        if name == "hyperband":
            search = self.hyperband(settings, where)
        elif name in ("random", "grid"):
            search["name"] = "basic"
            if name == "grid":
                self.note(
                    f"{where}.algorithmName",
                    "grid: grid_search domains, crossed by the basic searcher (every point runs once)",
                    "spec",
                    "searchAlgorithm",
                )
        elif name in _OPTUNA:
            sampler, fixed, names = _OPTUNA[name]
            args = dict(fixed)
            for katib_name, optuna_name in names.items():
                if katib_name in settings:
                    value = settings.pop(katib_name)
                    kind = int if optuna_name in _INT_ARGS else float
                    args[optuna_name] = kind(_number(value, f"{where}.algorithmSettings[{katib_name}]"))
            search = {"name": "optuna", "params": {"sampler": sampler, **({"sampler_args": args} if args else {})}}
            if name == "bayesianoptimization":
                self.note(
                    f"{where}.algorithmName",
                    "bayesianoptimization (scikit-optimize's Gaussian process) has no counterpart the operator runs "
                    "(Optuna's GP sampler needs PyTorch); Optuna's TPE, another model-based sampler, instead",
                    "spec",
                    "searchAlgorithm",
                )
        else:
            raise KatibConversionError(f"{where}.algorithmName: {name!r} is not an algorithm Katib ships")
        if seed is not None:
            search["seed"] = int(_number(seed, f"{where}.algorithmSettings[random_state]", integer=True))
        for key, value in sorted(settings.items()):
            self.note(
                f"{where}.algorithmSettings[{key}]",
                f"{value!r} dropped: no setting of kubetune's {search['name']} search takes it",
                "spec",
                "searchAlgorithm",
            )
        self.out["searchAlgorithm"] = search

    def hyperband(self, settings: dict, where: str) -> dict:
        """Katib's hyperband as searcher ``katib-hyperband``, its settings checked as Katib's
        ``ValidateAlgorithmSettings`` checks them (and taken from ``settings``)."""
        state = sorted(set(settings) & _HYPERBAND_STATE)
        if state:
            raise KatibConversionError(
                f"{where}.algorithmSettings: {', '.join(state)}: the state Katib's hyperband service writes back "
                "into its Suggestion, not a setting of the Experiment (Katib would start from it); remove it"
            )
        if "r_l" not in settings or "resource_name" not in settings:
            raise KatibConversionError(f"{where}.algorithmSettings: r_l and resource_name must be set (hyperband)")
        r_l = _number(settings.pop("r_l"), f"{where}.algorithmSettings[r_l]")
        if r_l < 1:
            raise KatibConversionError(
                f"{where}.algorithmSettings[r_l]: {r_l:g} is below 1: the largest budget gives each trial "
                "int(r_l * eta**-s) of the resource, 0 below 1 (Katib's service fails at log(0) for 0)"
            )
        eta = _number(settings.pop("eta", DEFAULT_ETA), f"{where}.algorithmSettings[eta]")
        if eta <= 0:
            self.note(
                f"{where}.algorithmSettings[eta]",
                f"{eta:g}: Katib's hyperband takes 3 for an eta of 0 or below; so does kubetune",
                "spec",
                "searchAlgorithm",
            )
            eta = DEFAULT_ETA
        if not float(eta).is_integer() or eta < 2:
            raise KatibConversionError(
                f"{where}.algorithmSettings[eta]: {eta:g} is not a whole number >= 2 (Katib checks "
                "parallelTrialCount with int(eta) but runs the float, and divides by log(eta), 0 for 1)"
            )
        eta = int(eta)
        resource = settings.pop("resource_name")
        if resource not in self.out["config"]:
            raise KatibConversionError(
                f"{where}.algorithmSettings[resource_name]: {resource!r}: value of resource_name setting must be "
                "in parameters"
            )
        parallel = self.spec.get("parallelTrialCount")
        parallel = DEFAULT_PARALLEL_TRIALS if parallel is None else _number(parallel, "spec.parallelTrialCount", True)
        try:
            least = eta ** max_bracket(r_l, eta)
        except ValueError as exc:
            raise KatibConversionError(f"{where}.algorithmSettings: {exc}") from None
        if parallel < least:
            raise KatibConversionError(
                f"spec.parallelTrialCount: {parallel}: must be not less than {least} for hyperband (Katib's rule: "
                "eta ** s_max, the size of its first bracket)"
            )
        r_l = int(r_l) if float(r_l).is_integer() else r_l
        self.hyperband_plan = (r_l, eta)
        budgets = ", ".join(str(b) for b in sorted({rung.resource for bracket in plan(r_l, eta) for rung in bracket}))
        self.note(
            f"{where}.algorithmName",
            f"hyperband: Katib's searcher as katib-hyperband: {total_trials(r_l, eta)} trials in "
            f"{max_bracket(r_l, eta) + 1} brackets (numSamples, Katib's maxTrialCount, may stop it first), each "
            f"trial run from its start with {resource} set to its budget; a rung's best are copied once all its "
            "trials ended, ranked by their last value. Each "
            "bracket's first rung has the formula's size, where Katib's takes as many configs as it was asked "
            "for then (its free slots, the same for the first bracket when parallelTrialCount is eta ** s_max)",
            "spec",
            "searchAlgorithm",
        )
        self.note(
            f"spec.parameters[{resource}]",
            f"the resource parameter: katib-hyperband sets it to each rung's budget ({budgets}), as Katib "
            "does, whatever its feasibleSpace",
            "spec",
            "config",
            resource,
        )
        return {"name": "katib-hyperband", "params": {"resource_name": resource, "r_l": r_l, "eta": eta}}

    def early_stopping(self) -> None:
        early = self.spec.get("earlyStopping")
        if not early:
            return
        name = early.get("algorithmName")
        if name != "medianstop":
            raise KatibConversionError(f"spec.earlyStopping.algorithmName: {name!r} is not medianstop, Katib's only")
        settings = {s.get("name"): s.get("value") for s in early.get("algorithmSettings") or []}
        unknown = sorted(set(settings) - {"min_trials_required", "start_step"})
        if unknown:
            raise KatibConversionError(f"spec.earlyStopping.algorithmSettings: {', '.join(unknown)} unknown to Katib")
        where = "spec.earlyStopping.algorithmSettings"
        required = _number(settings.get("min_trials_required", 3), f"{where}[min_trials_required]", integer=True)
        start = _number(settings.get("start_step", 4), f"{where}[start_step]", integer=True)
        if required < 1:  # Katib's own checks, with its words
            raise KatibConversionError(f"{where}[min_trials_required]: must be greater than zero (>0)")
        if start < 1:
            raise KatibConversionError(f"{where}[start_step]: must be greater or equal than one (>=1)")
        self.out["scheduler"] = {
            "name": "katib-medianstop",
            "params": {"min_trials_required": required, "start_step": start},
        }
        if "min_trials_required" not in settings or "start_step" not in settings:
            self.note(
                "spec.earlyStopping.algorithmSettings", "unset ones: Katib's defaults (3 and 4)", "spec", "scheduler"
            )

    def counts(self) -> None:
        parallel = self.spec.get("parallelTrialCount")
        if parallel is None:
            parallel = DEFAULT_PARALLEL_TRIALS
            self.note("spec.parallelTrialCount", "unset: Katib's default, 3", "spec", "maxConcurrentTrials")
        self.out["maxConcurrentTrials"] = _number(parallel, "spec.parallelTrialCount", integer=True)
        max_trials = self.spec.get("maxTrialCount")
        if max_trials is not None:
            max_trials = _number(max_trials, "spec.maxTrialCount", integer=True)
        if self.algorithm == "grid":
            self.out["numSamples"] = 1
            size = math.prod(len(d["grid_search"]) for d in self.out["config"].values() if isinstance(d, dict))
            if max_trials is not None and max_trials < size:
                self.note(
                    "spec.maxTrialCount",
                    f"{max_trials}: Katib stops after {max_trials} of the grid's {size} points; kubetune runs them all",
                    "spec",
                    "numSamples",
                )
        elif max_trials is None and self.hyperband_plan is not None:
            self.out["numSamples"] = total_trials(*self.hyperband_plan)
            self.note(
                "spec.maxTrialCount",
                "missing: Katib's hyperband runs until its last bracket (or the goal); numSamples is every trial of "
                "its brackets",
                "spec",
                "numSamples",
            )
        elif max_trials is None:
            raise KatibConversionError(
                "spec.maxTrialCount: missing; Katib then runs until the goal, kubetune needs a number of trials"
            )
        else:
            self.out["numSamples"] = max_trials
        failed = self.spec.get("maxFailedTrialCount")
        if failed is not None:
            failed = _number(failed, "spec.maxFailedTrialCount", integer=True)
            self.out.setdefault("failure", {})["maxFailedTrials"] = max(failed - 1, 0)
            self.note(
                "spec.maxFailedTrialCount",
                f"{failed}: Katib fails the Experiment at that many failed trials, kubetune after more than "
                "maxFailedTrials: the same limit",
                "spec",
                "failure",
            )

    def resume_policy(self) -> None:
        policy = self.spec.get("resumePolicy")
        if policy in (None, "Never"):
            return
        if policy not in ("LongRunning", "FromVolume"):
            raise KatibConversionError(f"spec.resumePolicy: {policy!r} is not Never, LongRunning or FromVolume")
        self.note(
            "spec.resumePolicy",
            f"{policy} dropped: kubetune keeps the search's state in its own journal, so an Experiment resumes "
            "after an operator restart or a suspend without a volume",
        )

    # ----- the trial --------------------------------------------------------------------------------------------
    def trial_template(self) -> None:
        template = self.spec.get("trialTemplate")
        if not isinstance(template, dict):
            raise KatibConversionError("spec.trialTemplate: missing")
        if template.get("configMap"):
            raise KatibConversionError(
                "spec.trialTemplate.configMap: the trial's spec lives in a ConfigMap the converter cannot read; "
                "put it inline as trialSpec and convert again"
            )
        job = template.get("trialSpec")
        if not isinstance(job, dict):
            raise KatibConversionError("spec.trialTemplate.trialSpec: missing")
        if (job.get("apiVersion"), job.get("kind")) != ("batch/v1", "Job"):
            raise KatibConversionError(
                f"spec.trialTemplate.trialSpec: a {job.get('apiVersion')} {job.get('kind')} trial; kubetune's "
                "container trials are a batch/v1 Job's pod (one container), distributed trials a kubetune "
                "trainable with resourcesPerTrial.workers"
            )
        references = self.trial_parameters(template.get("trialParameters") or [], job)
        known = {"trialSpec", "trialParameters", "primaryContainerName", "primaryPodLabels", "retain"}
        known |= {"successCondition", "failureCondition", "configMap"}
        unknown = sorted(set(template) - known)
        if unknown:
            raise KatibConversionError(f"spec.trialTemplate: fields Katib does not have: {', '.join(unknown)}")
        for key in ("successCondition", "failureCondition"):
            if template.get(key):
                self.note(
                    f"spec.trialTemplate.{key}",
                    f"{template[key]!r} dropped: a container trial succeeds when its container exits 0 having "
                    "printed the metric, and fails otherwise (what Katib's default conditions read from a Job)",
                )
        if template.get("primaryPodLabels"):
            self.note("spec.trialTemplate.primaryPodLabels", "dropped: kubetune labels the trial's pod itself")
        if template.get("retain"):
            self.out["podRetentionPolicy"] = {"whenSucceeded": "Retain", "whenFailed": "Retain"}
            self.note(
                "spec.trialTemplate.retain",
                "true: the trial pods are kept (they go with the Experiment)",
                "spec",
                "podRetentionPolicy",
            )
        self.job(job, template.get("primaryContainerName") or DEFAULT_PRIMARY_CONTAINER, references)

    def trial_parameters(self, items: list, job: dict) -> dict[str, str]:
        """Each trialParameters name with what replaces ``${trialParameters.NAME}``: ``${config.PARAMETER}`` for a
        parameter, ``${trial.name}``/``${trial.namespace}`` for the trial's Job's name and namespace, the trialSpec's
        own value for its ``Kind``, ``APIVersion``, ``Labels[key]`` and ``Annotations[key]`` (what Katib reads from
        the Job it makes of the trialSpec)."""
        names = {p.get("name") for p in self.spec.get("parameters") or [] if isinstance(p, dict)}
        meta = job.get("metadata") or {}
        literal = {"${trialSpec.Kind}": job.get("kind"), "${trialSpec.APIVersion}": job.get("apiVersion")}
        literal |= {f"${{trialSpec.Labels[{k}]}}": v for k, v in (meta.get("labels") or {}).items()}
        literal |= {f"${{trialSpec.Annotations[{k}]}}": v for k, v in (meta.get("annotations") or {}).items()}
        references, metadata = {}, []
        for index, item in enumerate(items):
            where = f"spec.trialTemplate.trialParameters[{index}]"
            name, reference = item.get("name"), item.get("reference")
            if not name:
                raise KatibConversionError(f"{where}.name: missing")
            if reference in names:
                references[name] = "${config." + reference + "}"
                continue
            if reference in _TRIAL_METADATA:
                references[name] = _TRIAL_METADATA[reference]
            elif reference in literal:
                references[name] = str(literal[reference])
            else:
                raise KatibConversionError(
                    f"{where}.reference: {reference!r} is neither a parameter of spec.parameters nor the trial's "
                    "metadata (${trialSpec.Name}, Namespace, Kind, APIVersion, or Labels[key]/Annotations[key] of "
                    "a key the trialSpec's metadata has)"
                )
            metadata.append(f"{name}: {references[name]}")
        if references:
            self.note(
                "spec.trialTemplate.trialParameters",
                "each ${trialParameters.NAME} is now ${config.PARAMETER}, the parameter it referenced"
                + (
                    f", or the trial's metadata ({'; '.join(metadata)}: the trialSpec's own values for its kind, "
                    "apiVersion, labels and annotations)"
                    if metadata
                    else ""
                )
                + "; the descriptions are dropped",
                "spec",
                "trainable",
            )
        return references

    def rewrite(self, text: str, references: dict[str, str], where: str) -> str:
        def replace(match: re.Match) -> str:
            if match.group(1) not in references:
                raise KatibConversionError(f"{where}: {match.group(0)} names no item of trialTemplate.trialParameters")
            return references[match.group(1)]

        return _KATIB_REFERENCE.sub(replace, text)

    def job(self, job: dict, primary: str, references: dict[str, str]) -> None:
        where = "spec.trialTemplate.trialSpec"
        job_spec = job.get("spec") or {}
        for key in sorted(set(job_spec) - {"template"}):
            if key == "backoffLimit":
                self.out.setdefault("failure", {})["maxFailures"] = _number(job_spec[key], f"{where}.spec.{key}", True)
                self.note(f"{where}.spec.backoffLimit", "a retried attempt is a new pod", "spec", "failure")
            else:
                self.note(f"{where}.spec.{key}", "dropped: kubetune runs each attempt as a pod, not a Job")
        pod_template = job_spec.get("template") or {}
        pod = pod_template.get("spec") or {}
        containers = pod.get("containers") or []
        main = [c for c in containers if c.get("name") == primary]
        if len(main) != 1:
            raise KatibConversionError(f"{where}: no container named {primary!r} (trialTemplate.primaryContainerName)")
        container = main[0]
        out_template: dict[str, Any] = {}
        pod_meta = pod_template.get("metadata") or {}
        for key in ("labels", "annotations"):
            if pod_meta.get(key):
                out_template[key] = pod_meta[key]
        for key in sorted(set(pod_meta) - {"labels", "annotations"}):
            self.note(f"{where}.spec.template.metadata.{key}", "dropped: kubetune names the trial pods")
        for key in _POD_FIELDS:
            if pod.get(key):
                out_template[key] = pod[key]
        for key in sorted(set(pod) - set(_POD_FIELDS) - {"containers", "restartPolicy"}):
            self.note(f"{where}.spec.template.spec.{key}", "dropped: spec.template has no such field")
        if pod.get("restartPolicy") not in (None, "Never"):
            self.note(
                f"{where}.spec.template.spec.restartPolicy",
                f"{pod['restartPolicy']} dropped: a failed attempt is retried in a new pod (failure.maxFailures)",
            )
        others = [c for c in containers if c is not container]
        if others:
            out_template["containers"] = others
            self.note(
                f"{where}.spec.template.spec.containers",
                "the containers beside the primary run beside the trial's and never hold it; each must meet the "
                "operator's Pod Security level (restricted by default: allowPrivilegeEscalation false, "
                "capabilities drop ALL), as kubetune sets it for the trial's container only",
                "spec",
                "template",
                "containers",
            )
        self.container(container, references, out_template, f"{where}.spec.template.spec.containers[{primary}]")
        if out_template:
            self.out["template"] = out_template
        left = _KATIB_REFERENCE.search(json.dumps(self.out.get("template", {})))
        if left:
            raise KatibConversionError(
                f"{where}: {left.group(0)} outside the primary container's command, args and env values, where "
                "kubetune substitutes no parameter"
            )

    def container(self, container: dict, references: dict[str, str], template: dict, where: str) -> None:
        image = container.get("image")
        if not image:
            raise KatibConversionError(f"{where}.image: missing")
        command = [str(w) for w in container.get("command") or []]
        args = [str(w) for w in container.get("args") or []]
        if not command:
            raise KatibConversionError(
                f"{where}.command: missing; Katib reads the image's entrypoint from its registry, kubetune runs the "
                "command the spec gives: write the entrypoint as command"
            )
        self.out["image"] = image
        trainable = {"command": [self.rewrite(w, references, f"{where}.command") for w in command]}
        if args:
            trainable["args"] = [self.rewrite(w, references, f"{where}.args") for w in args]
        self.out["trainable"] = trainable
        env = container.get("env") or []
        if env:
            template["env"] = [
                {**item, "value": self.rewrite(item["value"], references, f"{where}.env")} if "value" in item else item
                for item in env
            ]
        for key in ("envFrom", "volumeMounts"):
            if container.get(key):
                template[key] = container[key]
        if container.get("resources"):
            self.resources(container["resources"], f"{where}.resources")
        handled = {"name", "image", "command", "args", "env", "envFrom", "volumeMounts", "resources"}
        for key in sorted(set(container) - handled):
            why = (
                "kubetune sets the trial container's own (restricted Pod Security settings); the pod's is "
                "template.securityContext"
                if key == "securityContext"
                else "the trial container has no such field in kubetune"
            )
            self.note(f"{where}.{key}", f"dropped: {why}")

    def resources(self, resources: dict, where: str) -> None:
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        out: dict[str, Any] = {}
        cpu = requests.get("cpu", limits.get("cpu"))
        if cpu is not None:
            out["cpu"] = cpu
            if "cpu" in limits:
                becomes = "" if "cpu" in requests else "; the limit becomes the request"
                self.note(f"{where}.limits.cpu", f"kubetune requests CPUs and sets no CPU limit{becomes}")
        memory = limits.get("memory", requests.get("memory"))
        if memory is not None:
            out["memory"] = memory
            if "memory" not in limits:
                self.note(f"{where}.requests.memory", "kubetune's memory is the request and the limit: a new limit")
            elif requests.get("memory", memory) != memory:
                self.note(f"{where}.requests.memory", "dropped: kubetune's memory is the request and the limit")
        gpus = sorted(k for k in set(requests) | set(limits) if k not in ("cpu", "memory"))
        for key in gpus:
            if "/" in key and key.endswith("gpu") and "gpu" not in out:
                out["gpu"] = int(_number(limits.get(key, requests.get(key)), f"{where}.limits[{key}]", integer=True))
                if key != "nvidia.com/gpu":
                    out["gpuResourceName"] = key
            else:
                self.note(f"{where}[{key}]", "dropped: resourcesPerTrial has CPUs, memory and one GPU resource")
        if out:
            self.out["resourcesPerTrial"] = out

    def metrics_collector(self) -> None:
        spec = self.spec.get("metricsCollectorSpec") or {}
        where = "spec.metricsCollectorSpec"
        kind = (spec.get("collector") or {}).get("kind") or "StdOut"
        source = spec.get("source") or {}
        path = (source.get("fileSystemPath") or {}).get("path")
        out: dict[str, Any] = {"kind": kind}
        if kind in ("Custom", "PrometheusMetric", "None"):
            reasons = {
                "Custom": "a collector container of the user's that reports to Katib's DB manager; kubetune's sidecar "
                "reads StdOut, File, TensorFlowEvent and Push",
                "PrometheusMetric": "no collector ships for it in Katib either; kubetune has none",
                "None": "a trial without metrics cannot be compared",
            }
            raise KatibConversionError(f"{where}.collector.kind: {kind} is refused: {reasons[kind]}")
        if kind not in ("StdOut", "File", "TensorFlowEvent", "Push"):
            raise KatibConversionError(f"{where}.collector.kind: {kind!r} is not a collector Katib has")
        if source.get("httpGet"):
            raise KatibConversionError(f"{where}.source.httpGet: only PrometheusMetric reads it; kubetune has none")
        if kind in ("File", "TensorFlowEvent"):
            if not path:
                raise KatibConversionError(f"{where}.source.fileSystemPath.path: {kind} needs it")
            out["path"] = path
        elif path:
            self.note(f"{where}.source.fileSystemPath", f"dropped: {kind} reads no file")
        file_format = (source.get("fileSystemPath") or {}).get("format")
        if file_format and kind in ("File", "StdOut"):
            out["format"] = file_format
        formats = (source.get("filter") or {}).get("metricsFormat") or []
        if formats:
            if out.get("format") == "JSON" or kind == "TensorFlowEvent":
                self.note(f"{where}.source.filter.metricsFormat", f"dropped: {kind} with JSON or events reads no regex")
            else:
                out["metricsFormat"] = formats
        if kind == "Push":
            out["katibDBManager"] = True
            self.note(
                f"{where}.collector.kind",
                "Push: Katib SDK's report_metrics() reaches the trial's metrics sidecar, which serves Katib's "
                "ReportObservationLog in the pod (katibDBManager: katib-db-manager resolves to the pod itself)",
                "spec",
                "metricsCollector",
            )
        if out.get("format") == "JSON":
            self.note(
                f"{where}.source.fileSystemPath.format",
                "JSON: plain numbers are read too (Katib skips them silently)",
                "spec",
                "metricsCollector",
            )
        self.out["metricsCollector"] = out
