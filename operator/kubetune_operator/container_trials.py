"""The trial container of a container trial (``spec.trainable.command``): the user's image and command, the trial's
parameters substituted, nothing of kubetune's added.

Owns the parameter references (``${trialParameters.NAME}``, Katib's form, and ``${config.NAME}``, kubetune's, where
NAME may be a dotted path into a nested config; docs/api.md, "Any container as a trial"): :func:`substitute` and
:func:`references`, and :func:`trial_container`, the container ``builders.build_pod`` puts in such a trial's pod.
Called by ``builders.py`` (each attempt's pod) and ``experiment_spec.py`` (references checked at admission). Pure.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any, Iterable, Mapping

from kubetune.env import (
    ATTEMPT,
    COLLECTOR_URL,
    EXPERIMENT,
    GRACE_PERIOD,
    METRICS_SOURCE,
    NAMESPACE,
    TOKEN,
    TRIAL,
)

__all__ = [
    "DEFAULT_PUSH_PORT",
    "METRICS_SIDECAR",
    "METRICS_VOLUME",
    "REFERENCE",
    "SIDECAR_COMMAND",
    "metrics_sidecar",
    "references",
    "shared_folder",
    "substitute",
    "trial_container",
]

#: The name of the metrics sidecar (an init container with ``restartPolicy: Always``) in a container trial's pod.
METRICS_SIDECAR = "kubetune-metrics"
#: The emptyDir the trial's container shares with the sidecar (``File``, ``TensorFlowEvent``); ``template.volumes``
#: may not use the name.
METRICS_VOLUME = "kubetune-metrics"
#: ``metricsCollector.port`` when unset (``Push``).
DEFAULT_PUSH_PORT = 9109
#: The sidecar's command, in kubetune's runtime image.
SIDECAR_COMMAND = ("python", "-m", "kubetune.runtime.sidecar")
#: The sidecar's resources: it tails a file or serves a few posts a second.
SIDECAR_RESOURCES = {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}}
#: A parameter reference: ``${trialParameters.lr}`` or ``${config.optimizer.lr}``.
REFERENCE = re.compile(r"\$\{(trialParameters|config)\.([A-Za-z0-9_][A-Za-z0-9_.\-]*)\}")


def references(spec: Mapping[str, Any]) -> list[str]:
    """The parameter paths (``["lr", "optimizer.lr"]``) an Experiment's ``spec`` refers to where they are substituted:
    ``trainable.command``, ``trainable.args`` and the string ``value`` of ``template.env`` items; in order, repeats
    kept."""
    trainable, env = spec.get("trainable") or {}, (spec.get("template") or {}).get("env") or []
    texts = [*(trainable.get("command") or ()), *(trainable.get("args") or ())]
    texts += [e["value"] for e in env if isinstance(e.get("value"), str)]
    return [m.group(2) for text in texts for m in REFERENCE.finditer(text)]


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    if path in config:  # a flat key with dots in it (as Katib's parameter names may be) wins
        return config[path]
    value: Any = config
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(path)
        value = value[part]
    return value


def substitute(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with each parameter reference replaced by the value in ``config``: a string as it is, any other
    value as compact JSON (``0.01``, ``true``, ``[1, 2]``).

    Raises:
        ValueError: a reference to a parameter that is not in ``config`` (the message names it).
    """

    def value(match: re.Match) -> str:
        try:
            found = _lookup(config, match.group(2))
        except KeyError:
            raise ValueError(f"{match.group(0)} names no parameter of the trial's config") from None
        return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))

    return REFERENCE.sub(value, text)


def trial_container(
    name: str, image: str, command: Iterable[str], args: Iterable[str], env: list, config: Mapping[str, Any]
) -> dict:
    """The trial container of a container trial: ``image`` running ``command`` and ``args`` with ``config``'s
    values substituted, ``env`` (``template.env``) substituted in its ``value`` fields, and the *restricted* Pod
    Security settings of a container (no privilege escalation, every capability dropped). No variable, volume
    or file of kubetune's is added, and the image's own filesystem stays as it is (writable, unlike the runtime's:
    a user's image may write where it runs).

    Args:
        name: the container's name (``labels.TRIAL_CONTAINER``).
        image: the image reference.
        command, args: ``spec.trainable.command`` and ``args``.
        env: ``spec.template.env`` (``{"name", "value"}`` or ``{"name", "valueFrom"}`` items).
        config: the trial's config.

    Raises:
        ValueError: a reference to a parameter not in ``config``.
    """
    container = {
        "name": name,
        "image": image,
        "command": [substitute(c, config) for c in command],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    args = [substitute(a, config) for a in args]
    if args:
        container["args"] = args
    if env:
        container["env"] = [
            {**item, "value": substitute(item["value"], config)} if isinstance(item.get("value"), str) else dict(item)
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
) -> dict:
    """The metrics sidecar of a container trial whose ``metricsCollector`` (the spec's dict) is not ``StdOut``: a
    native sidecar (``restartPolicy: Always``) running :data:`SIDECAR_COMMAND` in ``image`` (kubetune's runtime),
    the shared folder mounted read-only, under the *restricted* settings with a read-only root filesystem. For
    ``Push``, a startup probe holds the trial's container until the endpoint listens.

    Args:
        collector: ``spec.metricsCollector``.
        objectives: the objective metrics (a result is a line that reports them).
        image: kubetune's runtime image (``trials.defaultImage``).
        identity: ``{"namespace", "experiment", "trial", "attempt", "collector"}``: whose results it reports,
            and where.
        token: the ``valueFrom`` of the attempt's collector token (its Secret's key).
        grace_period_s: the pod's grace period: the sidecar's last batch goes out within it.
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
    ]
    sidecar = {
        "name": METRICS_SIDECAR,
        "image": image,
        "command": list(SIDECAR_COMMAND),
        "restartPolicy": "Always",
        "env": env,
        "resources": SIDECAR_RESOURCES,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    if kind == "Push":  # the trial's container starts once the endpoint listens (a native sidecar's startup probe)
        check = f"import socket; socket.create_connection(('127.0.0.1', {source['port']}), 1).close()"
        sidecar["startupProbe"] = {
            "exec": {"command": ["python", "-c", check]},
            "periodSeconds": 1,
            "failureThreshold": 60,
        }
    folder = shared_folder(kind, collector.get("path"))
    if folder:
        sidecar["volumeMounts"] = [{"name": METRICS_VOLUME, "mountPath": folder, "readOnly": True}]
    return sidecar
