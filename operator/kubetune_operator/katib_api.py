"""Katib's ``kubeflow.org/v1beta1`` API served by kubetune: a Katib Experiment run as a native Experiment, and the
native objects projected back into Katib's shapes (docs/katib.md, "Katib's API, served").

Owns the mapping both ways, as pure functions of the objects:

* :func:`native_experiment`: the native Experiment that runs a Katib Experiment (the conversion of
  :func:`kubetune.sdk.katib_convert.convert`, owned by the Katib Experiment, under its name);
* :func:`katib_trial`: the Katib Trial that mirrors a native Trial (its ``parameterAssignments``, Katib's
  conditions, its ``observation``), under the native Trial's name, with Katib's ``katib.kubeflow.org/experiment``
  label that Katib's SDK selects Trials by;
* :func:`katib_status`: the Katib Experiment's status (conditions and reasons, ``currentOptimalTrial``, the trial
  counts and name lists, ``startTime``/``completionTime``) from the native Experiment and the mirrored Trials;
* :func:`refused_status`: the status of a Katib Experiment kubetune cannot run, with the reason;
* :func:`template_source` and :func:`with_template`: a ``trialTemplate.configMap``'s ConfigMap, and the Katib
  Experiment with the trial template it holds put inline (the daemon reads the ConfigMap).

Called by :mod:`kubetune_operator.katib_handlers`, whose daemon keeps the objects in step. Everything here is
derived from the API's objects, so a restarted operator computes the same objects and writes nothing new.
"""

from __future__ import annotations

import copy
import math
from datetime import datetime
from typing import Any, Mapping

import yaml

from kubetune.sdk.katib_convert import KatibConversionError, convert

from .labels import LABEL_MANAGED_BY, MANAGED_BY
from .status import format_time

__all__ = [
    "KATIB_API_VERSION",
    "KATIB_GROUP",
    "KATIB_VERSION",
    "LABEL_KATIB_EXPERIMENT",
    "KatibConversionError",
    "katib_status",
    "katib_trial",
    "native_experiment",
    "refused_status",
    "serves",
    "template_source",
    "with_template",
]

KATIB_GROUP = "kubeflow.org"
KATIB_VERSION = "v1beta1"
KATIB_API_VERSION = f"{KATIB_GROUP}/{KATIB_VERSION}"
#: Katib's label on a Trial: its Experiment's name (``KatibClient.list_trials`` selects by it).
LABEL_KATIB_EXPERIMENT = "katib.kubeflow.org/experiment"
#: Label on the native Experiment that runs a Katib Experiment: the Katib Experiment's name.
LABEL_SERVED_FOR = "kubetune.io/katib-experiment"
#: The label a ConfigMap of trial templates must have (Katib's rule: its manifests label their shared templates so).
TRIAL_TEMPLATES_LABEL = ("katib.kubeflow.org/component", "trial-templates")
#: The native Experiment's end reasons (status.experiment_phase) -> Katib's condition (type, reason, message).
_ENDS = {
    "GoalReached": (
        "Succeeded",
        "ExperimentGoalReached",
        "Experiment has succeeded because Objective goal has reached",
    ),
    "MaxFailedTrialsExceeded": (
        "Failed",
        "ExperimentMaxFailedTrialsReached",
        "Experiment has failed because max failed count has reached",
    ),
    "AllTrialsFailed": ("Failed", "ExperimentFailed", "Experiment has failed because every trial failed"),
    "MetricMissing": ("Failed", "ExperimentFailed", None),
    "TimeBudgetExhausted": ("Succeeded", "ExperimentTimeBudgetReached", None),
    "StopperStoppedAll": ("Succeeded", "ExperimentStopperStopped", None),
}
#: Native trial reasons of a trial stopped because its Experiment ended (Katib deletes such trials: Killed).
_KILLED = ("GoalReached", "TimeBudgetExhausted", "MaxFailedTrialsExceeded", "StopperStoppedAll")


def template_source(katib: Mapping) -> tuple[str, str] | None:
    """``(namespace, name)`` of the ConfigMap ``katib``'s ``spec.trialTemplate.configMap`` names (its namespace:
    ``configMapNamespace``, else the Experiment's), or None for an inline ``trialSpec``.

    Raises:
        KatibConversionError: the ConfigMap's name or ``templatePath`` is missing.
    """
    source = ((katib.get("spec") or {}).get("trialTemplate") or {}).get("configMap")
    if not isinstance(source, Mapping):
        return None
    if not source.get("configMapName") or not source.get("templatePath"):
        raise KatibConversionError("spec.trialTemplate.configMap: configMapName and templatePath are required")
    return source.get("configMapNamespace") or katib["metadata"]["namespace"], source["configMapName"]


def with_template(katib: Mapping, config_map: Mapping | None) -> dict:
    """``katib`` (a copy) with its ``trialTemplate.configMap`` replaced by the ``trialSpec`` it names, as Katib's
    controller reads it: the YAML under ``templatePath`` in ``config_map`` (the ConfigMap object of
    :func:`template_source`, None when there is none), which must carry :data:`TRIAL_TEMPLATES_LABEL`.

    Raises:
        KatibConversionError: the ConfigMap is missing, lacks the label or the key, or the key holds no YAML mapping.
    """
    namespace, name = template_source(katib)
    where = f"spec.trialTemplate.configMap: {namespace}/{name}"
    katib = copy.deepcopy(dict(katib))
    template = katib["spec"]["trialTemplate"]
    source = template.pop("configMap")
    if config_map is None:
        raise KatibConversionError(f"{where}: no such ConfigMap")
    key, value = TRIAL_TEMPLATES_LABEL
    if ((config_map.get("metadata") or {}).get("labels") or {}).get(key) != value:
        raise KatibConversionError(f"{where}: needs the label {key}: {value}, as Katib's trial templates")
    text = (config_map.get("data") or {}).get(source["templatePath"])
    if text is None:
        raise KatibConversionError(f"{where}: no key {source['templatePath']!r} (templatePath)")
    try:
        trial_spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KatibConversionError(f"{where}: {source['templatePath']} is not YAML: {exc}") from None
    if not isinstance(trial_spec, dict):
        raise KatibConversionError(f"{where}: {source['templatePath']} holds no object")
    template["trialSpec"] = trial_spec
    return katib


def native_experiment(katib: Mapping) -> dict:
    """The native Experiment that runs ``katib``.

    Args:
        katib: the Katib Experiment object (``metadata.uid`` set: the API server's).

    Returns:
        A ``kubetune.io/v1alpha1`` Experiment named as ``katib``, in its namespace, owned by it (a controller
        reference: deleting the Katib Experiment deletes it, its Trials and their pods).

    Raises:
        KatibConversionError: ``katib`` uses what kubetune cannot run as written (the message names the field).
    """
    meta = katib["metadata"]
    experiment = convert(copy.deepcopy(dict(katib))).experiment
    experiment["metadata"] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": {LABEL_SERVED_FOR: meta["name"], LABEL_MANAGED_BY: MANAGED_BY},
        "ownerReferences": [_owner(katib)],
    }
    return experiment


def _owner(katib: Mapping) -> dict:
    meta = katib["metadata"]
    return {
        "apiVersion": KATIB_API_VERSION,
        "kind": "Experiment",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def serves(native: Mapping, katib: Mapping) -> bool:
    """Whether ``native`` is the native Experiment that runs ``katib`` (its controller is that object)."""
    refs = native.get("metadata", {}).get("ownerReferences") or ()
    return any(r.get("uid") == katib["metadata"]["uid"] and r.get("controller") for r in refs)


def _value(value: Any) -> str:
    """A parameter's value as Katib writes it in ``parameterAssignments`` (a string)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)
    return str(value)


def _assignments(katib: Mapping, config: Mapping) -> list[dict]:
    names = [p["name"] for p in katib["spec"].get("parameters") or ()]
    return [{"name": name, "value": _value(config[name])} for name in names if name in config]


def _metric_names(katib: Mapping) -> list[str]:
    objective = katib["spec"].get("objective") or {}
    names = [objective.get("objectiveMetricName")] + list(objective.get("additionalMetricNames") or ())
    return [n for n in names if n]


def _observation(katib: Mapping, status: Mapping) -> dict | None:
    """Katib's ``observation`` of a native Trial's ``status``: each metric of the objective with the value of the
    trial's last result (``latest``) and, where the Trial keeps its ``metricRange`` (``bestTrialScope: all``, what
    Katib's default ``metricStrategies`` convert to), the least and greatest value of every result (``min``,
    ``max``). A metric with neither is left out."""
    last, ranges = status.get("lastResult") or {}, status.get("metricRange") or {}
    metrics = []
    for name in _metric_names(katib):
        value, bounds = last.get(name), ranges.get(name) or {}
        entry: dict[str, str] = {"name": name}
        for key in ("min", "max"):
            if isinstance(bounds.get(key), (int, float)) and math.isfinite(bounds[key]):
                entry[key] = _value(bounds[key])
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            entry["latest"] = _value(value)
        if len(entry) > 1:
            metrics.append(entry)
    return {"metrics": metrics} if metrics else None


def _condition(type_: str, status: bool, reason: str, message: str, at: str) -> dict:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastUpdateTime": at,
        "lastTransitionTime": at,
    }


def _trial_conditions(status: Mapping, created: str) -> list[dict]:
    """A Katib Trial's conditions, oldest first; the last true one is Katib's kind of the trial (``Created``,
    ``Running``, ``Succeeded``, ``EarlyStopped``, ``Killed``, ``MetricsUnavailable``, ``Failed``)."""
    phase, reason, message = status.get("phase") or "Pending", status.get("reason") or "", status.get("message") or ""
    started = status.get("startTime") or created
    ended = status.get("completionTime") or started
    conditions = [_condition("Created", True, "TrialCreated", "Trial is created", created)]
    if phase == "Pending":
        return conditions
    running = phase in ("Running", "Paused")
    text = "Trial is running" if phase == "Running" else f"Trial is paused ({reason}): {message}".rstrip(": ")
    conditions.append(_condition("Running", running, "TrialRunning", text, started if running else ended))
    if running:
        return conditions
    if phase == "Succeeded" and reason in _KILLED:
        kind, why, text = "Killed", "TrialKilled", f"Trial is killed: its Experiment ended ({reason})"
    elif phase == "Succeeded" and reason == "EarlyStopped":
        kind, why, text = "EarlyStopped", "TrialEarlyStopped", message or "Trial is early stopped"
    elif phase == "Succeeded":
        kind, why, text = "Succeeded", "TrialSucceeded", "Trial has succeeded"
    elif reason == "MetricMissing":
        kind, why, text = "MetricsUnavailable", "MetricsUnavailable", message or "Metrics are not available"
    else:
        kind, why, text = "Failed", "TrialFailed", message or f"Trial has failed ({reason})"
    conditions.append(_condition(kind, True, why, text, ended))
    return conditions


def katib_trial(katib: Mapping, trial: Mapping) -> dict:
    """The Katib Trial that mirrors the native ``trial`` of ``katib``'s native Experiment.

    Returns:
        A ``kubeflow.org/v1beta1`` Trial with ``spec`` (objective, parameterAssignments, the collector and primary
        container of ``katib``) and ``status`` (conditions, ``observation``, times), named as ``trial`` and owned
        by ``katib``.
    """
    meta, spec, status = trial["metadata"], trial.get("spec") or {}, trial.get("status") or {}
    template = katib["spec"].get("trialTemplate") or {}
    created = meta.get("creationTimestamp") or ""
    out_status: dict[str, Any] = {"conditions": _trial_conditions(status, created)}
    if status.get("startTime"):
        out_status["startTime"] = status["startTime"]
    if status.get("completionTime"):
        out_status["completionTime"] = status["completionTime"]
    observation = _observation(katib, status)
    if observation is not None:
        out_status["observation"] = observation
    trial_spec = {
        "objective": copy.deepcopy(katib["spec"].get("objective") or {}),
        "parameterAssignments": _assignments(katib, status.get("config") or spec.get("config") or {}),
        "primaryContainerName": template.get("primaryContainerName") or "training-container",
    }
    if katib["spec"].get("metricsCollectorSpec"):
        trial_spec["metricsCollector"] = copy.deepcopy(katib["spec"]["metricsCollectorSpec"])
    return {
        "apiVersion": KATIB_API_VERSION,
        "kind": "Trial",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {LABEL_KATIB_EXPERIMENT: katib["metadata"]["name"], LABEL_MANAGED_BY: MANAGED_BY},
            "ownerReferences": [_owner(katib)],
        },
        "spec": trial_spec,
        "status": out_status,
    }


def katib_status(katib: Mapping, native: Mapping, trials: list[Mapping], now: datetime) -> dict:
    """The Katib Experiment's status from its native Experiment and the Katib Trials that mirror its Trials.

    Args:
        katib: the Katib Experiment (its current status keeps the conditions' times).
        native: the native Experiment that runs it.
        trials: the mirrored Katib Trials (:func:`katib_trial`).
        now: the time of this projection (a condition that changes gets it).

    Returns:
        Katib's ``status``: ``conditions`` (``Created``, ``Running``, then ``Succeeded`` or ``Failed`` with
        Katib's reasons), ``currentOptimalTrial``, ``trials`` and the count and name list of each kind of trial,
        ``startTime``, ``completionTime``.
    """
    status, spec = native.get("status") or {}, native.get("spec") or {}
    at = format_time(now)
    created = katib["metadata"].get("creationTimestamp") or at
    lists: dict[str, list[str]] = {
        k: [] for k in ("Created", "Running", "Succeeded", "Failed", "Killed", "EarlyStopped", "MetricsUnavailable")
    }
    for trial in sorted(trials, key=lambda t: t["metadata"]["name"]):
        conditions = (trial.get("status") or {}).get("conditions") or []
        kind = next((c["type"] for c in reversed(conditions) if c["status"] == "True"), "Created")
        lists[kind].append(trial["metadata"]["name"])
    out: dict[str, Any] = {
        "startTime": (katib.get("status") or {}).get("startTime") or created,
        "trials": len(trials),
        "trialsPending": len(lists["Created"]),
        "trialsRunning": len(lists["Running"]),
        "trialsSucceeded": len(lists["Succeeded"]),
        "trialsFailed": len(lists["Failed"]),
        "trialsKilled": len(lists["Killed"]),
        "trialsEarlyStopped": len(lists["EarlyStopped"]),
        "trialMetricsUnavailable": len(lists["MetricsUnavailable"]),
        "pendingTrialList": lists["Created"],
        "runningTrialList": lists["Running"],
        "succeededTrialList": lists["Succeeded"],
        "failedTrialList": lists["Failed"],
        "killedTrialList": lists["Killed"],
        "earlyStoppedTrialList": lists["EarlyStopped"],
        "metricsUnavailableTrialList": lists["MetricsUnavailable"],
    }
    out = {k: v for k, v in out.items() if v not in ([], 0) or k == "trials"}
    best = status.get("bestTrial")
    mirrored = {t["metadata"]["name"]: t for t in trials}
    if best and best.get("name") in mirrored:
        trial = mirrored[best["name"]]
        out["currentOptimalTrial"] = {
            "bestTrialName": best["name"],
            "parameterAssignments": trial["spec"]["parameterAssignments"],
            "observation": (trial.get("status") or {}).get("observation") or {"metrics": []},
        }
    conditions = [_condition("Created", True, "ExperimentCreated", "Experiment is created", created)]
    phase, reason, message = status.get("phase"), *_native_reason(status)
    if phase in ("Succeeded", "Failed"):
        total = int(spec.get("numSamples") or 0)
        if phase == "Succeeded" and reason not in _ENDS:
            if total and len(trials) >= total:
                end = (
                    "Succeeded",
                    "ExperimentMaxTrialsReached",
                    "Experiment has succeeded because max trial count has reached",
                )
            else:
                end = (
                    "Succeeded",
                    "ExperimentSuggestionEndReached",
                    "Experiment has succeeded because suggestion service has reached the end",
                )
        else:
            end = _ENDS.get(reason, (phase, "ExperimentFailed", None))
        kind, why, text = end
        ended = status.get("completionTime") or at
        conditions.append(_condition("Running", False, why, text or message, ended))
        conditions.append(_condition(kind, True, why, text or message, ended))
        out["completionTime"] = ended
    elif phase is not None:
        conditions.append(_condition("Running", True, "ExperimentRunning", "Experiment is running", out["startTime"]))
    out["conditions"] = _keep_times((katib.get("status") or {}).get("conditions") or [], conditions)
    return out


def _native_reason(status: Mapping) -> tuple[str, str]:
    """The reason and message of the native Experiment's phase (its Complete/Failed condition, else Running)."""
    by_type = {c.get("type"): c for c in status.get("conditions") or ()}
    for type_ in ("Failed", "Complete", "Running"):
        condition = by_type.get(type_)
        if condition and condition.get("status") == "True":
            return condition.get("reason") or "", condition.get("message") or ""
    return "", ""


def _keep_times(old: list[Mapping], new: list[dict]) -> list[dict]:
    """``new`` with each condition's times kept from ``old`` where its status and reason did not change, so an
    unchanged Experiment gets an unchanged status (and no write)."""
    before = {c.get("type"): c for c in old}
    for condition in new:
        prior = before.get(condition["type"])
        if prior and prior.get("status") == condition["status"] and prior.get("reason") == condition["reason"]:
            condition["lastTransitionTime"] = prior.get("lastTransitionTime") or condition["lastTransitionTime"]
            condition["lastUpdateTime"] = prior.get("lastUpdateTime") or condition["lastUpdateTime"]
    return new


def refused_status(katib: Mapping, error: str, now: datetime) -> dict:
    """The status of a Katib Experiment kubetune cannot run: ``Failed`` with reason ``ExperimentRefused`` and the
    converter's reason (which field, and why), so Katib's SDK raises with it instead of waiting."""
    at = format_time(now)
    conditions = [
        _condition("Created", False, "ExperimentRefused", error, at),
        _condition("Failed", True, "ExperimentRefused", error, at),
    ]
    return {"conditions": _keep_times((katib.get("status") or {}).get("conditions") or [], conditions)}
