"""Manifests of the objects the operator creates: Trials and their pods. Pure functions, dicts in and out.

The reconcile loop calls :func:`build_trial` for each config the searcher
suggests and :func:`build_pod` for each attempt of a trial, then creates the
returned objects (409 AlreadyExists counts as success: the names are
deterministic, see :func:`kubetune_operator.labels.trial_name`). Nothing here
talks to the API server, so unit tests check every manifest without a cluster.
The pod's environment, and the config file its attempt Secret carries, are the contract of
:mod:`kubetune.env`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Mapping

from kubetune.env import (
    ATTEMPT_DIR,
    CHECKPOINT_DIR,
    CONFIG_KEY,
    CONFIG_PATH,
    RESOURCES,
    RESULT_LOG,
    STORAGE_ENDPOINT,
    STORAGE_REGION,
    TERMINATION_MESSAGE_PATH,
    TOKEN,
    CheckpointPolicy,
    TrialEnv,
    encode_trial_config,
    encode_trial_env,
)
from kubetune.resultkeys import spec_objectives

from .container_trials import (
    CHECKPOINT_VOLUME,
    METRICS_SIDECAR,
    METRICS_VOLUME,
    RESTORE_CONTAINER,
    STATE_DIR,
    STATE_VOLUME,
    checkpoint_path,
    folder_env,
    katib_report_metrics,
    kubetune_security,
    metrics_sidecar,
    references,
    restore_container,
    shared_folder,
    trial_container,
)
from .labels import (
    API_VERSION,
    LABEL_ATTEMPT,
    LABEL_EXPERIMENT,
    LABEL_MANAGED_BY,
    LABEL_TRIAL,
    MANAGED_BY,
    TRIAL_CONTAINER,
    TRIAL_KIND,
    label_value,
    pod_name,
    trial_name,
)
from .settings import Settings

__all__ = [
    "build_pod",
    "build_token_secret",
    "build_trial",
    "controller_uid",
    "owner_reference",
    "pod_name",
    "pod_resources",
    "pod_security",
    "sample_pod",
    "token_secret",
    "token_secret_name",
    "trial_dir_uri",
    "trial_name",
    "trial_object",
]

#: Command of the trial container: the in-pod runtime of the ``kubetune`` package.
RUNTIME_COMMAND = ("python", "-m", "kubetune.runtime")
#: Prefix of the variables the operator owns in trial pods; ``template.env`` may not set them.
RESERVED_ENV_PREFIX = "KUBETUNE_"
#: Longest ``spec.tag`` of a Trial; longer tags are cut (the tag is for display only).
MAX_TAG_LENGTH = 256
#: Longest a trial waits for the operator's answer to a result before its next step (seconds; every
#: scheduler but ``fifo``, and ``spec.stoppers``, may stop or pause a trial at a result): as in Ray, the
#: answer applies before the next ``step()``, and an operator that does not answer in time costs at most
#: this per step.
DECISION_WAIT_S = 10.0
#: Key of the collector token in an attempt's token Secret (:func:`build_token_secret`).
TOKEN_SECRET_KEY = "token"
#: Name of the pod volume of the attempt's Secret (mounted read-only at ``kubetune.env.ATTEMPT_DIR``);
#: ``template.volumes`` may not use it.
ATTEMPT_VOLUME = "kubetune-attempt"
#: Name of the pod's scratch volume (an emptyDir at :data:`SCRATCH_DIR`): the trial container's root
#: filesystem is read-only, so ``/tmp`` and ``$HOME`` live there; ``template.volumes`` may not use it.
SCRATCH_VOLUME = "kubetune-scratch"
#: Where the scratch volume is mounted; also the trial's ``HOME`` unless ``template.env`` sets one.
SCRATCH_DIR = "/tmp"
#: Ray's default CPUs per trial, used when ``resourcesPerTrial.cpu`` is absent (the CRD defaults it too).
DEFAULT_CPU = "1"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

# template fields copied as they are into the pod spec
_POD_SPEC_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "runtimeClassName",
    "serviceAccountName",
    "imagePullSecrets",
    "schedulingGates",
    "volumes",
)
#: The label Kueue reads a pod's LocalQueue from (``spec.queueName``).
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"


def owner_reference(obj: Mapping) -> dict:
    """Return a controller owner reference to ``obj`` (an object read from the API server).

    ``controller: true`` and ``blockOwnerDeletion: true``: the garbage collector
    deletes the dependent with its owner, and foreground deletion of the owner
    waits for it.

    Raises:
        ValueError: ``obj`` has no ``metadata.uid`` (it was not read from the API server).
    """
    meta = obj["metadata"]
    if not meta.get("uid"):
        raise ValueError(f"{obj.get('kind')} {meta.get('name')!r} has no metadata.uid")
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Mapping) -> str | None:
    """The uid of ``obj``'s controller (its owner reference with ``controller: true``), or None when none
    controls it (say, a Trial orphaned by ``kubectl delete --cascade=orphan`` of its Experiment)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return next((ref.get("uid") for ref in refs if ref.get("controller")), None)


def trial_dir_uri(storage_uri: str, namespace: str, experiment: str, uid: str, trial: str) -> str:
    """Return ``<storage_uri>/<namespace>/<experiment>/<uid[:8]>/<trial>`` (docs/architecture.md, "Object
    storage layout"): an Experiment deleted and created again under its name (another ``uid``) starts
    afresh instead of restoring the earlier one's checkpoints."""
    return f"{storage_uri.rstrip('/')}/{namespace}/{experiment}/{uid[:8]}/{trial}"


def experiment_trial_dir(experiment: Mapping, settings: Settings, trial: str) -> str:
    """The storage folder of ``trial`` of ``experiment``: :func:`trial_dir_uri` under ``spec.storage.uri``,
    else the operator's default storage.

    Raises:
        ValueError: neither gives a storage URI.
    """
    storage_uri, _, _ = _storage(experiment["spec"], settings)
    meta = experiment["metadata"]
    return trial_dir_uri(storage_uri, meta["namespace"], meta["name"], meta["uid"], trial)


def build_trial(experiment: Mapping, index: int, config: Mapping, tag: str | None = None) -> dict:
    """Return the Trial manifest for trial ``index`` of ``experiment``.

    Args:
        experiment: the Experiment object (with ``metadata.uid``).
        index: the trial's index within the experiment (0, 1, ...); names it, see
            :func:`kubetune_operator.labels.trial_name`.
        config: the resolved config the searcher suggested (JSON values).
        tag: Ray's experiment tag, e.g. ``"3_lr=0.01,layers=2"``; cut to :data:`MAX_TAG_LENGTH`.

    Returns:
        A ``kubetune.io/v1alpha1`` Trial in the experiment's namespace, owned by it (controller),
        labelled with the experiment's name and ``app.kubernetes.io/managed-by: kubetune``.

    Raises:
        ValueError: negative ``index``, or an experiment without ``metadata.uid``.
    """
    meta = experiment["metadata"]
    spec = {"experiment": meta["name"], "index": index, "config": copy.deepcopy(dict(config))}
    if tag:
        spec["tag"] = tag[:MAX_TAG_LENGTH]
    return {
        "apiVersion": API_VERSION,
        "kind": TRIAL_KIND,
        "metadata": {
            "name": trial_name(meta["name"], index),
            "namespace": meta["namespace"],
            "labels": {LABEL_EXPERIMENT: label_value(meta["name"]), LABEL_MANAGED_BY: MANAGED_BY},
            "ownerReferences": [owner_reference(experiment)],
        },
        "spec": spec,
    }


def pod_resources(resources_per_trial: Mapping | None) -> dict:
    """Return the container ``resources`` for ``spec.resourcesPerTrial``.

    CPU is a request only (no limit, so no CFS throttling; Ray's CPUs are logical
    too). Memory is requested and limited to the same amount. GPUs are an
    extended resource (``gpuResourceName``, default ``nvidia.com/gpu``), which
    Kubernetes requires to have requests == limits; zero GPUs adds nothing.

    Args:
        resources_per_trial: ``{"cpu"?, "memory"?, "gpu"?, "gpuResourceName"?}``; quantities are
            ints or Kubernetes quantity strings (``"500m"``, ``"4Gi"``).

    Returns:
        ``{"requests": {...}, "limits": {...}}`` with quantity strings (``limits`` left out when empty).
    """
    spec = resources_per_trial or {}
    requests = {"cpu": str(spec.get("cpu", DEFAULT_CPU))}
    limits = {}
    if spec.get("memory") is not None:
        requests["memory"] = limits["memory"] = str(spec["memory"])
    gpus = int(spec.get("gpu") or 0)
    if gpus:
        name = spec.get("gpuResourceName") or DEFAULT_GPU_RESOURCE
        requests[name] = limits[name] = str(gpus)
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def build_pod(
    experiment: Mapping,
    trial: Mapping,
    attempt: int,
    settings: Settings,
    restore_from: str | None = None,
    pbt_policy: list | None = None,
    pbt_explore: dict | None = None,
) -> dict:
    """Return the manifest of the pod running ``attempt`` of ``trial``.

    The attempt's collector token and the trial's config are not in the manifest: they are in the Secret
    :func:`build_token_secret` makes, ``KUBETUNE_TOKEN`` from its key ``token`` (so ``get pods`` does not
    show it) and the config as the file ``kubetune.env.CONFIG_PATH`` (the Secret mounted read-only at
    ``kubetune.env.ATTEMPT_DIR``; a variable would limit it to Linux's 128 KiB per environment string).

    The pod runs ``python -m kubetune.runtime`` in the experiment's image
    (``settings.trials.default_image`` without one) with the variables of
    :func:`kubetune.env.encode_trial_env`, the storage ``credentialsSecret`` (and
    no other Secret of ours) through ``envFrom``, and the experiment's
    ``template`` laid over it: its labels and annotations (our labels win), pod
    fields, and ``env`` / ``envFrom`` / ``volumeMounts`` appended after ours.
    It meets the *restricted* Pod Security Standard (non-root, UID
    ``settings.trials.run_as_user`` unless ``template.securityContext`` says
    otherwise, RuntimeDefault seccomp, no privilege escalation, all capabilities
    dropped), has a read-only root filesystem with a writable emptyDir at
    :data:`SCRATCH_DIR` that is also ``HOME`` (unless ``template.env`` sets it,
    or ``template.volumeMounts`` mounts its own ``/tmp``), has no service-account token (trial pods never call the API),
    never restarts (a retry is a new attempt), and takes its termination message
    from the runtime's capped file only (``terminationMessagePolicy: File``: what
    the program printed, credentials included, never reaches the Trial's status).
    ``template.containers`` run beside the trial's container.

    With ``spec.trialNameCreator``, a pod of a Trial without ``status.displayName`` calls the creator
    (``kubetune.env.TRIAL_NAME_CREATOR``, with the Trial's ``spec.tag``); once the Trial has one, its pods get
    the name instead (``kubetune.env.DISPLAY_NAME``).

    A container trial's pod (``spec.trainable.command``) runs the user's container as it is
    (:func:`kubetune_operator.container_trials.trial_container`: parameters substituted, no variable or file of
    kubetune's, no read-only root) and, for a ``metricsCollector.kind`` other than ``StdOut``, kubetune's metrics
    sidecar (:func:`kubetune_operator.container_trials.metrics_sidecar`) with, for ``File`` and
    ``TensorFlowEvent``, the emptyDir both mount at the metrics' folder. It needs no storage; with one, the sidecar
    also writes the trial's ``result.json``, ``progress.csv`` and ``params.json`` there, as a runtime trial's pod
    does (the storage credentials and the attempt's Secret mounted in the sidecar alone).

    Args:
        experiment: the Experiment object.
        trial: the Trial object (with ``metadata.uid``), owner of the pod.
        attempt: attempt number (0 for the first pod, +1 for each retry or resume).
        settings: operator settings (collector URL, default image and storage, grace period, UID).
        restore_from: checkpoint URI to restore first. None: ``spec.restoreFrom`` of the
            trial while it has no checkpoint of its own in ``status.checkpoint``, else
            nothing (the runtime restores the trial's latest committed checkpoint).
        pbt_policy: the PBT policy line of the exploit this attempt carries out (the runtime writes
            it to the trial's ``pbt_policy_<trial>.txt``).
        pbt_explore: the user functions of that exploit the attempt calls before restoring
            (``kubetune.env.PBT_EXPLORE``), or None.

    Raises:
        ValueError: no storage URI (neither ``spec.storage.uri`` nor a default in settings),
            ``template.env`` sets a ``KUBETUNE_`` variable, ``template.volumes`` names a volume of kubetune's,
            ``template.containers`` a container of kubetune's, a container trial refers to a parameter its
            config does not have, a negative attempt, or a Trial without ``metadata.uid``.
    """
    spec = experiment["spec"]
    metric, mode = spec_objectives(spec)
    template = copy.deepcopy(spec.get("template") or {})
    namespace = experiment["metadata"]["namespace"]
    exp_name = experiment["metadata"]["name"]
    name_of_trial = trial["metadata"]["name"]
    name = pod_name(name_of_trial, attempt)
    if restore_from is None and not ((trial.get("status") or {}).get("checkpoint") or {}).get("uri"):
        restore_from = trial["spec"].get("restoreFrom")
    trainable = spec.get("trainable") or {}
    user_env = template.get("env") or []
    reserved = sorted(e.get("name", "") for e in user_env if e.get("name", "").startswith(RESERVED_ENV_PREFIX))
    if reserved:
        raise ValueError(f"template.env may not set {', '.join(reserved)}: {RESERVED_ENV_PREFIX}* belong to kubetune")
    taken = {v.get("name") for v in template.get("volumes") or ()} & {
        ATTEMPT_VOLUME,
        SCRATCH_VOLUME,
        METRICS_VOLUME,
        CHECKPOINT_VOLUME,
        STATE_VOLUME,
    }
    if taken:
        raise ValueError(f"template.volumes may not name a volume {', '.join(sorted(taken))}: it belongs to kubetune")
    names = {c.get("name") for c in template.get("containers") or ()} & {
        TRIAL_CONTAINER,
        METRICS_SIDECAR,
        RESTORE_CONTAINER,
    }
    if names:
        raise ValueError(f"template.containers may not name a container {', '.join(sorted(names))}: it is kubetune's")
    if trainable.get("command"):  # a container trial: the user's container as it is
        return _container_trial_pod(experiment, trial, attempt, settings, template, restore_from)
    _, endpoint, region = _storage(spec, settings)
    checkpoint = spec.get("checkpoint") or {}
    display_name = (trial.get("status") or {}).get("displayName")
    name_creator = None if display_name else (spec.get("trialNameCreator") or {}).get("pickleURI")
    trial_env = TrialEnv(
        namespace=namespace,
        experiment=exp_name,
        trial=name_of_trial,
        attempt=attempt,
        config=trial["spec"].get("config") or {},
        trial_dir_uri=experiment_trial_dir(experiment, settings, name_of_trial),
        entrypoint=trainable.get("entrypoint"),
        source=trainable.get("source"),
        name=trainable.get("name"),
        pickle_uri=trainable.get("pickleURI"),
        worker_entrypoint=trainable.get("workerEntrypoint"),
        stop=dict(spec.get("stop") or {}),
        checkpoint=CheckpointPolicy(
            **{f.name: checkpoint[f.name] for f in dataclasses.fields(CheckpointPolicy) if f.name in checkpoint}
        ),
        metric=metric,
        mode=mode,
        storage_endpoint=endpoint,
        storage_region=region,
        restore_from=restore_from,
        pbt_policy=pbt_policy,
        pbt_explore=pbt_explore,
        collector_url=settings.collector.base_url(),
        pod_name=name,
        grace_period_s=settings.trials.termination_grace_period_s,
        decision_wait_s=DECISION_WAIT_S
        if (spec.get("scheduler") or {}).get("name", "fifo") != "fifo" or spec.get("stoppers")
        else 0.0,
        name_creator=name_creator,
        tag=trial["spec"].get("tag") if name_creator else None,
        display_name=display_name,
    )
    secret_name = token_secret_name(name, trial["metadata"]["uid"])
    env = [{"name": k, "value": v} for k, v in encode_trial_env(trial_env).items()]
    resources = spec.get("resourcesPerTrial") or {"cpu": DEFAULT_CPU}
    env.append({"name": RESOURCES, "value": json.dumps(resources, sort_keys=True)})  # tune.get_context()
    env.append({"name": TOKEN, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": TOKEN_SECRET_KEY}}})
    if not any(e.get("name") == "HOME" for e in user_env):
        env.append({"name": "HOME", "value": SCRATCH_DIR})
    container = {
        "name": TRIAL_CONTAINER,
        "image": spec.get("image") or settings.trials.default_image,
        "command": list(RUNTIME_COMMAND),
        "env": env + user_env,
        "resources": pod_resources(spec.get("resourcesPerTrial")),
        "securityContext": kubetune_security(),
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
    }
    secret = (spec.get("storage") or {}).get("credentialsSecret")
    env_from = ([{"secretRef": {"name": secret}}] if secret else []) + (template.get("envFrom") or [])
    if env_from:
        container["envFrom"] = env_from
    user_mounts = template.get("volumeMounts") or []
    scratch = not any(m.get("mountPath", "").rstrip("/") == SCRATCH_DIR for m in user_mounts)
    container["volumeMounts"] = [
        {"name": ATTEMPT_VOLUME, "mountPath": ATTEMPT_DIR, "readOnly": True},
        *([{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}] if scratch else []),
        *user_mounts,
    ]
    attempt_volume = {"name": ATTEMPT_VOLUME, "secret": {"secretName": secret_name, "defaultMode": 0o444}}
    scratch_volume = [{"name": SCRATCH_VOLUME, "emptyDir": {}}] if scratch else []
    return _pod_manifest(experiment, template, settings, trial, attempt, container, [attempt_volume, *scratch_volume])


def _container_trial_pod(
    experiment: Mapping, trial: Mapping, attempt: int, settings: Settings, template: dict, restore_from: str | None
) -> dict:
    """The pod of a container trial (:func:`build_pod` says what it holds)."""
    spec = experiment["spec"]
    metric, _ = spec_objectives(spec)
    namespace, exp_name = experiment["metadata"]["namespace"], experiment["metadata"]["name"]
    name_of_trial, trainable, user_env = trial["metadata"]["name"], spec["trainable"], template.get("env") or []
    name = pod_name(name_of_trial, attempt)
    container = trial_container(
        TRIAL_CONTAINER,
        spec.get("image") or settings.trials.default_image,
        trainable["command"],
        trainable.get("args") or (),
        user_env,
        trial["spec"].get("config") or {},
        {"name": name_of_trial, "namespace": namespace},
    )
    container["resources"] = pod_resources(spec.get("resourcesPerTrial"))
    if template.get("envFrom"):
        container["envFrom"] = template["envFrom"]
    collector = spec.get("metricsCollector") or {}
    kind = collector.get("kind", "StdOut")
    folder = shared_folder(kind, collector.get("path"))
    path = checkpoint_path(spec)
    mounts = [
        *([{"name": METRICS_VOLUME, "mountPath": folder}] if folder else []),
        *([{"name": CHECKPOINT_VOLUME, "mountPath": path}] if path else []),
        *(template.get("volumeMounts") or []),
    ]
    if mounts:
        container["volumeMounts"] = mounts
    checkpoint = None
    if path:  # the one variable of kubetune's in the container: where its checkpoint folder is
        container["env"] = [{"name": CHECKPOINT_DIR, "value": path}, *(container.get("env") or ())]
        _, endpoint, region = _storage(spec, settings)
        secret = (spec.get("storage") or {}).get("credentialsSecret")
        checkpoint = (
            folder_env(
                path,
                experiment_trial_dir(experiment, settings, name_of_trial),
                restore_from,
                spec.get("checkpoint") or {},
                {STORAGE_ENDPOINT: endpoint, STORAGE_REGION: region},
            ),
            [{"secretRef": {"name": secret}}] if secret else [],  # kubetune's containers only, never the trial's
            path,
        )
    volumes = [
        *([{"name": METRICS_VOLUME, "emptyDir": {}}] if folder else []),
        *([{"name": CHECKPOINT_VOLUME, "emptyDir": {}}, {"name": STATE_VOLUME, "emptyDir": {}}] if path else []),
    ]
    result_log = None
    if kind != "StdOut":  # the sidecar sees the results: it writes them to the trial's folder, where there is one
        result_log, log_volumes = _result_log(experiment, trial, settings, name, checkpoint is not None)
        volumes += log_volumes
    aliases = []
    if kind == "Push" and collector.get("katibDBManager"):  # Katib's report_metrics() reaches the sidecar
        katib_env, katib_mounts, katib_volumes, aliases = katib_report_metrics(name_of_trial)
        container["env"] = [*(container.get("env") or ()), *katib_env]
        container["volumeMounts"] = [*(container.get("volumeMounts") or ()), *katib_mounts]
        volumes += katib_volumes
    pod = _pod_manifest(experiment, template, settings, trial, attempt, container, volumes)
    if aliases:
        pod["spec"]["hostAliases"] = aliases
    init = [restore_container(settings.trials.default_image, attempt, checkpoint)] if checkpoint else []
    if kind != "StdOut" or checkpoint:
        identity = {
            "namespace": namespace,
            "experiment": exp_name,
            "trial": name_of_trial,
            "attempt": attempt,
            "collector": settings.collector.base_url(),
        }
        token = {"secretKeyRef": {"name": token_secret_name(name, trial["metadata"]["uid"]), "key": TOKEN_SECRET_KEY}}
        init.append(
            metrics_sidecar(
                collector,
                [metric] if isinstance(metric, str) else list(metric or ()),
                settings.trials.default_image,
                identity,
                token,
                settings.trials.termination_grace_period_s,
                checkpoint,
                result_log,
            )
        )
    if init:
        pod["spec"]["initContainers"] = init
    return pod


def _result_log(
    experiment: Mapping, trial: Mapping, settings: Settings, pod: str, has_folder: bool
) -> tuple[tuple[list, list, list] | None, list[dict]]:
    """What the metrics sidecar of ``pod`` needs to write the trial's result history (``kubetune.env.RESULT_LOG``):
    ``((env, envFrom, volumeMounts), volumes)``, the storage's variables, credentials and the writable state folder
    left to the checkpoint folder's where ``has_folder`` (it gives them already); ``(None, [])`` without storage."""
    spec = experiment["spec"]
    try:
        _, endpoint, region = _storage(spec, settings)
    except ValueError:  # no storage: the results are the Trial's status alone
        return None, []
    log = {
        "trialDir": experiment_trial_dir(experiment, settings, trial["metadata"]["name"]),
        "state": STATE_DIR,
        "configFile": CONFIG_PATH,
    }
    env = [{"name": RESULT_LOG, "value": json.dumps(log, sort_keys=True)}]
    secret = (spec.get("storage") or {}).get("credentialsSecret")
    env_from = [{"secretRef": {"name": secret}}] if secret and not has_folder else []
    mounts = [{"name": ATTEMPT_VOLUME, "mountPath": ATTEMPT_DIR, "readOnly": True}]
    secret_name = token_secret_name(pod, trial["metadata"]["uid"])
    volumes = [{"name": ATTEMPT_VOLUME, "secret": {"secretName": secret_name, "defaultMode": 0o444}}]
    if not has_folder:
        env += [{"name": k, "value": v} for k, v in ((STORAGE_ENDPOINT, endpoint), (STORAGE_REGION, region)) if v]
        env.append({"name": "HOME", "value": STATE_DIR})
        mounts.append({"name": STATE_VOLUME, "mountPath": STATE_DIR})
        volumes.append({"name": STATE_VOLUME, "emptyDir": {}})
    return (env, env_from, mounts), volumes


def _pod_manifest(
    experiment: Mapping,
    template: Mapping,
    settings: Settings,
    trial: Mapping,
    attempt: int,
    container: dict,
    volumes: list,
) -> dict:
    """The pod of ``attempt`` of ``trial`` around its trial ``container``, with kubetune's ``volumes`` before the
    template's: labels, owner, restricted security, the template's pod fields (:func:`build_pod` says which)."""
    spec, exp_name, name_of_trial = experiment["spec"], experiment["metadata"]["name"], trial["metadata"]["name"]
    name = pod_name(name_of_trial, attempt)
    labels = {
        **(template.get("labels") or {}),
        **({LABEL_KUEUE_QUEUE: spec["queueName"]} if spec.get("queueName") else {}),
        LABEL_EXPERIMENT: label_value(exp_name),
        LABEL_TRIAL: label_value(name_of_trial),
        LABEL_ATTEMPT: str(attempt),
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    namespace = experiment["metadata"]["namespace"]
    metadata = {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner_reference(trial)]}
    if template.get("annotations"):
        metadata["annotations"] = template["annotations"]
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": settings.trials.termination_grace_period_s,
        "securityContext": pod_security(settings, template),
        "containers": [container, *(template.get("containers") or [])],
    }
    pod_spec.update({k: template[k] for k in _POD_SPEC_FIELDS if template.get(k)})
    all_volumes = [*volumes, *(pod_spec.get("volumes") or [])]
    if all_volumes:
        pod_spec["volumes"] = all_volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def pod_security(settings: Settings, template: Mapping) -> dict:
    """The pod ``securityContext`` of kubetune's pods: non-root (``settings.trials.run_as_user``), RuntimeDefault
    seccomp, ``template.securityContext`` laid over it."""
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.trials.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
        **(template.get("securityContext") or {}),
    }


def token_secret_name(pod: str, trial_uid: str) -> str:
    """``<pod>-<trial_uid[:8]>``: the name of the token Secret of the attempt pod ``pod`` runs. The uid keeps
    an Experiment created again under its name from reading the earlier one's Secret."""
    return f"{pod}-{trial_uid[:8]}"


def build_token_secret(pod: Mapping, trial: Mapping, token: str) -> dict:
    """Return the Secret of the attempt ``pod`` runs (named by :func:`token_secret_name`, owned by ``trial``,
    the pod's labels): its collector token (key ``token``, the pod's ``KUBETUNE_TOKEN``) and the trial's
    config (key ``kubetune.env.CONFIG_KEY``, the pod's config file). A Secret holds at most 1 MiB: the
    CRD's limits on the config (:mod:`kubetune.limits`) keep it far below that.

    Args:
        pod: the attempt's pod manifest (:func:`build_pod`).
        trial: the Trial object the pod was built from (with ``metadata.uid`` and ``spec.config``).
        token: the attempt's collector token (:func:`kubetune_operator.tokens.mint_token`).

    Raises:
        ValueError: a Trial without ``metadata.uid``.
    """
    config = encode_trial_config(trial["spec"].get("config") or {})
    return token_secret(pod, trial, {TOKEN_SECRET_KEY: token, CONFIG_KEY: config})


def token_secret(pod: Mapping, owner: Mapping, data: Mapping[str, str]) -> dict:
    """The Secret of ``pod`` (named by :func:`token_secret_name` after ``owner``'s uid, owned by ``owner``, the pod's
    labels) holding ``data``.

    Raises:
        ValueError: an owner without ``metadata.uid``.
    """
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": token_secret_name(meta["name"], owner["metadata"]["uid"]),
            "namespace": meta["namespace"],
            "labels": dict(meta["labels"]),
            "ownerReferences": [owner_reference(owner)],
        },
        "stringData": dict(data),
    }


def trial_object(
    namespace: str,
    name: str,
    uid: str,
    index: int,
    config: Mapping,
    tag: str | None = None,
    display_name: str | None = None,
) -> dict:
    """A Trial as the pod builders read it (what the operator keeps of each Trial): owner and env source, with
    ``spec.tag`` and ``status.displayName`` when given."""
    trial = {
        "apiVersion": API_VERSION,
        "kind": TRIAL_KIND,
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"index": index, "config": config, **({"tag": tag} if tag else {})},
    }
    if display_name:
        trial["status"] = {"displayName": display_name}
    return trial


def sample_pod(experiment: Mapping, settings: Settings) -> dict:
    """The pod of attempt 0 of a config-less trial 0 of ``experiment``: what its spec makes of every trial
    pod, for checking a spec before anything is created.

    Raises:
        ValueError: as :func:`build_pod`.
    """
    meta = experiment["metadata"]
    config = {path: "0" for path in references(experiment["spec"])}  # a container trial's parameters, as flat keys
    trial = trial_object(meta["namespace"], trial_name(meta["name"], 0), "sample", 0, config)
    return build_pod(experiment, trial, 0, settings)


def _storage(spec: Mapping, settings: Settings) -> tuple[str, str | None, str | None]:
    """``(uri, endpoint, region)``: the experiment's ``spec.storage``, else the operator's default storage."""
    storage = spec.get("storage") or {}
    if storage.get("uri"):
        return storage["uri"], storage.get("endpoint"), storage.get("region")
    if settings.storage.default_uri:
        return settings.storage.default_uri, settings.storage.default_endpoint, settings.storage.default_region
    raise ValueError("spec.storage.uri is required: the operator has no default storage")
