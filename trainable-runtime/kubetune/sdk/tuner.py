"""Ray Tune's entry points on a Kubernetes cluster: ``tune.run``, ``Tuner(...).fit()`` and their configs.

Owns :func:`run`, :func:`run_experiments`, :class:`Tuner` and Ray 2.x's :class:`TuneConfig`,
:class:`RunConfig`, :class:`CheckpointConfig` and :class:`FailureConfig`, and
:func:`build_experiment`, which turns Ray's arguments into an ``Experiment`` manifest. A run checks
every argument, ships the trainable (:mod:`kubetune.shipping`), creates the Experiment with the
user's kubeconfig (:mod:`kubetune.sdk.client`), shows Ray's status table (:mod:`kubetune.sdk.progress`)
until the Experiment ends, and returns its results read from storage (:mod:`kubetune.sdk.analysis`).
Ctrl-C detaches: the Experiment is a Kubernetes object and keeps running. Called by user scripts
(``import kubetune as tune``) and by :mod:`kubetune.sdk.cli`. ``docs/sdk.md`` describes what runs
where; ``docs/ray-tune.md`` the differences from Ray.
"""

from __future__ import annotations

import datetime
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from kubetune.resources import resources_per_trial as resources_per_trial_spec
from kubetune.resultkeys import check_mode, is_multi_objective, objectives, objectives_spec, spec_objectives
from kubetune.sdk.schedulers import PopulationBasedTraining, PopulationBasedTrainingReplay, TrialScheduler
from kubetune.sdk.stopper import CombinedStopper, Stopper, TimeoutStopper
from kubetune.search.algorithms import BasicVariantGenerator, ConcurrencyLimiter, Searcher
from kubetune.search.sample import space_spec
from kubetune.search.variants import find_domains
from kubetune.stop_criteria import is_threshold
from kubetune.storage import join_uri

__all__ = [
    "TuneError",
    "Detached",
    "run",
    "run_experiments",
    "Tuner",
    "TuneConfig",
    "RunConfig",
    "CheckpointConfig",
    "FailureConfig",
    "build_experiment",
    "create_experiment",
    "experiment_analysis",
    "failed_trials",
    "split_stop",
    "storage_spec",
]

API_VERSION = "kubetune.io/v1alpha1"
#: Ray arguments that mean nothing when each trial is its own pod; accepted with a warning.
IGNORED = {
    "reuse_actors": "each trial runs in its own pod",
    "local_dir": "results go to the experiment's object storage (storage=)",
    "log_to_file": "trial output goes to the pod's log (kubetune logs TRIAL)",
    "sync_config": "trials write to object storage themselves",
    "queue_trials": "pods wait in the Kubernetes scheduler's queue",
    # Ray 0.8's user guide
    "sync_to_cloud": "trial pods upload their results and checkpoints to the experiment's storage themselves "
    "(storage= or upload_dir=); no sync command runs",
    "sync_to_driver": "results are read from the experiment's storage, never synced to this machine",
    "sync_on_checkpoint": "a checkpoint counts only once its pod has committed it to the experiment's storage",
    "global_checkpoint_period": "the operator journals the experiment's state in the cluster as it decides",
    "ray_auto_init": "there is no Ray cluster to start: trials are pods",
    "server_port": "there is no Tune server: the Experiment and its Trials are Kubernetes objects",
}
#: Ray arguments kubetune cannot honour: name → why, and what to do instead. A value of None or False (Ray's
#: defaults) is accepted.
REFUSED = {
    "callbacks": "a callback must be a tune.Callback (ray.tune.Callback), which runs in the Experiment's driver "
    "pod; Ray's JsonLoggerCallback, CSVLoggerCallback and TBXLoggerCallback are accepted: the trial pods write "
    "their files",
    "loggers": "an entry of loggers must be a tune.logger.Logger class (Ray 0.8's), which runs beside each trial in "
    "its pod; Ray's JsonLogger, CSVLogger and TBXLogger (DEFAULT_LOGGERS) are accepted: the trial pods write "
    "result.json, progress.csv and TensorBoard events themselves",
    "trial_dirname_creator": "a trial's folder in the experiment's storage is named after its Trial object, "
    "<experiment>-<index>, by which the operator, the trial pods and the analysis find it; give trials display "
    "names with trial_name_creator",
    "export_formats": "checkpoints are kept in Ray's 1.x layout only",
    "search_alg_state": "the searcher's state lives in the operator's journal",
    "trial_executor": "each trial is a pod that the operator creates and watches, so there is no trial executor to "
    "replace; shape the pods with resources_per_trial= and template=",
    "with_server": "there is no Tune server to add or read trials through: the Experiment and its Trials are "
    "Kubernetes objects (kubectl get experiments,trials; kubetune get NAME; kubetune run to add an experiment)",
}
#: ``tune.run(resume=...)`` values (Ray 0.8's and 1.x's) that re-attach to the Experiment named ``name``.
RESUME_ATTACH = ("LOCAL", "REMOTE")


class TuneError(Exception):
    """A run ended with failed trials (Ray's ``TuneError``, raised when ``raise_on_failed_trial``), or a callback
    raised in the Experiment's driver pod (raised always, as Ray's run raises the callback's error)."""

    __module__ = "kubetune.tuner"  # the public path a traceback's last line names (kubetune.tuner re-exports it)


class Detached(KeyboardInterrupt):
    """Ctrl-C while a run followed its Experiment, which keeps running in the cluster; the message (one line,
    the last of the traceback) says how to re-attach and how to stop it.

    Attributes:
        name, namespace: the Experiment's.
    """

    __module__ = "kubetune.tuner"  # the public path a traceback's last line names (kubetune.tuner re-exports it)

    def __init__(self, name: str, namespace: str, reattach: str):
        super().__init__(
            f"detached from experiment {namespace}/{name}, which keeps running in the cluster: re-attach with "
            f"{reattach} or `kubetune watch {name} -n {namespace}`; stop it with `kubetune suspend {name} -n "
            f"{namespace}` or `kubetune delete {name} -n {namespace}`"
        )
        self.name, self.namespace = name, namespace


@dataclass
class CheckpointConfig:
    """Ray 2.x's ``CheckpointConfig``: which checkpoints trials take and keep (``spec.checkpoint``)."""

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None


def _checkpoint_args(cc: CheckpointConfig) -> tuple[int, bool, int | None, str | None]:
    """``(checkpoint_freq, checkpoint_at_end, keep_checkpoints_num, checkpoint_score_attr)`` of a
    :class:`CheckpointConfig` (Ray 1.x's ``min-`` prefix for a ``min`` score order)."""
    score = cc.checkpoint_score_attribute
    if score and cc.checkpoint_score_order == "min":
        score = f"min-{score}"
    return cc.checkpoint_frequency, bool(cc.checkpoint_at_end), cc.num_to_keep, score


@dataclass
class FailureConfig:
    """Ray 2.x's ``FailureConfig``: retries per trial (-1 without end) and ``fail_fast``."""

    max_failures: int = 0
    fail_fast: bool = False


@dataclass
class RunConfig:
    """Ray 2.x's ``RunConfig``. ``storage_path`` is the storage URI (``s3://bucket/prefix``)."""

    name: str | None = None
    storage_path: str | None = None
    stop: Any = None
    checkpoint_config: CheckpointConfig | None = None
    failure_config: FailureConfig | None = None
    verbose: int = 2
    progress_reporter: Any = None
    callbacks: list | None = None


@dataclass
class TuneConfig:
    """Ray 2.x's ``TuneConfig``: what to search and how."""

    metric: str | None = None
    mode: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | datetime.timedelta | None = None
    reuse_actors: bool | None = None
    trial_name_creator: Callable[[Any], str] | None = None
    trial_dirname_creator: Any = None


def storage_spec(storage: str | dict | None) -> dict:
    """Return ``spec.storage`` from a URI or a dict of its fields (None values count as left out).

    What is left out comes from the environment: the URI from ``$KUBETUNE_STORAGE_URI``, the trial
    pods' ``credentialsSecret`` from ``$KUBETUNE_STORAGE_CREDENTIALS_SECRET``, and for ``s3://`` the
    endpoint from the client's ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` (what boto3 reads), so pods
    use the same store.

    Raises:
        ValueError: no URI (``storage=``, ``storage_path=`` or ``$KUBETUNE_STORAGE_URI``).
    """
    spec = {"uri": storage} if isinstance(storage, str) else dict(storage or {})
    spec = {k: v for k, v in spec.items() if v is not None}
    spec.setdefault("uri", os.environ.get("KUBETUNE_STORAGE_URI"))
    spec.setdefault("credentialsSecret", os.environ.get("KUBETUNE_STORAGE_CREDENTIALS_SECRET") or None)
    if not spec["uri"]:
        raise ValueError(
            "the SDK needs the experiment's object storage: pass storage='s3://bucket/prefix' "
            "(or storage_path=, or set KUBETUNE_STORAGE_URI)"
        )
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if spec["uri"].startswith("s3://") and endpoint:
        spec.setdefault("endpoint", endpoint)
    return {k: v for k, v in spec.items() if v is not None}


def _duration(seconds: float | datetime.timedelta) -> str:
    if isinstance(seconds, datetime.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"time_budget_s must be a positive number of seconds, got {seconds!r}")
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def split_stop(stop: Any) -> tuple[Any, Callable | None]:
    """Split ``stop`` into what the operator runs and the user's own code (a stop function, or a
    ``Stopper`` subclass of the user's), which runs in the trial pods (:func:`kubetune.shipping.with_stopper`).

    Returns:
        ``(built-in part or None, the user's part or None)``.

    Raises:
        ValueError: the user's ``Stopper`` defines ``stop_all``: deciding for the whole experiment
            needs every trial's results in one process, which kubetune's pods are not.
    """
    if isinstance(stop, CombinedStopper):
        parts = [split_stop(s) for s in stop.stoppers]
        ours = [p for p, _ in parts if p is not None]
        users = [u for _, u in parts if u is not None]
        user = (
            None
            if not users
            else users[0]
            if len(users) == 1
            else (lambda trial_id, result: any(u(trial_id, result) for u in users))
        )
        return (CombinedStopper(*ours) if ours else None), user
    if isinstance(stop, Stopper) and not stop.name and not isinstance(stop, TimeoutStopper):
        if getattr(type(stop), "stop_all", Stopper.stop_all) is not Stopper.stop_all:
            raise ValueError(
                f"{type(stop).__name__}.stop_all is not supported: a Stopper of your own runs in each "
                "trial's pod, which sees only that trial; use ExperimentPlateauStopper or time_budget_s"
            )
        return None, stop
    if callable(stop) and not isinstance(stop, (dict, Stopper)):
        return None, stop
    return stop, None


def _stop_spec(stop: Any) -> tuple[dict, list[dict], float | None]:
    """Split ``stop`` into ``spec.stop``, ``spec.stoppers`` and a time budget (seconds)."""
    if stop is None:
        return {}, [], None
    if isinstance(stop, dict):
        flat: dict = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(f"{prefix}/{k}" if prefix else k, v)
            elif not is_threshold(value):  # a bool too: Ray compares result[key] >= True
                raise ValueError(f"stop[{prefix!r}] must be a number or a bool, got {value!r}")
            else:
                flat[prefix] = value

        walk("", stop)
        return flat, [], None
    if isinstance(stop, TimeoutStopper):
        return {}, [], stop.timeout_s
    if isinstance(stop, CombinedStopper):
        parts = [_stop_spec(s) for s in stop.stoppers]
        budgets = [b for _, _, b in parts if b is not None]
        merged: dict = {}
        for part, _, _ in parts:
            merged.update(part)
        return merged, [s for _, stoppers, _ in parts for s in stoppers], min(budgets) if budgets else None
    if isinstance(stop, Stopper) and stop.name:
        return {}, [stop.to_spec()], None
    raise ValueError(
        f"stop={stop!r}: a stop function or a Stopper of your own is user code, which the operator does "
        "not run: give it to kubetune.run or Tuner, which run it in the trial pods"
    )


#: Ray's anonymous metric (``ray.tune.result.DEFAULT_METRIC``): what ``report(value)`` or a returned number reports.
DEFAULT_METRIC = "_metric"


def _metric_mode(metric: str | None, mode: str | None, *algorithms: Any) -> tuple[Any, Any]:
    """The experiment's metric and mode: the run's, else the scheduler's or searcher's (Ray's rule:
    both set differently is an error); lists for several objectives. A mode without a metric ranks
    the anonymous metric ``_metric``, as Ray's schedulers and searchers fill it.

    Raises:
        ValueError: a metric without a mode: Ray's message when a scheduler needs the mode; with FIFO,
            kubetune's (the operator ranks trials by them together).
    """
    for algorithm in algorithms:
        for attr, value in (("metric", metric), ("mode", mode)):
            theirs = getattr(algorithm, attr, None)
            if theirs is not None and value is not None and theirs != value:
                raise ValueError(
                    f"{type(algorithm).__name__} was built with {attr}={theirs!r} but the run has "
                    f"{attr}={value!r}; set it in one place"
                )
        metric = metric or getattr(algorithm, "metric", None)
        mode = mode or getattr(algorithm, "mode", None)
    if is_multi_objective(metric) or is_multi_objective(mode):
        objectives(metric, mode)  # several objectives (OptunaSearch(metric=[...])): the operator checks the rest
        return metric, mode
    check_mode(metric, mode, required=False)
    if mode is not None and metric is None:
        metric = DEFAULT_METRIC
    if metric is not None and mode is None:
        scheduler = next((a for a in algorithms if isinstance(a, TrialScheduler) and a.name != "fifo"), None)
        if scheduler is not None:  # Ray raises this at the first trial; nothing is created here
            raise ValueError(
                f"{type(scheduler).__name__} has been instantiated without a valid `metric` ({metric}) or "
                "`mode` (None) parameter. Either pass these parameters when instantiating the scheduler, "
                "or pass them as parameters to `tune.run()`"
            )
        raise ValueError(
            f"metric={metric!r} without a mode: kubetune ranks trials by the metric in the operator "
            "(status.bestTrial), which needs the direction; pass mode='max' or mode='min'"
        )
    return metric, mode


def kubernetes_name(name: str) -> str:
    """``name`` as a Kubernetes object name: lowercased, each run of characters other than ``a-z``, ``0-9``
    and ``-`` made one ``-``, no ``-`` at either end (``"PBT_synch"`` -> ``"pbt-synch"``); ``""`` if nothing
    is left. Ray takes any experiment name; an Experiment's is an RFC 1123 name (docs/ray-tune.md)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def default_name(trainable: Any) -> str:
    """Ray's default experiment name, ``<trainable>_<date>``, as a Kubernetes name."""
    base = trainable.split(":")[-1] if isinstance(trainable, str) else getattr(trainable, "__name__", "trainable")
    base = kubernetes_name(base)[:40].strip("-") or "trainable"
    return f"{base}-{datetime.datetime.now():%Y%m%d-%H%M%S}"


def experiment_name(name: str | None, trainable: Any) -> str:
    """The Experiment's name for ``tune.run(name=...)``: :func:`kubernetes_name` of ``name`` (with a warning
    when that changes it), or :func:`default_name` without one.

    Raises:
        ValueError: ``name`` holds no letter or digit.
    """
    if not name:
        return default_name(trainable)
    converted = kubernetes_name(name)
    if not converted:
        raise ValueError(f"experiment name {name!r} has no letter or digit to make a Kubernetes name of")
    if converted != name:
        warnings.warn(
            f"experiment name {name!r} is {converted!r} in Kubernetes (lowercase letters, digits and '-')",
            stacklevel=4,
        )
    return converted


def build_experiment(
    name: str,
    trainable_spec: dict,
    *,
    config: Any = None,
    num_samples: int = 1,
    metric: str | None = None,
    mode: str | None = None,
    stop: Any = None,
    time_budget_s: float | datetime.timedelta | None = None,
    resources_per_trial: Any = None,
    search_alg: Any = None,
    scheduler: Any = None,
    max_concurrent_trials: int | None = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    max_failures: int = 0,
    fail_fast: bool = False,
    storage: str | dict | None = None,
    image: str | None = None,
    template: dict | None = None,
    queue_name: str | None = None,
    sample_from: Any = None,
) -> dict:
    """Return the Experiment manifest for Ray's ``tune.run`` arguments.

    Args:
        name: the Experiment's name.
        trainable_spec: ``spec.trainable`` (from :func:`kubetune.shipping.ship_trainable`).
        config: the parameter space (Domain objects or their JSON form).
        num_samples: Ray's ``num_samples``.
        metric, mode: the experiment's; taken from the scheduler or searcher when None.
        stop: a dict of thresholds, a built-in :class:`~kubetune.stopper.Stopper` or a
            ``CombinedStopper`` of them.
        time_budget_s: seconds or a ``timedelta``.
        resources_per_trial: ``{"cpu": ..., "gpu": ..., "memory": ...}`` (memory in bytes or a
            Kubernetes quantity), with Ray 0.8's ``extra_cpu``/``extra_gpu``/``extra_memory`` for worker pods,
            or a ``PlacementGroupFactory`` (the first bundle the trial's pod, the others its workers);
            :func:`kubetune.resources.resources_per_trial` maps them.
        search_alg: a :class:`~kubetune.search.Searcher` (optionally in a ``ConcurrencyLimiter``).
        scheduler: a :class:`~kubetune.schedulers.TrialScheduler`.
        max_concurrent_trials: most trials at once.
        checkpoint_freq, checkpoint_at_end, keep_checkpoints_num, checkpoint_score_attr: Ray's
            checkpoint arguments (``spec.checkpoint``).
        max_failures: retries per trial (-1: no limit).
        fail_fast: the experiment fails at the first failed trial.
        storage: see :func:`storage_spec`.
        image: the trial image; None uses the operator's default.
        template: ``spec.template``, the trial pods' overlay.
        queue_name: ``spec.queueName``, the Kueue LocalQueue that admits the trial pods.
        sample_from: gives the JSON standing for a ``sample_from`` function
            (:meth:`kubetune.shipping.FunctionPickles.marker`); None refuses them.

    Raises:
        ValueError: an argument kubetune cannot honour (the message says why and what to use).
    """
    if isinstance(search_alg, ConcurrencyLimiter):
        limit: int | None = search_alg.max_concurrent
        search_alg = search_alg.searcher
    else:
        limit = None
    search_alg = search_alg if search_alg is not None else BasicVariantGenerator()
    if not isinstance(search_alg, Searcher):
        raise ValueError(
            f"search_alg={search_alg!r}: use a searcher from kubetune.search, or a subclass of "
            "kubetune.search.Searcher (Ray's Searcher) of your own, which runs in the Experiment's driver pod"
        )
    if scheduler is not None and (not isinstance(scheduler, TrialScheduler) or not scheduler.name):
        raise ValueError(
            f"scheduler={scheduler!r}: use a scheduler from kubetune.schedulers; a scheduler of your "
            "own would be user code in the operator"
        )
    metric, mode = _metric_mode(metric, mode, scheduler, search_alg)
    if isinstance(scheduler, PopulationBasedTrainingReplay):  # Ray's replay sets the trial's config itself
        if num_samples != 1:
            raise ValueError("PopulationBasedTrainingReplay replays one trial: num_samples must be 1")
        config = scheduler.config
    limit = limit or search_alg.max_concurrent or None
    if max_concurrent_trials and limit:
        limit = min(limit, max_concurrent_trials)
    limit = limit or max_concurrent_trials
    stop_dict, stoppers, stop_budget = _stop_spec(stop)
    budgets = [b for b in (stop_budget, time_budget_s) if b is not None]
    spec: dict = {
        "trainable": trainable_spec,
        "config": space_spec(config or {}, on_function=sample_from),
        "numSamples": num_samples,
        "searchAlgorithm": search_alg.to_spec() if search_alg.name else {"name": "driver"},  # the user's: driver pod
        "checkpoint": {"frequency": checkpoint_freq, "atEnd": bool(checkpoint_at_end)},
        "failure": {"maxFailures": max_failures},
        "storage": storage_spec(storage),
    }
    optional = {
        **objectives_spec(metric, mode),
        "image": image,
        "template": template,
        "queueName": queue_name,
        "stop": stop_dict or None,
        "stoppers": stoppers or None,
        "maxConcurrentTrials": limit,
        "scheduler": _scheduler_spec(scheduler, sample_from) if scheduler is not None else None,
        "resourcesPerTrial": resources_per_trial_spec(resources_per_trial) or None,
        "timeBudget": _duration(min(budgets, key=_seconds)) if budgets else None,
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    if keep_checkpoints_num:
        spec["checkpoint"]["keep"] = keep_checkpoints_num
    if checkpoint_score_attr:
        spec["checkpoint"]["scoreAttribute"] = checkpoint_score_attr
    if fail_fast:
        spec["failure"]["maxFailedTrials"] = 0
    return {"apiVersion": API_VERSION, "kind": "Experiment", "metadata": {"name": name}, "spec": spec}


def _scheduler_spec(scheduler: TrialScheduler, sample_from: Any) -> dict:
    """``spec.scheduler``; PBT's functions are shipped by ``sample_from`` as ``sample_from`` functions are."""
    if isinstance(scheduler, PopulationBasedTraining):
        return scheduler.to_spec(on_function=sample_from)
    return scheduler.to_spec()


def _seconds(value: float | datetime.timedelta) -> float:
    return value.total_seconds() if isinstance(value, datetime.timedelta) else value


def trial_resources(trainable: Any, resources_per_trial: Any, config: Any) -> Any:
    """The resources of ``tune.run``'s trials, first given of: ``resources_per_trial``, ``tune.with_resources``'s,
    ``Trainable.default_resource_request(config)`` (Ray's order); any form of :mod:`kubetune.resources`, or None."""
    return (
        resources_per_trial or getattr(trainable, "_kubetune_resources", None) or _resource_request(trainable, config)
    )


def _resource_request(trainable: Any, config: Any) -> Any:
    """``Trainable.default_resource_request`` evaluated once on the client, with the param space: a dict, a
    ``PlacementGroupFactory`` or a ``Resources`` (:mod:`kubetune.resources`), or None."""
    method = getattr(trainable, "default_resource_request", None)
    from kubetune.resources import PlacementGroupFactory, Resources
    from kubetune.runtime.trainable import Trainable

    if method is None or getattr(method, "__func__", None) is Trainable.default_resource_request.__func__:
        return None
    try:
        request = method(config)
    except Exception as exc:
        raise ValueError(
            f"{trainable.__name__}.default_resource_request(config) failed ({exc!r}): kubetune calls "
            "it once, on the client, with the param space (every trial has one shape); "
            "pass resources_per_trial instead"
        ) from exc
    if request is not None and not isinstance(request, (dict, PlacementGroupFactory, Resources)):
        raise ValueError(
            f"{trainable.__name__}.default_resource_request must return a dict such as "
            f"{{'cpu': 2, 'gpu': 1}}, a PlacementGroupFactory or a Resources, got {type(request).__name__}"
        )
    return request


def _reporter(progress_reporter: Any, verbose: int) -> Any:
    if verbose <= 0:
        return None
    if progress_reporter is not None:
        return progress_reporter
    from kubetune.sdk.progress import StatusTable

    return StatusTable(metric_columns=None)


def create_experiment(
    cluster: Any,
    trainable: Any,
    name: str,
    storage_fields: dict,
    resources_per_trial: Any,
    config: Any,
    **experiment: Any,
) -> dict:
    """Check every argument, upload what the trial pods need, create the Experiment; return it as stored.

    Args:
        cluster: a :class:`kubetune.sdk.client.Cluster`.
        trainable: the trainable (class, function or import path), maybe wrapped.
        name: the Experiment's name.
        storage_fields: ``spec.storage`` (:func:`storage_spec`).
        resources_per_trial: Ray's resources; None takes those of ``with_resources`` or
            ``default_resource_request``.
        config: the parameter space.
        experiment: the other keyword arguments of :func:`build_experiment`, ``trial_name_creator`` (Ray's:
            a function of the trial returning its display name), pickled beside the ``sample_from`` functions as
            ``spec.trialNameCreator``; each Trial's first pod calls it (:mod:`kubetune.runtime.trial_name`); and
            ``callbacks`` (:func:`driver_callbacks`), pickled there too as ``spec.driver``: the Experiment's driver
            pod runs them (:mod:`kubetune.runtime.driver`); and ``loggers`` (:func:`trial_loggers`), shipped with
            the trainable (:func:`kubetune.shipping.with_loggers`).

    Raises:
        ValueError: an argument kubetune cannot honour (before anything is uploaded or created), such as a
            ``config`` over the CRD's limit (:class:`kubetune.limits.SpecTooLarge`).
        TypeError: a ``trial_name_creator`` that is not callable.
        kubetune.storage.StorageUnavailable: the storage could not be written within
            :data:`kubetune.storage.SDK_OUTAGE_TIMEOUT_S` (nothing is created).
        kubetune.sdk.client.ExperimentExists: the name is taken (what this call uploaded is deleted again).
        kubernetes.client.ApiException: the API server refused the Experiment otherwise (after a 4xx, what this call
            uploaded is deleted again).
    """
    from kubernetes.client import ApiException

    from kubetune.limits import check_spec_sizes
    from kubetune.sdk.client import ExperimentExists
    from kubetune.shipping import FunctionPickles, ship_trainable, with_loggers, with_stopper
    from kubetune.storage import SDK_OUTAGE_TIMEOUT_S, StorageUnavailable, open_storage, storage_errors

    resources = trial_resources(trainable, resources_per_trial, config)
    name_creator = experiment.pop("trial_name_creator", None)
    callbacks = experiment.pop("callbacks", None)
    loggers = experiment.pop("loggers", None)
    if name_creator is not None and not callable(name_creator):
        raise TypeError(f"trial_name_creator must be a function of the trial returning its name, got {name_creator!r}")
    experiment["stop"], user_stop = split_stop(experiment.get("stop"))
    store = open_storage(
        storage_fields["uri"],
        storage_fields.get("endpoint"),
        storage_fields.get("region"),
        outage_timeout_s=SDK_OUTAGE_TIMEOUT_S,
    )
    base = join_uri(storage_fields["uri"], cluster.namespace, name, "sdk")
    functions = FunctionPickles(base)
    manifest = build_experiment(
        name,
        {},
        config=config,
        resources_per_trial=resources,
        storage=storage_fields,
        sample_from=functions.marker,
        **experiment,
    )  # every check before any upload
    if name_creator is not None:
        manifest["spec"]["trialNameCreator"] = {"pickleURI": functions.pickle(name_creator)}
    driver = {}
    if callbacks:
        driver["callbacksPickleURI"] = functions.pickle(list(callbacks))
    searcher = getattr(experiment.get("search_alg"), "searcher", experiment.get("search_alg"))  # a limiter's
    if isinstance(searcher, Searcher) and not searcher.name:
        driver["searcherPickleURI"] = functions.pickle(
            {"searcher": driver_searcher(searcher, manifest["spec"], config), "paramSpace": config}
        )
    if driver:
        manifest["spec"]["driver"] = driver
    check_spec_sizes(manifest["spec"])  # the CRD's limits, before anything is uploaded
    if user_stop is not None:
        trainable = with_stopper(trainable, user_stop)
    if loggers:
        trainable = with_loggers(trainable, loggers)
    try:
        before = set(store.list(base))  # what an Experiment of this name uploaded already stays
        functions.upload(store)
        manifest["spec"]["trainable"] = ship_trainable(trainable, store, base)
    except storage_errors() as exc:
        where = storage_fields.get("endpoint") or "the default endpoint"
        raise StorageUnavailable(
            f"cannot write to storage {base} ({where}): {exc}; check the storage URI, its endpoint "
            f"(storage endpoint or KUBETUNE_STORAGE_ENDPOINT) and the credentials"
        ) from None
    try:
        return cluster.create(manifest)
    except (ApiException, ExperimentExists) as exc:
        if isinstance(exc, ExperimentExists) or 400 <= exc.status < 500:
            # refused, so nothing uses them (after a 5xx or a lost reply it may exist)
            for uri in set(store.list(base)) - before:
                store.delete(uri)
        raise


def _launch(
    trainable: Any,
    *,
    name: str | None,
    namespace: str | None,
    context: str | None,
    restore: str | None,
    storage: str | dict | None,
    resources_per_trial: Any,
    config: Any,
    verbose: int,
    progress_reporter: Any,
    poll_interval_s: float,
    entry: str = "tune.run",
    **experiment: Any,
) -> tuple[Any, dict, list[dict]]:
    """Create (or with ``restore`` attach to) the Experiment, follow it to its end; return
    ``(analysis, experiment, trials)``. ``entry`` (``tune.run`` or ``Tuner``) names the call that re-attaches
    in the :class:`Detached` message. The cluster and kubetune's CRDs are checked before anything is uploaded."""
    from kubernetes.client import ApiException

    from kubetune.sdk.client import Cluster, ExperimentNotFound, InvalidExperiment, follow

    cluster = Cluster.connect(context, namespace)
    storage_fields = storage_spec(storage)
    cluster.check()
    if restore:
        name = restore
        try:
            cluster.get(name)  # it exists; its own spec.storage is read at the end
        except ApiException as exc:
            if exc.status != 404:
                raise
            raise ExperimentNotFound(f"no experiment {cluster.namespace}/{name} to restore") from None
    else:
        name = experiment_name(name, trainable)
        create_experiment(cluster, trainable, name, storage_fields, resources_per_trial, config, **experiment)
    reporter = _reporter(progress_reporter, verbose)
    try:
        try:
            final, trials = follow(cluster, name, reporter.update if reporter else None, poll_interval_s)
        finally:
            if reporter is not None:
                reporter.close()
    except InvalidExperiment:
        if not restore:
            cluster.delete(name)  # nothing ran; the name is free again for a corrected run
        raise
    except KeyboardInterrupt:
        ns = cluster.namespace
        extra = f", namespace={ns!r}" if namespace else ""
        reattach = f"Tuner.restore({name!r}{extra})" if entry == "Tuner" else f"tune.run(..., restore={name!r}{extra})"
        raise Detached(name, ns, reattach) from None
    failed = next(
        (c for c in (final.get("status") or {}).get("conditions") or () if c.get("reason") == "DriverFailed"), None
    )
    if failed is not None:
        raise TuneError(f"the driver pod of {name} failed: {failed.get('message')}")
    searcher = experiment.get("search_alg")
    searcher = getattr(searcher, "searcher", searcher)  # inside a ConcurrencyLimiter
    if isinstance(searcher, Searcher):
        searcher.total_samples = len(trials)  # Ray's BasicVariantGenerator.total_samples after a run
    return experiment_analysis(final, trials), final, trials


def driver_searcher(searcher: Searcher, spec: dict, config: Any) -> Searcher:
    """A searcher of the user's (a :class:`kubetune.search.Searcher` subclass), given the run's metric, mode and
    ``config`` as Ray's ``tune.run`` gives them (``set_search_properties``) before it is shipped to the driver pod.

    Raises:
        ValueError: ``set_search_properties`` returned False (the searcher has a space of its own) while ``config``
            has domains, Ray's error.
    """
    metric, mode = spec_objectives(spec)
    if config and not searcher.set_search_properties(metric, mode, config) and find_domains(config):
        raise ValueError(
            "You passed a `param_space` parameter to `Tuner()` with unresolved parameters, but the search algorithm "
            "was already instantiated with a search space. Make sure that `config` does not contain any more "
            "parameter definitions - include them in the search algorithm's search space if necessary."
        )
    return searcher


def failed_trials(trials: list[dict]) -> dict[str, str]:
    """Name → ``status.message`` (``""`` without one) of the Trials that failed for good."""
    return {
        t["metadata"]["name"]: (t.get("status") or {}).get("message") or ""
        for t in trials
        if (t.get("status") or {}).get("phase") == "Failed"
    }


def experiment_analysis(experiment: dict, trials: list[dict], previous: Any = None, listed: Any = None) -> Any:
    """The :class:`kubetune.sdk.analysis.ExperimentAnalysis` of ``experiment`` (as the API returns it), read from
    its storage folder, with its failed ``trials``' messages as their errors and their display names
    (``status.displayName``); ``previous`` and ``listed``: an earlier reading of it and a listing of its folder just
    made, as the analysis takes them."""
    from kubetune.sdk.analysis import ExperimentAnalysis

    meta, spec = experiment["metadata"], experiment["spec"]
    storage = storage_spec(spec.get("storage"))
    metric, mode = spec_objectives(spec)
    return ExperimentAnalysis(
        join_uri(storage["uri"], meta["namespace"], meta["name"], meta["uid"][:8]),
        default_metric=metric,
        default_mode=mode,
        storage_endpoint=storage.get("endpoint"),
        storage_region=storage.get("region"),
        trial_errors={name: message or "failed" for name, message in failed_trials(trials).items()},
        param_space=spec.get("config"),
        display_names={
            t["metadata"]["name"]: (t.get("status") or {})["displayName"]
            for t in trials
            if (t.get("status") or {}).get("displayName")
        },
        previous=previous,
        listed=listed,
    )


class LegacyRunArgs(NamedTuple):
    """What Ray's ``tune.run`` keywords beyond :func:`run`'s own make of a run (:func:`legacy_run_args`).

    Attributes:
        restore: the Experiment to attach to (``restore=``, or the run's name with ``resume=``), or None.
        storage: the storage (``storage=``/``storage_path=``, or ``upload_dir=``).
        return_trials: return the trials instead of the analysis (Ray 0.8's ``return_trials=True``).
        callbacks: the ``callbacks`` the Experiment's driver pod runs (:func:`driver_callbacks`).
        loggers: the ``loggers`` that run beside each trial in its pod (:func:`trial_loggers`).
    """

    restore: str | None
    storage: str | dict | None
    return_trials: bool
    callbacks: list
    loggers: tuple


def legacy_run_args(
    kwargs: dict, *, name: str | None, restore: str | None, storage: str | dict | None
) -> LegacyRunArgs:
    """Honour or refuse Ray's ``tune.run`` keywords that :func:`run` does not name (``docs/sdk.md``).

    ``upload_dir`` is the storage URI; ``resume=True`` (or ``"LOCAL"``, ``"REMOTE"``) re-attaches to the
    Experiment named ``name``, as ``restore=`` does; ``return_trials`` returns the trials; ``loggers`` holds what
    the trial pods write anyway (:data:`kubetune.logger.WRITTEN_BY_THE_PODS`) or ``Logger`` classes, which run in
    the trial pods (:func:`trial_loggers`), and ``callbacks`` those or ``tune.Callback`` instances
    (:func:`driver_callbacks`); each of :data:`IGNORED` is accepted with a warning
    that says why it means nothing here.

    Args:
        kwargs: the keywords.
        name, restore, storage: the run's own arguments (``storage`` or ``storage_path``).

    Raises:
        ValueError: a keyword of :data:`REFUSED` set, a logger that is not a ``Logger`` class, a callback that is
            not a ``tune.Callback``, a ``resume`` that
            cannot be honoured, or ``upload_dir`` and another storage, or ``resume`` and ``restore``, that disagree;
            the message says why and what to use.
        TypeError: a keyword Ray's ``tune.run`` does not have either.
    """
    kwargs = dict(kwargs)
    upload_dir = kwargs.pop("upload_dir", None)
    if upload_dir:
        if storage and storage != upload_dir:
            raise ValueError(f"upload_dir={upload_dir!r} and storage {storage!r} differ: give one storage URI")
        storage = upload_dir
    restore = _resume(kwargs.pop("resume", None), name, restore)
    return_trials = bool(kwargs.pop("return_trials", False))
    loggers = trial_loggers(kwargs.pop("loggers", None))
    callbacks = driver_callbacks(kwargs.pop("callbacks", None))
    for key, value in kwargs.items():
        if key in IGNORED:
            warnings.warn(f"{key} is ignored by kubetune: {IGNORED[key]}", stacklevel=3)
        elif key in REFUSED:
            if value is not None and value is not False:
                raise ValueError(f"{key} is not supported by kubetune: {REFUSED[key]}")
        else:
            raise TypeError(f"run() got an unexpected keyword argument {key!r}")
    return LegacyRunArgs(restore, storage, return_trials, callbacks, loggers)


def _resume(resume: Any, name: str | None, restore: str | None) -> str | None:
    """The Experiment ``resume=`` re-attaches to (Ray's ``resume=True``, ``"LOCAL"``, ``"REMOTE"``: the run's
    ``name``); ``restore`` when ``resume`` is unset or False."""
    if resume is None or resume is False:
        return restore
    if resume is not True and str(resume).upper() not in RESUME_ATTACH:
        raise ValueError(
            f"resume={resume!r} is not supported by kubetune: resume=True re-attaches to the Experiment named by "
            "name= (it raises ExperimentNotFound when there is none; leave resume out to create it), and unfinished "
            "trials go on while ended ones keep their outcome, Ray's default; a prompt, AUTO, or restarting errored "
            "trials has no equivalent"
        )
    target = kubernetes_name(name or "")
    if not target:
        raise ValueError(f"resume={resume!r} re-attaches to the Experiment of the run's name: pass name=")
    if restore and restore != target:
        raise ValueError(f"resume={resume!r} attaches to {target!r} and restore= to {restore!r}: give one")
    return target


def trial_loggers(given: Any) -> tuple:
    """The ``loggers`` (Ray 0.8's, classes) that run beside each trial in its pod
    (:func:`kubetune.shipping.with_loggers`): every ``kubetune.logger.Logger`` subclass of ``given`` but those the
    trial pods stand in for (:data:`kubetune.logger.WRITTEN_BY_THE_PODS`).

    Raises:
        ValueError: an entry that is not a ``Logger`` class, named.
    """
    from kubetune.logger import WRITTEN_BY_THE_PODS, Logger

    loggers = []
    for cls in given or ():
        if cls in WRITTEN_BY_THE_PODS:
            continue
        if not (isinstance(cls, type) and issubclass(cls, Logger)):
            name = getattr(cls, "__name__", type(cls).__name__)
            raise ValueError(f"loggers: {name} is not supported by kubetune: {REFUSED['loggers']}")
        loggers.append(cls)
    return tuple(loggers)


def driver_callbacks(given: Any) -> list:
    """The ``callbacks`` the Experiment's driver pod runs: every ``tune.Callback`` of ``given`` but those the trial
    pods do anyway (:data:`kubetune.logger.WRITTEN_BY_THE_PODS`: their hooks are not called).

    Raises:
        ValueError: an entry that is not a ``tune.Callback``, named.
    """
    from kubetune.callback import Callback
    from kubetune.logger import WRITTEN_BY_THE_PODS

    callbacks = []
    for item in given or ():
        if type(item) in WRITTEN_BY_THE_PODS:
            continue
        if not isinstance(item, Callback):
            raise ValueError(f"callbacks: {type(item).__name__} is not supported by kubetune: {REFUSED['callbacks']}")
        callbacks.append(item)
    return callbacks


def run(
    run_or_experiment: Any,
    name: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    stop: Any = None,
    time_budget_s: float | datetime.timedelta | None = None,
    config: dict | None = None,
    resources_per_trial: Any = None,
    num_samples: int = 1,
    storage_path: str | None = None,
    search_alg: Any = None,
    scheduler: Any = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    max_failures: int = 0,
    fail_fast: bool = False,
    restore: str | None = None,
    raise_on_failed_trial: bool = True,
    verbose: int = 2,
    progress_reporter: Any = None,
    max_concurrent_trials: int | None = None,
    trial_name_creator: Callable[[Any], str] | None = None,
    *,
    namespace: str | None = None,
    image: str | None = None,
    storage: str | dict | None = None,
    template: dict | None = None,
    queue_name: str | None = None,
    context: str | None = None,
    poll_interval_s: float = 1.0,
    checkpoint_config: CheckpointConfig | None = None,
    **ray_kwargs: Any,
) -> Any:
    """Run a tuning experiment on the cluster, as Ray's ``tune.run`` does locally.

    Ray's arguments keep Ray's names and meanings (see ``docs/sdk.md`` for each); the others
    are Kubernetes': ``namespace`` (default: the kubeconfig context's), ``image`` (the trial image;
    default: the operator's), ``storage`` (the storage URI or a dict of ``spec.storage``;
    ``storage_path`` is the same URI), ``template`` (``spec.template``), ``queue_name`` (``spec.queueName``:
    the Kueue LocalQueue that admits the trial pods), ``context`` (kubeconfig context). ``restore`` names an
    existing Experiment to attach to instead of creating one.
    ``checkpoint_config`` (Ray 2.x's :class:`CheckpointConfig`) takes the place of ``checkpoint_freq``,
    ``checkpoint_at_end``, ``keep_checkpoints_num`` and ``checkpoint_score_attr``. After the run, the
    searcher's ``total_samples`` is the number of trials. ``trial_name_creator`` gives each trial a display
    name (Ray's ``str(trial)``): its first pod calls it, and tables and the analysis show the name; the Trial
    objects keep their names, ``<experiment>-<index>``.

    Ray's other keywords, those of Ray 0.8's user guide included (``upload_dir``, ``resume``, ``return_trials``,
    ``loggers``, ...), are honoured or refused by name, with why and what to use (:func:`legacy_run_args`).

    Returns:
        A :class:`kubetune.sdk.analysis.ExperimentAnalysis` of the ended Experiment; with ``return_trials=True``
        (Ray 0.8) its trials (:attr:`~kubetune.sdk.analysis.ExperimentAnalysis.trials`) instead.

    Raises:
        ValueError: an argument kubetune cannot honour, or the operator refused the spec
            (:class:`kubetune.sdk.client.InvalidExperiment`); nothing is left running.
        TuneError: trials failed and ``raise_on_failed_trial`` is set, or a callback raised in the driver pod.
        Detached: Ctrl-C (a ``KeyboardInterrupt``): detached, the Experiment keeps running; the message
            says how to re-attach and how to stop it.
        kubetune.sdk.client.ClusterUnavailable: no kubeconfig, an unknown context, the API server unreachable, or
            kubetune's CRDs not installed: checked before anything is uploaded.
        kubetune.sdk.client.ExperimentNotFound: ``restore`` names no Experiment, or the Experiment was deleted
            while the run followed it.
        kubetune.sdk.client.ExperimentExists: an Experiment of the run's name is in the namespace.
        kubernetes.client.ApiException: the API refused the Experiment otherwise.
    """
    restore, storage, return_trials, callbacks, loggers = legacy_run_args(
        ray_kwargs, name=name, restore=restore, storage=storage or storage_path
    )
    if checkpoint_config is not None:
        if checkpoint_freq or checkpoint_at_end or keep_checkpoints_num or checkpoint_score_attr:
            raise ValueError(
                "checkpoint_config and checkpoint_freq, checkpoint_at_end, keep_checkpoints_num or "
                "checkpoint_score_attr were both given; set them in checkpoint_config only"
            )
        checkpoint_freq, checkpoint_at_end, keep_checkpoints_num, checkpoint_score_attr = _checkpoint_args(
            checkpoint_config
        )
    analysis, _, trials = _launch(
        run_or_experiment,
        name=name,
        namespace=namespace,
        context=context,
        restore=restore,
        storage=storage,
        resources_per_trial=resources_per_trial,
        config=config,
        verbose=verbose,
        progress_reporter=progress_reporter,
        poll_interval_s=poll_interval_s,
        num_samples=num_samples,
        metric=metric,
        mode=mode,
        stop=stop,
        time_budget_s=time_budget_s,
        search_alg=search_alg,
        scheduler=scheduler,
        max_concurrent_trials=max_concurrent_trials,
        checkpoint_freq=checkpoint_freq,
        checkpoint_at_end=checkpoint_at_end,
        keep_checkpoints_num=keep_checkpoints_num,
        checkpoint_score_attr=checkpoint_score_attr,
        max_failures=max_failures,
        fail_fast=fail_fast,
        image=image,
        template=template,
        queue_name=queue_name,
        trial_name_creator=trial_name_creator,
        callbacks=callbacks,
        loggers=loggers,
    )
    failed = failed_trials(trials)
    if failed and raise_on_failed_trial:
        first, message = next(iter(failed.items()))
        raise TuneError(f"Trials did not complete: {list(failed)}; {first}: {message.strip().splitlines()[-1:]}")
    return analysis.trials if return_trials else analysis


def run_experiments(experiments: dict, *, verbose: int = 2, raise_on_failed_trial: bool = True, **kwargs: Any) -> list:
    """Run Ray's experiment dicts one after another (Ray's ``tune.run_experiments``).

    Args:
        experiments: name → ``{"run": trainable, "config": ..., "stop": ..., "num_samples": ...,
            "resources_per_trial": ..., "checkpoint_freq": ..., "checkpoint_at_end": ...,
            "keep_checkpoints_num": ..., "checkpoint_score_attr": ..., "max_failures": ...}``.
        verbose, raise_on_failed_trial, kwargs: passed to :func:`run` for each.

    Returns:
        The trials of all experiments (:class:`kubetune.sdk.analysis.TrialRecord`).
    """
    trials = []
    for name, spec in experiments.items():
        spec = dict(spec)
        trainable = spec.pop("run")
        analysis = run(
            trainable, name=name, verbose=verbose, raise_on_failed_trial=raise_on_failed_trial, **spec, **kwargs
        )
        trials.extend(analysis.trials)
    return trials


class Tuner:
    """Ray 2.x's ``Tuner``: ``Tuner(trainable, param_space=..., tune_config=..., run_config=...).fit()``.

    Args:
        trainable: a Trainable class, a function or ``"module:Name"``.
        param_space: the parameter space.
        tune_config: what to search and how.
        run_config: name, storage (``storage_path`` is the storage URI), stop, checkpoints, failures.
        namespace, image, storage, template, queue_name, context, resources_per_trial: kubetune's
            Kubernetes arguments, as :func:`run` takes them.
        poll_interval_s: seconds between two looks at the Experiment.
    """

    def __init__(
        self,
        trainable: Any,
        *,
        param_space: dict | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
        namespace: str | None = None,
        image: str | None = None,
        storage: str | dict | None = None,
        template: dict | None = None,
        queue_name: str | None = None,
        context: str | None = None,
        resources_per_trial: Any = None,
        poll_interval_s: float = 1.0,
    ):
        self.trainable, self.param_space = trainable, param_space
        self.tune_config, self.run_config = tune_config or TuneConfig(), run_config or RunConfig()
        self.namespace, self.image, self.storage, self.template = namespace, image, storage, template
        self.queue_name = queue_name
        self.context, self.resources_per_trial, self.poll_interval_s = context, resources_per_trial, poll_interval_s
        self._restore: str | None = None
        self._result_grid: Any = None

    @classmethod
    def restore(
        cls,
        path: str,
        trainable: Any = None,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        resume_config: Any = None,
        **kwargs: Any,
    ) -> "Tuner":
        """Attach to the Experiment named ``path`` (Ray takes a directory; here the Experiment's name).

        ``resume_config`` (:class:`kubetune.sdk.resume.ResumeConfig`) or Ray 2.x's flags say what becomes of
        the trials; only Ray's default is possible (unfinished trials go on, ended ones keep their outcome).

        Raises:
            NotImplementedError: another choice (why and what to use instead).
        """
        from kubetune.sdk.resume import ResumeConfig

        (resume_config or ResumeConfig.from_flags(resume_unfinished, resume_errored, restart_errored)).check()
        tuner = cls(trainable, **kwargs)
        tuner._restore = path
        return tuner

    def fit(self) -> Any:
        """Run (or re-attach to) the Experiment and return its :class:`kubetune.sdk.analysis.ResultGrid`.

        Failed trials do not raise (Ray's behaviour): they are in ``ResultGrid.errors``.

        Raises:
            As :func:`run`, but :class:`TuneError` only when a callback raised in the driver pod.
        """
        tc, rc = self.tune_config, self.run_config
        if tc.trial_dirname_creator is not None:
            raise ValueError(f"trial_dirname_creator is not supported by kubetune: {REFUSED['trial_dirname_creator']}")
        callbacks = driver_callbacks(rc.callbacks)
        cc = rc.checkpoint_config or CheckpointConfig()
        fc = rc.failure_config or FailureConfig()
        checkpoint_freq, checkpoint_at_end, keep, score = _checkpoint_args(cc)
        from kubetune.sdk.analysis import ResultGrid

        analysis, _, _ = _launch(
            self.trainable,
            name=rc.name,
            namespace=self.namespace,
            context=self.context,
            restore=self._restore,
            storage=self.storage or rc.storage_path,
            resources_per_trial=self.resources_per_trial,
            config=self.param_space,
            verbose=rc.verbose,
            progress_reporter=rc.progress_reporter,
            poll_interval_s=self.poll_interval_s,
            num_samples=tc.num_samples,
            metric=tc.metric,
            mode=tc.mode,
            stop=rc.stop,
            time_budget_s=tc.time_budget_s,
            search_alg=tc.search_alg,
            scheduler=tc.scheduler,
            max_concurrent_trials=tc.max_concurrent_trials,
            checkpoint_freq=checkpoint_freq,
            checkpoint_at_end=checkpoint_at_end,
            keep_checkpoints_num=keep,
            checkpoint_score_attr=score,
            max_failures=fc.max_failures,
            fail_fast=fc.fail_fast,
            image=self.image,
            template=self.template,
            queue_name=self.queue_name,
            trial_name_creator=tc.trial_name_creator,
            callbacks=callbacks,
            entry="Tuner",
        )
        self._result_grid = ResultGrid(analysis)
        return self._result_grid

    def get_results(self) -> Any:
        """Return the :class:`ResultGrid` of the last :meth:`fit`.

        Raises:
            RuntimeError: :meth:`fit` has not returned yet.
        """
        if self._result_grid is None:
            raise RuntimeError("call fit() first")
        return self._result_grid
