"""The Experiment's ``spec`` as the operator decides by it: one typed model, parsed once, with the CRD's defaults.

``SpecIntake.parse`` (``spec_intake.py``, for ``ExperimentController.update``) parses each new spec with
:meth:`ExperimentSpec.parse` (a ``ValueError`` becomes ``Ready=False``, ``InvalidSpec``) and reads every decision's
input from the model, never from the raw dict. Each default below equals the CRD's ``default:`` for the field
(``tests/unit/test_spec.py`` checks every one against ``crds/``), so an object the API server did
not default (a unit test, a stored object from an older CRD) behaves as one it did. What the pod
builder copies into manifests (``template``, ``trainable``, ``resourcesPerTrial``,
``checkpoint``) stays a dict there (:mod:`kubetune_operator.builders`).
"""

from __future__ import annotations

import json
import math
import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping

from kubetune.output_metrics import FORMATS, metrics_format_problem
from kubetune.resultkeys import check_mode, objectives, spec_objectives
from kubetune.stop_criteria import is_threshold

from .container_trials import (
    DEFAULT_PUSH_PORT,
    TRIAL_KEYS,
    checkpoint_path,
    references,
    shared_folder,
    trial_references,
)
from .status import parse_duration

RETENTION = ("Retain", "Delete")
#: ``metricsCollector.kind``: StdOut is read by the operator, the others by kubetune's metrics sidecar in the pod.
COLLECTOR_KINDS = ("StdOut", "File", "TensorFlowEvent", "Push")
#: Stoppers that can run in a multi-objective experiment: they need no metric, or name their own.
_STOPPERS_WITHOUT_METRIC = ("maximum_iteration",)
#: How the SDK writes a Python function into a spec (a pickle in storage that kubetune's runtime loads).
_PICKLED = "kubetune/pickled_function"


@dataclass(frozen=True)
class Algorithm:
    """``spec.searchAlgorithm`` or ``spec.scheduler``: a registered name and its parameters."""

    name: str
    params: dict = field(default_factory=dict)
    seed: int | None = None


@dataclass(frozen=True)
class FailurePolicy:
    """``spec.failure``."""

    max_failures: int = 0
    """Retries per trial after a failed attempt; -1: without limit."""
    max_failed_trials: int | None = None
    """The experiment fails once more than this many trials failed; None: no limit."""


@dataclass(frozen=True)
class PodRetentionPolicy:
    """``spec.podRetentionPolicy``: what becomes of an ended, recorded pod (``Retain`` or ``Delete``)."""

    when_succeeded: str = "Delete"
    when_failed: str = "Retain"

    def deletes(self, pod_phase: str) -> bool:
        """Whether an ended pod in ``pod_phase`` (``Succeeded`` or ``Failed``) is deleted."""
        return (self.when_succeeded if pod_phase == "Succeeded" else self.when_failed) == "Delete"


@dataclass(frozen=True)
class ContainerTrial:
    """``spec.trainable.command`` with ``args`` and ``spec.metricsCollector``: a trial that is the user's container,
    its results read from its output (docs/api.md, "Any container as a trial")."""

    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    kind: str = "StdOut"
    format: str = "TEXT"
    metrics_format: tuple[str, ...] = ()
    """Regexes with two groups; empty: Katib's default (``kubetune.output_metrics.KATIB_METRICS_FORMAT``)."""
    iteration_key: str | None = None
    path: str | None = None
    """``File``: the metrics file; ``TensorFlowEvent``: the event files' folder."""
    port: int = DEFAULT_PUSH_PORT
    """``Push``: the pod-local endpoint's port."""
    checkpoint_path: str | None = None
    """The checkpoint folder in the trial's container (``spec.checkpoint.path``); None: no checkpoints."""

    @property
    def sidecar_reads_metrics(self) -> bool:
        """Whether kubetune's metrics sidecar reads the metrics (every kind but ``StdOut``)."""
        return self.kind != "StdOut"

    @property
    def sidecar(self) -> bool:
        """Whether the pod has kubetune's sidecar: it reads the metrics, or saves the checkpoint folder."""
        return self.sidecar_reads_metrics or self.checkpoint_path is not None


@dataclass(frozen=True)
class ExperimentSpec:
    """What the operator decides an Experiment by. Field names are the spec's, in snake case."""

    metric: str | tuple[str, ...] | None = None
    """A result key, or the metrics of a multi-objective experiment (from ``spec.objectives``)."""
    mode: str | tuple[str, ...] | None = None
    """``max``/``min``, or one per objective."""
    config: dict = field(default_factory=dict)
    num_samples: int = 1
    search_algorithm: Algorithm = field(default_factory=lambda: Algorithm("basic"))
    scheduler: Algorithm = field(default_factory=lambda: Algorithm("fifo"))
    stop: dict = field(default_factory=dict)
    goal: float | None = None
    best_trial_scope: str = "last"
    """``spec.bestTrialScope``: ``last`` ranks trials by their last metric value, ``all`` by their best at any
    iteration (kept in each Trial's ``status.metricRange``)."""
    time_budget_s: float | None = None
    """``spec.timeBudget`` in seconds."""
    max_concurrent_trials: int | None = None
    """None: the operator's default (``trials.default_max_concurrent_trials``)."""
    failure: FailurePolicy = field(default_factory=FailurePolicy)
    pod_retention: PodRetentionPolicy = field(default_factory=PodRetentionPolicy)
    suspend: bool = False
    storage_uri: str | None = None
    stoppers: tuple = ()
    """``spec.stoppers``: ``({"name", "params"}, ...)`` (:mod:`kubetune_operator.builtin_stoppers`)."""
    workers_schedule_timeout_s: int = 300
    """``resourcesPerTrial.workers.scheduleTimeoutSeconds``: longest a gang waits partly scheduled; 0: forever."""
    container: ContainerTrial | None = None
    """A container trial's command and metrics collector; None: the trial runs kubetune's runtime."""
    trial_name_creator: str | None = None
    """``spec.trialNameCreator.pickleURI``: the function each Trial's first pod calls for its display name."""
    driver: dict | None = None
    """``spec.driver``: what its driver pod runs (``callbacksPickleURI``, ``searcherPickleURI``;
    ``kubetune_operator.driver``), None without one."""

    @property
    def multi_objective(self) -> bool:
        """``spec.objectives`` lists several objectives (searched by Optuna, reported as ``status.paretoFront``)."""
        return isinstance(self.metric, tuple)

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> ExperimentSpec:
        """Read ``spec`` (the Experiment's ``spec`` dict), filling in the CRD's defaults.

        Raises:
            ValueError: a field the operator decides by has the wrong type or range (the message names
                it); the CRD's schema refuses these first where it can.
        """

        def number(key: str, value: Any, minimum: float | None = None, integer: bool = False) -> Any:
            if value is None:
                return None
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or (integer and not float(value).is_integer())
                or not math.isfinite(value)
            ):
                raise ValueError(f"spec.{key} must be {'an integer' if integer else 'a finite number'}, got {value!r}")
            if minimum is not None and value < minimum:
                raise ValueError(f"spec.{key} must be >= {minimum:g}, got {value!r}")
            return int(value) if integer else value

        def obj(key: str) -> Mapping:
            value = spec.get(key) or {}
            if not isinstance(value, Mapping):
                raise ValueError(f"spec.{key} must be an object, got {value!r}")
            return value

        def algorithm(key: str, default: str) -> Algorithm:
            value = obj(key)
            params = value.get("params") or {}
            if not isinstance(params, Mapping):
                raise ValueError(f"spec.{key}.params must be an object, got {params!r}")
            return Algorithm(
                str(value.get("name") or default), dict(params), number(f"{key}.seed", value.get("seed"), integer=True)
            )

        metric, mode = _objectives(spec)
        if (
            algorithm("searchAlgorithm", "basic").name == "bohb"
            and algorithm("scheduler", "fifo").name != "hyperband_bohb"
        ):
            # Ray's TuneBOHB warns at each result and draws every config at random: it learns from rung results only
            raise ValueError(
                "searchAlgorithm bohb learns from the rungs of scheduler hyperband_bohb: set that scheduler"
            )
        if (algorithm("searchAlgorithm", "basic").name == "driver") != bool(obj("driver").get("searcherPickleURI")):
            raise ValueError(
                "searchAlgorithm driver and driver.searcherPickleURI go together: the searcher runs in the driver pod"
            )
        failure, retention = obj("failure"), obj("podRetentionPolicy")
        for key in ("whenSucceeded", "whenFailed"):
            if retention.get(key, "Retain") not in RETENTION:
                raise ValueError(f"spec.podRetentionPolicy.{key} must be Retain or Delete, got {retention[key]!r}")
        stop = dict(obj("stop"))
        for key, value in stop.items():  # the CRD takes any JSON value here: a number or a bool (Ray's {"done": True})
            if not is_threshold(value):
                raise ValueError(f"spec.stop.{key} must be a number or a bool, got {value!r}")
        budget = spec.get("timeBudget")
        scope = spec.get("bestTrialScope", "last")
        if scope not in ("last", "all"):
            raise ValueError(f"spec.bestTrialScope must be last or all, got {scope!r}")
        if scope == "all" and not isinstance(metric, str):
            raise ValueError("spec.bestTrialScope all needs metric and mode: it ranks one metric's values")
        container = _container_trial(spec)
        return cls(
            container=container,
            metric=metric,
            mode=mode,
            config=dict(obj("config")),
            num_samples=number("numSamples", spec.get("numSamples", 1), 1, integer=True),
            search_algorithm=algorithm("searchAlgorithm", "basic"),
            scheduler=algorithm("scheduler", "fifo"),
            stop=stop,
            goal=number("goal", spec.get("goal")),
            best_trial_scope=scope,
            time_budget_s=parse_duration(budget) if budget else None,
            max_concurrent_trials=number(
                "maxConcurrentTrials", spec.get("maxConcurrentTrials") or None, 1, integer=True
            ),
            failure=FailurePolicy(
                number("failure.maxFailures", failure.get("maxFailures", 0), -1, integer=True),
                number("failure.maxFailedTrials", failure.get("maxFailedTrials"), 0, integer=True),
            ),
            pod_retention=PodRetentionPolicy(
                retention.get("whenSucceeded", "Delete"), retention.get("whenFailed", "Retain")
            ),
            suspend=bool(spec.get("suspend", False)),
            storage_uri=obj("storage").get("uri") or None,
            stoppers=tuple(dict(item) for item in spec.get("stoppers") or ()),
            trial_name_creator=obj("trialNameCreator").get("pickleURI") or None,
            driver=dict(obj("driver")) or None,
            workers_schedule_timeout_s=number(
                "resourcesPerTrial.workers.scheduleTimeoutSeconds",
                (obj("resourcesPerTrial").get("workers") or {}).get("scheduleTimeoutSeconds", 300),
                0,
                integer=True,
            ),
        )


def _container_trial(spec: Mapping[str, Any]) -> ContainerTrial | None:
    """``spec.trainable.command`` and ``spec.metricsCollector`` as a :class:`ContainerTrial`, or None without a command.

    Raises:
        ValueError: a command or args that are not lists of strings, a parameter reference (in them or in
            ``template.env``) to a key ``spec.config`` does not have, a metricsCollector without a command, an unknown
            format, a ``metricsFormat`` without two groups, a malformed ``spec.checkpoint.path`` (or one without a
            command), or what container trials cannot do: periodic checkpoints (the container asks for each),
            Python functions (they run in kubetune's runtime).
    """
    trainable, collector = spec.get("trainable") or {}, spec.get("metricsCollector") or {}
    command = trainable.get("command")
    if command is None:
        if spec.get("metricsCollector") is not None:
            raise ValueError("spec.metricsCollector is only for a container trial (spec.trainable.command)")
        if (spec.get("checkpoint") or {}).get("path") is not None:
            raise ValueError(
                "spec.checkpoint.path is only for a container trial (spec.trainable.command): kubetune's runtime "
                "keeps its checkpoints itself"
            )
        return None
    for key in ("command", "args"):
        value = trainable.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"spec.trainable.{key} must be a list of strings, got {value!r}")
    if not command:
        raise ValueError("spec.trainable.command must not be empty")
    refused = []
    if (spec.get("checkpoint") or {}).get("frequency"):
        refused.append(
            "spec.checkpoint.frequency (the container asks for each checkpoint: docs/api.md, "
            '"Checkpoints of a container trial")'
        )
    if _PICKLED in json.dumps([spec.get("config"), (spec.get("scheduler") or {}).get("params")], default=str):
        refused.append("Python functions in spec.config or the scheduler's params (they run in kubetune's runtime)")
    if spec.get("trialNameCreator"):
        refused.append("spec.trialNameCreator (a Python function: it runs in kubetune's runtime)")
    if spec.get("driver"):
        refused.append("spec.driver (Python callbacks: they run in kubetune's runtime)")
    if refused:
        raise ValueError("a container trial (spec.trainable.command) cannot use: " + "; ".join(refused))
    kind, format = collector.get("kind", "StdOut"), collector.get("format", "TEXT")
    if kind not in COLLECTOR_KINDS:
        raise ValueError(f"spec.metricsCollector.kind must be one of {', '.join(COLLECTOR_KINDS)}, got {kind!r}")
    path = collector.get("path")
    if (path is not None) != (kind in ("File", "TensorFlowEvent")):
        raise ValueError("spec.metricsCollector.path is required with kind File or TensorFlowEvent, and only there")
    if path is not None and (
        not isinstance(path, str)
        or not path.startswith("/")
        or posixpath.normpath(path) == "/"
        or (kind == "File" and posixpath.dirname(posixpath.normpath(path)) == "/")
    ):
        raise ValueError(
            f"spec.metricsCollector.path must be an absolute path below a folder of its own, got {path!r} "
            "(the folder becomes an emptyDir shared with the metrics sidecar)"
        )
    if collector.get("port") is not None and kind != "Push":
        raise ValueError("spec.metricsCollector.port is only for kind Push")
    if collector.get("katibDBManager") and kind != "Push":
        raise ValueError("spec.metricsCollector.katibDBManager is only for kind Push")
    if format not in FORMATS:
        raise ValueError(f"spec.metricsCollector.format must be one of {', '.join(FORMATS)}, got {format!r}")
    patterns = collector.get("metricsFormat") or []
    for pattern in patterns:
        problem = metrics_format_problem(pattern) if isinstance(pattern, str) else "metricsFormat holds strings"
        if problem:
            raise ValueError(f"spec.metricsCollector.{problem}")
    if patterns and (format != "TEXT" or kind == "TensorFlowEvent"):
        raise ValueError("spec.metricsCollector.metricsFormat is for format TEXT (not kind TensorFlowEvent)")
    config = spec.get("config") or {}
    unknown = sorted({p for p in references(spec) if p not in config and p.split(".")[0] not in config})
    if unknown:
        raise ValueError(
            f"spec.trainable refers to parameters that are not in spec.config: {', '.join(unknown)} "
            "(${trialParameters.NAME} and ${config.NAME} name a key of spec.config)"
        )
    unknown = sorted({key for key in trial_references(spec) if key not in TRIAL_KEYS})
    if unknown:
        raise ValueError(
            f"spec.trainable refers to the trial by {', '.join(unknown)}: "
            "${trial.name} and ${trial.namespace} are the trial's references"
        )
    key = collector.get("iterationKey")
    folder = checkpoint_path(spec)
    if folder is not None:
        _check_checkpoint_path((spec.get("checkpoint") or {}).get("path", folder), shared_folder(kind, path))
    return ContainerTrial(
        command=tuple(command),
        args=tuple(trainable.get("args") or ()),
        kind=kind,
        format=format,
        metrics_format=tuple(patterns),
        iteration_key=str(key) if key else None,
        path=posixpath.normpath(path) if path else None,
        port=int(collector.get("port") or DEFAULT_PUSH_PORT),
        checkpoint_path=folder,
    )


def _check_checkpoint_path(path: Any, metrics_folder: str | None) -> None:
    """Raises: ValueError: ``spec.checkpoint.path`` is not an absolute folder below ``/``, or it and the metrics'
    folder hold one another (each is an emptyDir of its own)."""
    if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) == "/":
        raise ValueError(f"spec.checkpoint.path must be an absolute path below /, got {path!r}")
    path = posixpath.normpath(path)
    if metrics_folder is not None and (
        path == metrics_folder or path.startswith(metrics_folder + "/") or metrics_folder.startswith(path + "/")
    ):
        raise ValueError(
            f"spec.checkpoint.path {path!r} and the metrics' folder {metrics_folder!r} must not hold one another"
        )


def _objectives(spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """``spec.metric`` and ``spec.mode`` as strings, or the tuples of ``spec.objectives`` for a multi-objective
    experiment, which runs only what works without a single metric (Ray refuses schedulers with several metrics
    too).

    Raises:
        ValueError: a malformed metric or mode, objectives next to metric or mode, or a multi-objective
            experiment with another searcher than optuna, another scheduler than fifo, a goal, or a stopper
            that would compare trials by one metric.
    """
    metric, mode = spec.get("metric"), spec.get("mode")
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise ValueError(
            f"spec.metric must be a result key (a string; several objectives go in spec.objectives), got {metric!r}"
        )
    if spec.get("objectives") and (metric is not None or mode is not None):
        raise ValueError("spec.objectives takes the place of spec.metric and spec.mode: set one or the other")
    if not spec.get("objectives"):
        try:
            check_mode(metric, mode, required=False)
        except ValueError as exc:
            raise ValueError(f"spec.{exc}") from None
        return metric, mode
    try:
        metrics, modes = objectives(*spec_objectives(spec))
    except ValueError as exc:
        raise ValueError(f"spec.objectives: {exc}") from None
    refused = []
    algorithm = (spec.get("searchAlgorithm") or {}).get("name") or "basic"
    if algorithm != "optuna":
        refused.append(f"searchAlgorithm {algorithm!r} (only optuna searches several objectives)")
    scheduler = (spec.get("scheduler") or {}).get("name") or "fifo"
    if scheduler != "fifo":
        refused.append(f"scheduler {scheduler!r} (schedulers compare trials by one metric: use fifo)")
    if spec.get("goal") is not None:
        refused.append("goal (it is a value of one metric)")
    for stopper in spec.get("stoppers") or ():
        name = stopper.get("name") if isinstance(stopper, Mapping) else stopper
        params = (stopper.get("params") if isinstance(stopper, Mapping) else None) or {}
        if name not in _STOPPERS_WITHOUT_METRIC and not isinstance(params.get("metric"), str):
            refused.append(f"stopper {name!r} without its own params.metric")
    if refused:
        raise ValueError(
            f"spec.objectives lists {len(metrics)} objectives, which this experiment cannot use with: "
            + "; ".join(refused)
        )
    return metrics, modes
