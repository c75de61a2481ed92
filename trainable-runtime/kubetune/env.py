"""The environment contract between the operator and the in-pod runtime.

The operator's pod builder (``kubetune_operator.builders``) writes these
variables into every trial pod; the runtime (``kubetune.runtime``) reads them
back with :func:`read_trial_env`. This module is the single place their names
and encodings are defined, so the two sides cannot drift apart.

Values are plain strings; structured values are JSON. The trial's config is not a variable: Linux
refuses any single environment string over 128 KiB (``MAX_ARG_STRLEN``), and a config may be larger
(:data:`kubetune.limits.MAX_FIELD_BYTES`). It is the JSON file :data:`CONFIG_PATH` (key
:data:`CONFIG_KEY` of the attempt's Secret, which also holds the collector token, mounted read-only at
:data:`ATTEMPT_DIR`), named by ``KUBETUNE_CONFIG_FILE``. Storage credentials are
not part of the contract: they reach the pod through ``envFrom`` of the
experiment's ``storage.credentialsSecret`` (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ...) or boto3's default chain (IRSA, workload
identity), and are never copied into any other variable.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kubetune.limits import INT64

NAMESPACE = "KUBETUNE_NAMESPACE"
EXPERIMENT = "KUBETUNE_EXPERIMENT"
TRIAL = "KUBETUNE_TRIAL"
ATTEMPT = "KUBETUNE_ATTEMPT"
#: Path of the file holding the trial's config as JSON (:func:`encode_trial_config`).
CONFIG_FILE = "KUBETUNE_CONFIG_FILE"
TRAINABLE_ENTRYPOINT = "KUBETUNE_TRAINABLE_ENTRYPOINT"
TRAINABLE_SOURCE = "KUBETUNE_TRAINABLE_SOURCE"
TRAINABLE_NAME = "KUBETUNE_TRAINABLE_NAME"
TRAINABLE_PICKLE_URI = "KUBETUNE_TRAINABLE_PICKLE_URI"
STOP = "KUBETUNE_STOP"
CHECKPOINT = "KUBETUNE_CHECKPOINT"
METRIC = "KUBETUNE_METRIC"
MODE = "KUBETUNE_MODE"
STORAGE_URI = "KUBETUNE_STORAGE_URI"
STORAGE_ENDPOINT = "KUBETUNE_STORAGE_ENDPOINT"
STORAGE_REGION = "KUBETUNE_STORAGE_REGION"
RESTORE_FROM = "KUBETUNE_RESTORE_FROM"
#: JSON: the PBT policy line of the exploit this attempt carries out (Ray's ``pbt_policy_<trial>.txt``).
PBT_POLICY = "KUBETUNE_PBT_POLICY"
#: JSON: the user functions this attempt calls before it restores a PBT donor's checkpoint
#: (``{"resample": [{"path": [key, ...], "function": uri, "int": bool}], "customExploreFn": uri | null}``).
PBT_EXPLORE = "KUBETUNE_PBT_EXPLORE"
COLLECTOR_URL = "KUBETUNE_COLLECTOR_URL"
TOKEN = "KUBETUNE_TOKEN"
POD_NAME = "KUBETUNE_POD_NAME"
GRACE_PERIOD = "KUBETUNE_GRACE_PERIOD_S"
DECISION_WAIT = "KUBETUNE_DECISION_WAIT_S"
#: A container trial's metrics sidecar (``kubetune.runtime.sidecar``): what it reads, as JSON: ``kind``
#: (``File``, ``TensorFlowEvent``, ``Push``; ``StdOut`` when it only saves the checkpoint folder), ``path`` or
#: ``port``, ``format``, ``metricsFormat``, ``iterationKey``, ``objectives``.
METRICS_SOURCE = "KUBETUNE_METRICS_SOURCE"
#: A container trial's checkpoint folder, in its container's environment (``spec.checkpoint.path``): the one
#: variable of kubetune's a container trial gets, and only when it keeps checkpoints.
CHECKPOINT_DIR = "KUBETUNE_CHECKPOINT_DIR"
#: The checkpoint folder of a container trial, for kubetune's restore init container and metrics sidecar
#: (:mod:`kubetune.runtime.checkpoint_folder`), as JSON: ``path``, ``trialDir``, ``state``, ``restoreFrom``,
#: ``atEnd``, ``keep``, ``scoreAttribute``.
CHECKPOINT_FOLDER = "KUBETUNE_CHECKPOINT_FOLDER"
#: Where a container trial's metrics sidecar writes the trial's result history (``result.json``, ``progress.csv``,
#: ``params.json``, as a runtime trial's pod does), as JSON: ``trialDir`` (its storage folder), ``state`` (a
#: writable folder for the working copies), ``configFile`` (the trial's config, the attempt's Secret mounted).
RESULT_LOG = "KUBETUNE_RESULT_LOG"
#: ``spec.resourcesPerTrial`` as JSON (``{"cpu": "1"}`` when unset): what ``tune.get_context()`` tells the trial.
RESOURCES = "KUBETUNE_RESOURCES"
#: A trial's gang (``spec.resourcesPerTrial.workers``): this pod's rank (0: the head, which runs the trainable,
#: reports and checkpoints; 1..: workers), how many pods the gang has, each rank's host name (comma-separated,
#: index = rank), and the ``module:function`` the workers run instead of the trainable, if any.
RANK = "KUBETUNE_RANK"
WORLD_SIZE = "KUBETUNE_WORLD_SIZE"
HOSTS = "KUBETUNE_HOSTS"
WORKER_ENTRYPOINT = "KUBETUNE_WORKER_ENTRYPOINT"
#: ``spec.trialNameCreator.pickleURI``: the ``trial_name_creator`` this attempt calls and reports
#: (:mod:`kubetune.runtime.trial_name`); set only while the Trial has no display name. With it, the Trial's
#: ``spec.tag`` (Ray's ``experiment_tag``, which the creator may read) is :data:`TRIAL_TAG`.
TRIAL_NAME_CREATOR = "KUBETUNE_TRIAL_NAME_CREATOR"
TRIAL_TAG = "KUBETUNE_TRIAL_TAG"
#: The Trial's display name (``status.displayName``) an earlier attempt reported: the trainable's ``trial_name``.
DISPLAY_NAME = "KUBETUNE_DISPLAY_NAME"

#: Where the operator mounts the attempt's Secret (read-only) in the trial container.
ATTEMPT_DIR = "/var/run/kubetune"
#: Key of the trial's config in the attempt's Secret, and so the config file's name in :data:`ATTEMPT_DIR`.
CONFIG_KEY = "config.json"
#: The config file the operator names in ``KUBETUNE_CONFIG_FILE``.
CONFIG_PATH = f"{ATTEMPT_DIR}/{CONFIG_KEY}"
#: Where the runtime writes its termination message (Kubernetes' default path), ...
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
#: ... or the file this variable names: runs outside a pod (tests, local debugging); the operator does not set it.
TERMINATION_MESSAGE_PATH_VAR = "KUBETUNE_TERMINATION_MESSAGE_PATH"
#: The port Katib's SDK dials katib-db-manager on (``kubeflow.katib.report_metrics``): a ``Push`` trial's metrics
#: sidecar serves Katib's ``ReportObservationLog`` there with ``metricsCollector.katibDBManager``.
KATIB_DB_PORT = 6789
#: Path of the results endpoint on the operator's collector. The runtime POSTs
#: JSON ``{"namespace", "experiment", "trial", "attempt": int, "results": [result, ...],
#: "checkpoint": {"uri", "iteration"} | null, "done": bool, "stalled": {"reason", "message"}, "explored": config,
#: "displayName": str}`` with
#: header ``Authorization: Bearer <KUBETUNE_TOKEN>``; the reply is ``{"decision": one of DECISIONS}``
#: (200), or 400 malformed, 401 bad token, 413 body over ``MAX_BATCH_BYTES``. ``stalled`` is there
#: while something outside the trainable stalls the attempt (a reason of :data:`STALL_REASONS`, and a
#: message of at most :data:`MAX_STALL_MESSAGE` characters), and left out once nothing does. ``explored`` is the
#: config an attempt started with ``KUBETUNE_PBT_EXPLORE`` chose, on every batch until one is answered; so is
#: ``displayName``, what the attempt's ``KUBETUNE_TRIAL_NAME_CREATOR`` returned.
COLLECTOR_RESULTS_PATH = "/v1alpha1/results"
#: What may stall an attempt: its object storage has not answered for ``UNREACHABLE_AFTER_S`` seconds.
STALL_REASONS = ("StorageUnreachable",)
#: Longest ``stalled.message`` of a batch, in characters.
MAX_STALL_MESSAGE = 1024
#: On exit 0 the runtime writes ``{"outcome": ..., "iteration": int, "checkpoint": uri | null,
#: "result": compacted last result | null}`` (:func:`compact_result`) as JSON to the termination
#: message, so the operator knows how the attempt ended and its last result even after its own
#: restart: the trial finished (``done``, stop criteria), the collector said stop, the collector said
#: pause, SIGTERM ended it (after a final checkpoint), or the collector answered 401: the attempt is
#: stale (a newer one owns the trial), so it stopped at once without writing anything more. On a
#: non-zero exit the message is the traceback's tail instead.
OUTCOME_COMPLETED = "completed"
OUTCOME_STOPPED = "stopped"
OUTCOME_PAUSED = "paused"
OUTCOME_TERMINATED = "terminated"
OUTCOME_FENCED = "fenced"
#: Decisions the collector may reply with.
DECISIONS = ("continue", "stop", "pause", "checkpoint")
#: The driver pod's description (``spec.driver``, ``kubetune_operator.driver``), JSON: ``{"namespace", "experiment",
#: "collectorURL", "callbacksURI", "searcherURI", "stateURI", "storageEndpoint", "storageRegion", "stop",
#: "numSamples"}`` (``callbacksURI`` or ``searcherURI`` may be null); its token is ``KUBETUNE_TOKEN``.
DRIVER = "KUBETUNE_DRIVER"
#: Path of the driver pod's events on the collector: ``GET ?namespace=&experiment=&after=SEQ&wait=S&declined=TRIAL``
#: with the driver's bearer token (``wait``: seconds an answer with no event may wait for one, at most 20; ``declined``:
#: the trial its searcher answered "not now" for, which alone does not end the wait) answers ``{"events": [event, ...],
#: "next": SEQ, "finished": bool, "suggest": TRIAL | null}``: the journal's entries after ``after`` that Ray's driver
#: turns into callback and searcher calls, in the journal's order, each ``{"seq", "kind": "add", "trial", "config"}``,
#: ``{"seq", "kind": "suggested", "trial", "suggestion"}`` (a suggestion of the driver's searcher, journaled),
#: ``{"seq", "kind": "results", "trial", "attempt", "results"}``, ``{"seq", "kind": "checkpoint", "trial", "attempt",
#: "uri", "iteration"}`` (a checkpoint committed) or ``{"seq", "kind": "end", "trial", "how": "complete" | "remove" |
#: "error", "result"}``; ``next`` the last entry read (ask with it next); ``finished`` that no entry will follow (every
#: trial ended, the search is over); ``suggest`` the new trial the operator asks the driver's searcher a config for.
#: Asking with ``after`` tells the operator that the driver has kept every entry up to it (its state is saved): it may
#: forget them.
DRIVER_EVENTS_PATH = "/v1alpha1/driver/events"
#: Path where the driver pod posts its answers: ``POST ?namespace=&experiment=`` with the driver's bearer token and
#: ``{"suggestions": {TRIAL: config | "FINISHED"}, "checkpoints": {TRIAL: [attempt, iteration]}}`` (its searcher's
#: configs; its callbacks' ``result[SHOULD_CHECKPOINT]``); answered ``{"taken": [TRIAL, ...]}`` once what the operator
#: takes is journaled (suggestions it did not ask for and stale checkpoint requests are ignored; each suggestion taken
#: comes back as a ``suggested`` event).
DRIVER_ANSWERS_PATH = "/v1alpha1/driver/answers"
#: The driver pod's exit code when a callback raised: the Experiment fails (Ray's run raises), it is not retried.
DRIVER_CALLBACK_FAILED_EXIT = 3
#: Largest request body the collector accepts, in bytes.
MAX_BATCH_BYTES = 1 << 20


@dataclass
class CheckpointPolicy:
    """``spec.checkpoint`` of the Experiment.

    Attributes:
        frequency: checkpoint every this many iterations; 0 disables periodic checkpoints.
        atEnd: checkpoint when the trial ends (stop criteria, ``done``, stop decision).
        keep: how many committed checkpoints to keep; 0 keeps all. The newest is always kept.
        scoreAttribute: result key ranking checkpoints for ``keep`` (higher is better;
            prefix ``min-`` for lower is better, as Ray's ``checkpoint_score_attr``).
    """

    frequency: int = 0
    atEnd: bool = True
    keep: int = 0
    scoreAttribute: str = "training_iteration"


@dataclass
class TrialEnv:
    """Everything the runtime needs to run one trial attempt, as read from the env.

    Attributes:
        trial_dir_uri: ``<storage.uri>/<namespace>/<experiment>/<uid[:8]>/<trial>`` (``s3://`` or ``file://``).
        restore_from: checkpoint URI the trial's current lineage starts from (``spec.restoreFrom``,
            or a PBT donor's checkpoint); the trial's own checkpoints taken since win over it.
        pbt_policy: the PBT exploit this attempt carries out, as Ray's policy line ``[trial, donor,
            trial iteration, donor iteration, donor config, new config]``; None for other attempts.
        pbt_explore: the user functions of a PBT exploit this attempt calls before restoring
            (:data:`PBT_EXPLORE`); None when the operator chose the whole config.
        collector_url: base URL of the operator's collector, or None to run without one.
        grace_period_s: the pod's ``terminationGracePeriodSeconds``: time between SIGTERM and SIGKILL.
        decision_wait_s: longest the runtime waits, after each result, for the collector's answer to
            it before the next step (the scheduler may stop or pause the trial at that result, as
            Ray decides before the next ``step()``); 0: never waits.
        rank: this pod's rank in the trial's gang (0 for the head, the only pod of a one-pod trial).
        world_size: pods in the trial's gang (1 without workers).
        hosts: each rank's DNS name in the gang's headless Service, index = rank (empty without workers).
        worker_entrypoint: ``module:function`` the workers (rank > 0) call with the config instead of the
            trainable, or None.
        name_creator: URI of the pickled ``trial_name_creator`` this attempt calls, or None.
        tag: the Trial's ``spec.tag`` (given with ``name_creator``), or None.
        display_name: the Trial's display name an earlier attempt reported, or None.
    """

    namespace: str
    experiment: str
    trial: str
    attempt: int
    config: dict
    trial_dir_uri: str
    entrypoint: str | None = None
    source: str | None = None
    name: str | None = None
    pickle_uri: str | None = None
    stop: dict = field(default_factory=dict)
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    metric: str | list[str] | None = None
    mode: str | list[str] | None = None
    storage_endpoint: str | None = None
    storage_region: str | None = None
    restore_from: str | None = None
    pbt_policy: list | None = None
    pbt_explore: dict | None = None
    collector_url: str | None = None
    token: str | None = None
    pod_name: str | None = None
    grace_period_s: float = 30.0
    decision_wait_s: float = 0.0
    rank: int = 0
    world_size: int = 1
    hosts: list[str] = field(default_factory=list)
    worker_entrypoint: str | None = None
    name_creator: str | None = None
    tag: str | None = None
    display_name: str | None = None


def encode_trial_env(env: TrialEnv, config_file: str = CONFIG_PATH) -> dict[str, str]:
    """Return the variables for ``env`` (None fields are left out), as the pod builder writes them; the
    config is not one of them: it is the file ``config_file`` (:func:`encode_trial_config`), and neither are
    a gang member's :data:`RANK`, :data:`WORLD_SIZE` and :data:`HOSTS`, which differ by pod
    (``kubetune_operator.gang.rendezvous_env`` writes them)."""
    pairs: dict[str, Any] = {
        NAMESPACE: env.namespace,
        EXPERIMENT: env.experiment,
        TRIAL: env.trial,
        ATTEMPT: str(env.attempt),
        CONFIG_FILE: config_file,
        STORAGE_URI: env.trial_dir_uri,
        TRAINABLE_ENTRYPOINT: env.entrypoint,
        TRAINABLE_SOURCE: env.source,
        TRAINABLE_NAME: env.name,
        TRAINABLE_PICKLE_URI: env.pickle_uri,
        STOP: json.dumps(env.stop, sort_keys=True),
        CHECKPOINT: json.dumps(env.checkpoint.__dict__, sort_keys=True),
        METRIC: _encode_objective(env.metric),
        MODE: _encode_objective(env.mode),
        STORAGE_ENDPOINT: env.storage_endpoint,
        STORAGE_REGION: env.storage_region,
        RESTORE_FROM: env.restore_from,
        PBT_POLICY: json.dumps(env.pbt_policy) if env.pbt_policy is not None else None,
        PBT_EXPLORE: json.dumps(env.pbt_explore) if env.pbt_explore is not None else None,
        COLLECTOR_URL: env.collector_url,
        TOKEN: env.token,
        POD_NAME: env.pod_name,
        GRACE_PERIOD: f"{env.grace_period_s:g}",
        DECISION_WAIT: f"{env.decision_wait_s:g}" if env.decision_wait_s else None,
        WORKER_ENTRYPOINT: env.worker_entrypoint,
        TRIAL_NAME_CREATOR: env.name_creator,
        TRIAL_TAG: env.tag,
        DISPLAY_NAME: env.display_name,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def encode_trial_config(config: Mapping) -> str:
    """The content of a trial's config file (``TrialEnv.config``): JSON, UTF-8, keys sorted."""
    return json.dumps(config, sort_keys=True, ensure_ascii=False)


def _encode_objective(value: str | Sequence[str] | None) -> str | None:
    """``spec.metric``/``spec.mode`` as a variable: a string as is, a multi-objective list as JSON."""
    return json.dumps(list(value)) if isinstance(value, (list, tuple)) else value


def _decode_objective(text: str | None) -> str | list[str] | None:
    """Inverse of :func:`_encode_objective` (a JSON list of strings is a list; anything else a string)."""
    if text and text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return text


def read_trial_env(environ: Mapping[str, str] | None = None, config_text: str | None = None) -> TrialEnv:
    """Parse the trial variables from ``environ`` (default ``os.environ``) and the config file they name.

    Args:
        config_text: the config file's content, when it is not to be read from ``KUBETUNE_CONFIG_FILE``.

    Raises:
        KeyError: a required variable (namespace, experiment, trial, storage URI, config file) is missing.
        ValueError: a JSON variable or the config file does not parse, or the config file cannot be read.
    """
    e = os.environ if environ is None else environ
    if config_text is None:
        try:
            with open(e[CONFIG_FILE], encoding="utf-8") as file:
                config_text = file.read()
        except OSError as exc:
            raise ValueError(f"cannot read the trial's config file {e[CONFIG_FILE]}: {exc}") from exc
    config = json.loads(config_text)
    if not isinstance(config, dict):
        raise ValueError(f"the trial's config is a JSON {type(config).__name__}, not an object")
    return TrialEnv(
        namespace=e[NAMESPACE],
        experiment=e[EXPERIMENT],
        trial=e[TRIAL],
        attempt=int(e.get(ATTEMPT, "0")),
        config=config,
        trial_dir_uri=e[STORAGE_URI],
        entrypoint=e.get(TRAINABLE_ENTRYPOINT),
        source=e.get(TRAINABLE_SOURCE),
        name=e.get(TRAINABLE_NAME),
        pickle_uri=e.get(TRAINABLE_PICKLE_URI),
        stop=json.loads(e.get(STOP, "{}")),
        checkpoint=CheckpointPolicy(**json.loads(e.get(CHECKPOINT, "{}"))),
        metric=_decode_objective(e.get(METRIC)),
        mode=_decode_objective(e.get(MODE)),
        storage_endpoint=e.get(STORAGE_ENDPOINT),
        storage_region=e.get(STORAGE_REGION),
        restore_from=e.get(RESTORE_FROM),
        pbt_policy=json.loads(e[PBT_POLICY]) if e.get(PBT_POLICY) else None,
        pbt_explore=json.loads(e[PBT_EXPLORE]) if e.get(PBT_EXPLORE) else None,
        collector_url=e.get(COLLECTOR_URL),
        token=e.get(TOKEN),
        pod_name=e.get(POD_NAME),
        grace_period_s=float(e.get(GRACE_PERIOD, "30")),
        decision_wait_s=float(e.get(DECISION_WAIT, "0")),
        rank=int(e.get(RANK, "0")),
        world_size=int(e.get(WORLD_SIZE, "1")),
        hosts=[h for h in e.get(HOSTS, "").split(",") if h],
        worker_entrypoint=e.get(WORKER_ENTRYPOINT),
        name_creator=e.get(TRIAL_NAME_CREATOR),
        tag=e.get(TRIAL_TAG),
        display_name=e.get(DISPLAY_NAME),
    )


# ----- results in the operator's hands ---------------------------------------------------------
#: Longest string value kept in a compacted result.
MAX_RESULT_STRING = 256
#: Result keys kept first in a compacted result, after the experiment's metric (Ray's auto-filled progress keys).
PROGRESS_KEYS = ("training_iteration", "time_total_s", "time_this_iter_s", "timesteps_total", "episodes_total", "done")
#: Auto-filled result keys left out of a compacted result: per-process details, or already in the Trial.
BOOKKEEPING_KEYS = frozenset(
    {
        "config",
        "date",
        "experiment_id",
        "experiment_tag",
        "hostname",
        "node_ip",
        "pid",
        "timestamp",
        "trial_id",
        "time_since_restore",
        "timesteps_since_restore",
        "iterations_since_restore",
        "warmup_time",
    }
)


def compact_result(result: Mapping, metric: str | Sequence[str] | None, limit: int) -> dict:
    """Return the part of a training result the operator keeps: a Trial's ``status.lastResult``, and
    the ``result`` of the runtime's termination message.

    Nested dicts are flattened with ``/`` (as Ray's ``progress.csv``);
    :data:`BOOKKEEPING_KEYS` are dropped; only booleans, finite numbers (Kubernetes'
    JSON has no NaN) and strings up to :data:`MAX_RESULT_STRING` characters are kept.
    Keys are taken in the order ``metric`` (each of a list of objectives), :data:`PROGRESS_KEYS`, then
    the rest sorted, while the JSON stays within ``limit`` bytes.
    """
    flat: dict[str, Any] = {}
    _flatten(result, "", flat)
    metrics = list(metric) if isinstance(metric, (list, tuple)) else [metric] if metric else []
    order = metrics + list(PROGRESS_KEYS) + sorted(flat)
    whole = {key: flat[key] for key in order if key in flat}
    if len(json.dumps(whole, separators=(",", ":"))) <= limit:  # ASCII (ensure_ascii): characters are bytes
        return whole  # the usual case: one encoding instead of one per key
    out: dict[str, Any] = {}
    size = 2  # "{}"
    for key in order:
        if key not in flat or key in out:
            continue
        item = len(json.dumps({key: flat[key]}, separators=(",", ":")).encode()) - 2 + (1 if out else 0)
        if size + item <= limit:
            out[key] = flat[key]
            size += item
    return out


def _flatten(value: Mapping, prefix: str, out: dict) -> None:
    for key, item in value.items():
        name = f"{prefix}{key}"
        if not prefix and name in BOOKKEEPING_KEYS:
            continue
        if isinstance(item, Mapping):
            _flatten(item, f"{name}/", out)
        elif isinstance(item, bool) or (isinstance(item, int) and -INT64 <= item < INT64):
            out[name] = item
        elif isinstance(item, float) and math.isfinite(item):
            out[name] = item
        elif isinstance(item, str) and len(item) <= MAX_RESULT_STRING:
            out[name] = item
