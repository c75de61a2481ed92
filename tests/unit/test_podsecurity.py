"""Trial pods against the Pod Security Standards levels, and Experiments refused for breaking the allowed one."""

from __future__ import annotations

import pytest

from kubetune_operator.builders import sample_pod
from kubetune_operator.controller import ExperimentController
from kubetune_operator.podsecurity import violations
from kubetune_operator.settings import Settings, TrialSettings
from kubetune_operator.spec_intake import InvalidSpec
from tests.unit.test_controller import KEY, experiment


def _pod(**template):
    return sample_pod(experiment(template=template), Settings())


def test_the_pods_kubetune_builds_meet_restricted():
    assert violations(_pod(), "restricted") == []
    assert (
        violations(
            _pod(
                securityContext={"runAsUser": 2000, "fsGroup": 2000},
                volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
            ),
            "restricted",
        )
        == []
    )


@pytest.mark.parametrize(
    "template, broken_at, words",
    [
        ({"securityContext": {"runAsUser": 0}}, "baseline", "runAsUser is 0"),
        ({"securityContext": {"runAsNonRoot": False}}, "baseline", "runAsNonRoot"),
        ({"volumes": [{"name": "nfs", "nfs": {"server": "s", "path": "/"}}]}, "baseline", "'nfs' is of a type"),
        ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "privileged", "Unconfined"),
        ({"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}, "privileged", "'host' is a hostPath"),
        ({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}, "privileged", "kernel.msgmax"),
        ({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}, "privileged", "seLinuxOptions"),
    ],
)
def test_a_template_that_loosens_the_pod_is_caught_at_the_levels_it_breaks(template, broken_at, words):
    pod = _pod(**template)
    levels = ["restricted", "baseline", "privileged"]
    for level in levels:
        found = violations(pod, level)
        if levels.index(level) < levels.index(broken_at):
            assert any(words in line for line in found), (level, found)
        else:
            assert found == [], (level, found)


def test_an_experiment_beyond_the_allowed_level_is_refused_with_every_reason():
    spec = experiment(
        template={
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "volumes": [{"name": "host", "hostPath": {"path": "/etc"}}],
        }
    )
    with pytest.raises(InvalidSpec) as err:
        ExperimentController(spec, Settings(), KEY)
    message = str(err.value)
    assert "'restricted' Pod Security level" in message and "trials.pod_security_level" in message
    assert "runAsUser is 0" in message and "'host' is a hostPath" in message
    allowed = Settings(trials=TrialSettings(pod_security_level="privileged"))
    assert ExperimentController(spec, allowed, KEY).plan({}, 0.0).create_trials  # the operator's setting allows it


def test_a_template_that_makes_no_valid_pod_is_refused_at_once():
    with pytest.raises(InvalidSpec, match="KUBETUNE_TOKEN"):
        ExperimentController(experiment(template={"env": [{"name": "KUBETUNE_TOKEN", "value": "x"}]}), Settings(), KEY)


def test_an_unknown_level_is_a_settings_error():
    with pytest.raises(ValueError, match="pod_security_level"):
        Settings.from_env({"KUBETUNE_OPERATOR_TRIALS_POD_SECURITY_LEVEL": "lax"})
