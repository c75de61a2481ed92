"""Experiments as the operator writes them in each phase and condition, for the checks of what GitOps tools
read from them (``test_argocd_health.py``, ``test_kstatus.py``): each status comes from a real
:class:`kubetune_operator.controller.ExperimentController` driven through its phases with pod views, or from
the validation handler's own patch for a spec it refuses."""

from __future__ import annotations

import copy

import kopf

from devcluster.testkit import ConfigMaps, experiment_object
from kubetune.env import OUTCOME_COMPLETED, OUTCOME_TERMINATED
from kubetune_operator.controller import ExperimentController
from kubetune_operator.handlers import _mark
from kubetune_operator.labels import pod_name
from kubetune_operator.podview import PodView
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings
from kubetune_operator.spec_intake import InvalidSpec

KEY = b"k" * 32
T0 = 1_800_000_000.0


def _experiment(generation: int = 1, **spec) -> dict:
    base = {
        "trainable": {"entrypoint": "m:T"},
        "image": "img",
        "config": {"lr": {"grid_search": [1, 2]}},
        "metric": "acc",
        "mode": "max",
        "maxConcurrentTrials": 2,
        "storage": {"uri": "s3://bucket/prefix"},
        "failure": {"maxFailures": 0, "maxFailedTrials": 0},
    }
    base.update(spec)
    return experiment_object(generation=generation, **base)


def _pod(name: str, phase: str, outcome: str | None = None, exit_code: int | None = None) -> PodView:
    trial, attempt = name.rsplit("-", 1)
    message = f'{{"outcome": "{outcome}", "iteration": 3}}' if outcome else "boom"
    return PodView(name, trial, int(attempt), phase, exit_code=exit_code, message=message)


def _object(ctl: ExperimentController) -> dict:
    obj = copy.deepcopy(ctl.experiment)
    obj["status"] = copy.deepcopy(ctl.exp_status)
    return obj


def _started(**spec) -> ExperimentController:
    ctl = ExperimentController(_experiment(**spec), Settings(), KEY)
    for manifest in ctl.plan({}, T0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
    ctl.plan({}, T0 + 1)
    return ctl


def _running(ctl: ExperimentController) -> dict:
    return {pod_name(name, 0): _pod(pod_name(name, 0), "Running") for name in ctl.trials}


def states() -> dict[str, dict]:
    """``{name: Experiment object}``: ``pending`` (no status yet), ``running``, ``succeeded``, ``failed``,
    ``suspended``, ``invalid-spec`` (refused on creation), ``invalid-edit`` (a refused edit while the
    previous spec runs), ``edited`` (a new generation the operator has not taken yet), ``degraded``
    (reconcile passes fail) and ``deleting``."""
    out = {"pending": _experiment()}

    ctl = _started()
    ctl.plan(_running(ctl), T0 + 2)
    out["running"] = _object(ctl)

    edited = copy.deepcopy(out["running"])
    edited["metadata"]["generation"] = 2
    out["edited"] = edited

    deleting = copy.deepcopy(out["running"])
    deleting["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    out["deleting"] = deleting

    ctl.health.degraded = "listing trials failed: 503 Service Unavailable"
    ctl.plan(_running(ctl), T0 + 3)
    out["degraded"] = _object(ctl)

    registry = Registry(Settings(), KEY, ConfigMaps().write)
    ctl = registry.load(_experiment())
    for manifest in ctl.plan({}, T0).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
    ctl.plan(_running(ctl), T0 + 2)
    edit = _experiment(generation=2, scheduler={"name": "no-such-scheduler"})
    try:
        registry.load(edit)
    except InvalidSpec:
        pass  # the previous spec stays in force
    ctl.plan(_running(ctl), T0 + 3)
    out["invalid-edit"] = {**_object(ctl), "metadata": edit["metadata"], "spec": edit["spec"]}

    ctl = _started()
    ctl.plan({pod_name(n, 0): _pod(pod_name(n, 0), "Succeeded", OUTCOME_COMPLETED) for n in ctl.trials}, T0 + 2)
    out["succeeded"] = _object(ctl)

    ctl = _started()
    ctl.plan({pod_name(n, 0): _pod(pod_name(n, 0), "Failed", exit_code=1) for n in ctl.trials}, T0 + 2)
    out["failed"] = _object(ctl)

    ctl = _started()
    ctl.plan(_running(ctl), T0 + 2)
    ctl.update(_experiment(suspend=True))
    ctl.plan(_running(ctl), T0 + 3)
    ctl.plan({pod_name(n, 0): _pod(pod_name(n, 0), "Succeeded", OUTCOME_TERMINATED) for n in ctl.trials}, T0 + 4)
    out["suspended"] = _object(ctl)

    invalid = _experiment(scheduler={"name": "no-such-scheduler"})
    try:
        registry.load(invalid)
    except InvalidSpec as exc:  # the validation handler marks it, as it does on the cluster
        written = _Written()
        _mark(written, kopf.Body(invalid), "Ready", "InvalidSpec", str(exc))
        invalid["status"] = written.status
    out["invalid-spec"] = invalid
    return out


class _Written:
    """Takes the status patch ``handlers._mark`` sends (in place of :class:`kubetune_operator.kube.Kube`)."""

    status: dict = {}

    def patch_experiment_status(self, namespace: str, name: str, patch: dict) -> None:
        self.status = patch
