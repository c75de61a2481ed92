"""The trial container of a container trial (``spec.trainable.command``): the user's image and command, the trial's
parameters substituted, nothing of kubetune's added.

Owns the parameter references (``${trialParameters.NAME}``, Katib's form, and ``${config.NAME}``, kubetune's, where
NAME may be a dotted path into a nested config; docs/api.md, "Any container as a trial"): :func:`substitute` and
:func:`references`; and the containers ``builders.build_pod`` puts in such a trial's pod: :func:`trial_container`,
kubetune's :func:`metrics_sidecar` and, for a trial with a checkpoint folder, :func:`restore_container`.
Called by ``builders.py`` (each attempt's pod) and ``experiment_spec.py`` (references checked at admission). Pure.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any, Iterable, Mapping

from kubetune.env import (
    ATTEMPT,
    CHECKPOINT_FOLDER,
    COLLECTOR_URL,
    EXPERIMENT,
    GRACE_PERIOD,
    KATIB_DB_PORT,
    METRICS_SOURCE,
    NAMESPACE,
    TOKEN,
    TRIAL,
)

from .labels import METRICS_SIDECAR, RESTORE_CONTAINER

__all__ = [
    "CHECKPOINT_VOLUME",
    "DEFAULT_CHECKPOINT_PATH",
    "DEFAULT_PUSH_PORT",
    "METRICS_SIDECAR",
    "METRICS_VOLUME",
    "RESTORE_CONTAINER",
    "STATE_DIR",
    "STATE_VOLUME",
    "REFERENCE",
    "SIDECAR_COMMAND",
    "TRIAL_KEYS",
    "TRIAL_REFERENCE",
    "checkpoint_path",
    "folder_env",
    "metrics_sidecar",
    "references",
    "kubetune_security",
    "restore_container",
    "shared_folder",
    "substitute",
    "trial_container",
    "trial_references",
]

#: The emptyDir the trial's container shares with the sidecar (``File``, ``TensorFlowEvent``); ``template.volumes``
#: may not use the name.
METRICS_VOLUME = "kubetune-metrics"
#: The restore's command, in kubetune's runtime image.
RESTORE_COMMAND = ("python", "-m", "kubetune.runtime.checkpoint_folder")
#: The emptyDir of the checkpoint folder (``spec.checkpoint.path``), the trial's container's and kubetune's.
CHECKPOINT_VOLUME = "kubetune-checkpoint"
#: The emptyDir only kubetune's containers mount, at :data:`STATE_DIR`: the restore's record, the copy being saved.
STATE_VOLUME = "kubetune-state"
STATE_DIR = "/var/run/kubetune-state"
#: ``spec.checkpoint.path`` of a container trial whose scheduler pauses trials, when unset.
DEFAULT_CHECKPOINT_PATH = "/var/kubetune/checkpoint"
#: Schedulers that pause trials and resume them from a checkpoint: a container trial of theirs keeps a checkpoint
#: folder, :data:`DEFAULT_CHECKPOINT_PATH` when ``spec.checkpoint.path`` is unset.
PAUSING_SCHEDULERS = ("hyperband", "hyperband_bohb", "pbt", "pbt_replay", "pb2")
#: ``metricsCollector.port`` when unset (``Push``).
DEFAULT_PUSH_PORT = 9109
#: Where Katib's SDK finds katib-db-manager (``kubeflow.katib.report_metrics``), resolved to the pod's loopback
#: interface for a ``Push`` trial with ``katibDBManager`` (the port: :data:`kubetune.env.KATIB_DB_PORT`).
KATIB_DB_HOSTNAMES = (
    "katib-db-manager.kubeflow",
    "katib-db-manager.kubeflow.svc",
    "katib-db-manager.kubeflow.svc.cluster.local",
)
#: The volume holding the trial's namespace where Katib's SDK reads it (a service account's folder, with no token).
KATIB_NAMESPACE_VOLUME = "katib-namespace"
KATIB_NAMESPACE_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The sidecar's command, in kubetune's runtime image.
SIDECAR_COMMAND = ("python", "-m", "kubetune.runtime.sidecar")
#: The sidecar's and the restore's resources: it tails a file, serves a few posts a second, copies a checkpoint.
SIDECAR_RESOURCES = {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}}
#: A parameter reference: ``${trialParameters.lr}`` or ``${config.optimizer.lr}``.
REFERENCE = re.compile(r"\$\{(trialParameters|config)\.([A-Za-z0-9_][A-Za-z0-9_.\-]*)\}")
#: A reference to the trial itself (what Katib's ``${trialSpec.Name}`` and ``${trialSpec.Namespace}`` name), any key.
TRIAL_REFERENCE = re.compile(r"\$\{trial\.([^}]*)\}")
#: The keys of :data:`TRIAL_REFERENCE`: the Trial's name and namespace.
TRIAL_KEYS = ("name", "namespace")


def _texts(spec: Mapping[str, Any]) -> list[str]:
    """Where references are substituted: ``trainable.command``, ``trainable.args`` and the string ``value`` of
    ``template.env`` items, in order."""
    trainable, env = spec.get("trainable") or {}, (spec.get("template") or {}).get("env") or []
    texts = [*(trainable.get("command") or ()), *(trainable.get("args") or ())]
    return texts + [e["value"] for e in env if isinstance(e.get("value"), str)]


def references(spec: Mapping[str, Any]) -> list[str]:
    """The parameter paths (``["lr", "optimizer.lr"]``) an Experiment's ``spec`` refers to where they are substituted
    (:func:`_texts`); in order, repeats kept."""
    return [m.group(2) for text in _texts(spec) for m in REFERENCE.finditer(text)]


def trial_references(spec: Mapping[str, Any]) -> list[str]:
    """The keys of the ``${trial.KEY}`` references of an Experiment's ``spec`` (:func:`_texts`); in order, repeats
    kept."""
    return [m.group(1) for text in _texts(spec) for m in TRIAL_REFERENCE.finditer(text)]


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    if path in config:  # a flat key with dots in it (as Katib's parameter names may be) wins
        return config[path]
    value: Any = config
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(path)
        value = value[part]
    return value


def substitute(text: str, config: Mapping[str, Any], trial: Mapping[str, str] | None = None) -> str:
    """``text`` with each parameter reference replaced by the value in ``config``: a string as it is, any other
    value as compact JSON (``0.01``, ``true``, ``[1, 2]``); and, with ``trial`` (``{"name", "namespace"}``), each
    ``${trial.name}`` and ``${trial.namespace}`` by the Trial's (first: a parameter's value is not read again).

    Raises:
        ValueError: a reference to a parameter that is not in ``config``, or a ``${trial.KEY}`` of another key
            (the message names it).
    """
    if trial is not None:

        def trial_value(match: re.Match) -> str:
            if match.group(1) not in TRIAL_KEYS:
                raise ValueError(f"{match.group(0)}: a trial reference names the trial's name or namespace")
            return trial[match.group(1)]

        text = TRIAL_REFERENCE.sub(trial_value, text)

    def value(match: re.Match) -> str:
        try:
            found = _lookup(config, match.group(2))
        except KeyError:
            raise ValueError(f"{match.group(0)} names no parameter of the trial's config") from None
        return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))

    return REFERENCE.sub(value, text)


def trial_container(
    name: str,
    image: str,
    command: Iterable[str],
    args: Iterable[str],
    env: list,
    config: Mapping[str, Any],
    trial: Mapping[str, str],
) -> dict:
    """The trial container of a container trial: ``image`` running ``command`` and ``args`` with ``config``'s
    values and ``trial``'s name and namespace substituted (:func:`substitute`), ``env`` (``template.env``)
    substituted in its ``value`` fields, and the *restricted* Pod
    Security settings of a container (no privilege escalation, every capability dropped). No variable, volume
    or file of kubetune's is added, and the image's own filesystem stays as it is (writable, unlike the runtime's:
    a user's image may write where it runs).

    Args:
        name: the container's name (``labels.TRIAL_CONTAINER``).
        image: the image reference.
        command, args: ``spec.trainable.command`` and ``args``.
        env: ``spec.template.env`` (``{"name", "value"}`` or ``{"name", "valueFrom"}`` items).
        config: the trial's config.
        trial: ``{"name", "namespace"}`` of the Trial.

    Raises:
        ValueError: as :func:`substitute`.
    """
    container = {
        "name": name,
        "image": image,
        "command": [substitute(c, config, trial) for c in command],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    args = [substitute(a, config, trial) for a in args]
    if args:
        container["args"] = args
    if env:
        container["env"] = [
            {**item, "value": substitute(item["value"], config, trial)}
            if isinstance(item.get("value"), str)
            else dict(item)
            for item in env
        ]
    return container


def shared_folder(kind: str, path: str | None) -> str | None:
    """The folder a trial's container shares with the metrics sidecar: the metrics file's (``File``), the event
    files' (``TensorFlowEvent``), or None (``StdOut``, ``Push``)."""
    if kind == "File" and path:
        return posixpath.dirname(posixpath.normpath(path))
    return posixpath.normpath(path) if kind == "TensorFlowEvent" and path else None


def metrics_sidecar(
    collector: Mapping[str, Any],
    objectives: Iterable[str],
    image: str,
    identity: Mapping[str, str],
    token: Mapping[str, Any],
    grace_period_s: int,
    checkpoint: tuple[list, list, str] | None = None,
    result_log: tuple[list, list, list] | None = None,
) -> dict:
    """The metrics sidecar of a container trial whose ``metricsCollector`` (the spec's dict) is not ``StdOut``, or
    that keeps a checkpoint folder: a native sidecar (``restartPolicy: Always``) running :data:`SIDECAR_COMMAND` in
    ``image`` (kubetune's runtime), the metrics' folder mounted read-only, under the *restricted* settings with a
    read-only root filesystem. For ``Push``, a startup probe holds the trial's container until the endpoint listens.

    Args:
        collector: ``spec.metricsCollector``.
        objectives: the objective metrics (a result is a line that reports them).
        image: kubetune's runtime image (``trials.defaultImage``).
        identity: ``{"namespace", "experiment", "trial", "attempt", "collector"}``: whose results it reports,
            and where.
        token: the ``valueFrom`` of the attempt's collector token (its Secret's key).
        grace_period_s: the pod's grace period: the sidecar's last batch goes out within it.
        checkpoint: ``(env, envFrom, path)`` of the checkpoint folder (:func:`folder_env`, the storage credentials,
            the folder), or None.
        result_log: ``(env, envFrom, volumeMounts)`` with which the sidecar writes the trial's result history to
            its storage folder (``kubetune.env.RESULT_LOG``, the storage's variables and credentials where
            ``checkpoint`` does not give them, the attempt's config and a writable folder), or None.
    """
    kind = collector.get("kind", "StdOut")
    source = {
        "kind": kind,
        "objectives": list(objectives),
        "format": collector.get("format", "TEXT"),
        "metricsFormat": list(collector.get("metricsFormat") or ()),
        "iterationKey": collector.get("iterationKey"),
        "path": posixpath.normpath(collector["path"]) if collector.get("path") else None,
        "port": collector.get("port") or DEFAULT_PUSH_PORT if kind == "Push" else None,
        "katibDBManager": True if kind == "Push" and collector.get("katibDBManager") else None,
    }
    env = [
        {"name": NAMESPACE, "value": identity["namespace"]},
        {"name": EXPERIMENT, "value": identity["experiment"]},
        {"name": TRIAL, "value": identity["trial"]},
        {"name": ATTEMPT, "value": str(identity["attempt"])},
        {"name": COLLECTOR_URL, "value": identity["collector"]},
        {"name": GRACE_PERIOD, "value": str(grace_period_s)},
        {"name": METRICS_SOURCE, "value": json.dumps({k: v for k, v in source.items() if v is not None})},
        {"name": TOKEN, "valueFrom": dict(token)},
        *(checkpoint[0] if checkpoint else ()),
        *(result_log[0] if result_log else ()),
    ]
    sidecar = {
        "name": METRICS_SIDECAR,
        "image": image,
        "command": list(SIDECAR_COMMAND),
        "restartPolicy": "Always",
        "env": env,
        "resources": SIDECAR_RESOURCES,
        "securityContext": kubetune_security(),
    }
    env_from = [*(checkpoint[1] if checkpoint else ()), *(result_log[1] if result_log else ())]
    if env_from:
        sidecar["envFrom"] = env_from
    if kind == "Push":  # the trial's container starts once the endpoints listen (a native sidecar's startup probe)
        ports = [source["port"], *([KATIB_DB_PORT] if source["katibDBManager"] else [])]
        check = f"import socket; [socket.create_connection(('127.0.0.1', p), 1).close() for p in {ports}]"
        sidecar["startupProbe"] = {
            "exec": {"command": ["python", "-c", check]},
            "periodSeconds": 1,
            "failureThreshold": 60,
        }
    folder = shared_folder(kind, collector.get("path"))
    mounts = [{"name": METRICS_VOLUME, "mountPath": folder, "readOnly": True}] if folder else []
    if checkpoint:
        mounts += _folder_mounts(checkpoint[2])
    if result_log:
        mounts += result_log[2]
    if mounts:
        sidecar["volumeMounts"] = mounts
    return sidecar


def katib_report_metrics(trial: str) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """What a ``Push`` trial with ``metricsCollector.katibDBManager`` needs for Katib's ``report_metrics()`` to reach
    its sidecar (docs/katib.md): the container's ``KATIB_TRIAL_NAME``, its namespace in the file Katib's SDK reads
    (a projected volume of that one file, no token), and the pod's ``hostAliases`` resolving katib-db-manager to
    the pod's loopback interface, where the sidecar serves Katib's ``ReportObservationLog``.

    Returns:
        ``(env, volumeMounts)`` of the trial's container, and the pod's ``(volumes, hostAliases)``.
    """
    env = [{"name": "KATIB_TRIAL_NAME", "value": trial}]
    mounts = [{"name": KATIB_NAMESPACE_VOLUME, "mountPath": KATIB_NAMESPACE_DIR, "readOnly": True}]
    namespace = {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
    volumes = [{"name": KATIB_NAMESPACE_VOLUME, "projected": {"sources": [{"downwardAPI": {"items": [namespace]}}]}}]
    return env, mounts, volumes, [{"ip": "127.0.0.1", "hostnames": list(KATIB_DB_HOSTNAMES)}]


def checkpoint_path(spec: Mapping[str, Any]) -> str | None:
    """A container trial's checkpoint folder as ``spec`` sets it: ``spec.checkpoint.path`` (normalised), else
    :data:`DEFAULT_CHECKPOINT_PATH` when the scheduler pauses trials, else None (no checkpoints). Unchecked:
    ``experiment_spec`` refuses a malformed one at admission."""
    path = (spec.get("checkpoint") or {}).get("path")
    if path is None and (spec.get("scheduler") or {}).get("name", "fifo") in PAUSING_SCHEDULERS:
        return DEFAULT_CHECKPOINT_PATH
    return posixpath.normpath(path) if isinstance(path, str) else path


def kubetune_security() -> dict:
    """The *restricted* settings of kubetune's containers (a runtime trial's, a container trial's sidecar and restore,
    the driver pod's), root filesystem read-only."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def _folder_mounts(path: str) -> list[dict]:
    return [{"name": CHECKPOINT_VOLUME, "mountPath": path}, {"name": STATE_VOLUME, "mountPath": STATE_DIR}]


def folder_env(
    path: str,
    trial_dir: str,
    restore_from: str | None,
    policy: Mapping[str, Any],
    storage_env: Mapping[str, str | None],
) -> list[dict]:
    """The variables of kubetune's containers that restore and save a checkpoint folder: ``CHECKPOINT_FOLDER``
    (``kubetune.runtime.checkpoint_folder.FolderSpec``), the storage's endpoint and region, ``HOME`` in the state
    folder (the root filesystem is read-only).

    Args:
        path: ``spec.checkpoint.path``.
        trial_dir: the trial's storage folder.
        restore_from: the checkpoint that seeds the trial's lineage (a PBT exploit's donor), or None.
        policy: ``spec.checkpoint`` (``atEnd``, ``keep``, ``scoreAttribute``).
        storage_env: ``{variable: value}`` of the storage (None values left out).
    """
    folder = {
        "path": path,
        "trialDir": trial_dir,
        "state": STATE_DIR,
        "restoreFrom": restore_from,
        "atEnd": policy.get("atEnd", True),
        "keep": policy.get("keep", 0),
        "scoreAttribute": policy.get("scoreAttribute", "training_iteration"),
    }
    env = [{"name": CHECKPOINT_FOLDER, "value": json.dumps(folder, sort_keys=True)}]
    env += [{"name": k, "value": v} for k, v in storage_env.items() if v]
    return env + [{"name": "HOME", "value": STATE_DIR}]


def restore_container(image: str, attempt: int, checkpoint: tuple[list, list, str]) -> dict:
    """The init container that fills the checkpoint folder before the trial's container starts
    (``kubetune.runtime.checkpoint_folder``): it ends when the folder holds the trial's checkpoint, and its
    termination message says which and at what iteration (``{"uri", "iteration"}``), or why it failed.

    Args:
        image: kubetune's runtime image.
        attempt: the attempt it restores for.
        checkpoint: ``(env, envFrom, path)`` as for :func:`metrics_sidecar`.
    """
    container = {
        "name": RESTORE_CONTAINER,
        "image": image,
        "command": list(RESTORE_COMMAND),
        "env": [{"name": ATTEMPT, "value": str(attempt)}, *checkpoint[0]],
        "resources": SIDECAR_RESOURCES,
        "securityContext": kubetune_security(),
        "terminationMessagePolicy": "File",
        "volumeMounts": _folder_mounts(checkpoint[2]),
    }
    if checkpoint[1]:
        container["envFrom"] = checkpoint[1]
    return container
