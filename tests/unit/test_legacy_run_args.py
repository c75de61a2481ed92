"""Ray 0.8's ``tune.run`` keywords (its "Tune User Guide") are honoured or refused by name, never a bare
``TypeError`` (issue 33): ``upload_dir`` is the storage, ``resume`` re-attaches to the Experiment of the run's name,
``return_trials`` returns the trials, the sync and server keywords mean nothing here and say why, a custom trial
executor, a Tune server or a trial dirname creator is refused with the reason and what to use (trial_name_creator:
``tests/unit/test_trial_names.py``). ``loggers`` and
``callbacks``: ``tests/unit/test_ray_modules.py``."""

from __future__ import annotations

import re
import warnings

import pytest

import kubetune as tune
from kubetune.sdk.client import ClusterUnavailable
from kubetune.sdk.tuner import IGNORED, legacy_run_args


def args(name="exp", restore=None, storage=None, **kwargs):
    return legacy_run_args(kwargs, name=name, restore=restore, storage=storage)


def test_upload_dir_is_the_storage_uri():
    assert args(upload_dir="s3://bucket/results").storage == "s3://bucket/results"
    assert args(upload_dir="s3://bucket/results", storage="s3://bucket/results").storage == "s3://bucket/results"
    assert args(upload_dir=None, storage="s3://b/p").storage == "s3://b/p"
    with pytest.raises(ValueError, match="upload_dir='s3://a/x' and storage 's3://b/p' differ: give one"):
        args(upload_dir="s3://a/x", storage="s3://b/p")


@pytest.mark.parametrize("resume", [True, "LOCAL", "REMOTE", "local", "remote"])
def test_resume_re_attaches_to_the_experiment_of_the_runs_name(resume):
    assert args(resume=resume).restore == "exp"
    assert args(name="PBT_synch", resume=resume).restore == "pbt-synch"  # the Kubernetes name tune.run made
    assert args(resume=resume, restore="exp").restore == "exp"
    with pytest.raises(ValueError, match="pass name="):
        args(name=None, resume=resume)
    with pytest.raises(ValueError, match="attaches to 'exp' and restore= to 'other': give one"):
        args(resume=resume, restore="other")


@pytest.mark.parametrize("resume", [None, False])
def test_no_resume_creates_the_experiment_or_takes_restore(resume):
    assert args(resume=resume).restore is None
    assert args(resume=resume, restore="old").restore == "old"


@pytest.mark.parametrize("resume", ["PROMPT", "AUTO", "ERRORED_ONLY", "AUTO+RESTART_ERRORED", "yes"])
def test_a_resume_kubetune_cannot_honour_is_refused_with_the_alternative(resume):
    with pytest.raises(
        ValueError, match=re.escape(f"resume={resume!r} is not supported by kubetune: resume=True re-at")
    ):
        args(resume=resume)


def test_return_trials_asks_for_the_trials():
    assert args(return_trials=True).return_trials is True
    assert args(return_trials=False).return_trials is False
    assert args().return_trials is False


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("sync_to_cloud", "aws s3 sync {source} {target}", "trial pods upload their results"),
        ("sync_to_driver", False, "never synced to this machine"),
        ("sync_on_checkpoint", True, "committed it to the experiment's storage"),
        ("global_checkpoint_period", 10, "the operator journals"),
        ("ray_auto_init", True, "no Ray cluster to start"),
        ("server_port", 4321, "no Tune server"),
    ],
)
def test_keywords_that_mean_nothing_for_pods_are_accepted_with_why(key, value, why):
    with pytest.warns(UserWarning, match=rf"{key} is ignored by kubetune: .*{why}"):
        assert args(**{key: value}) == (None, None, False, [], ())
    assert why in IGNORED[key]


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("with_server", True, "no Tune server to add or read trials through: .*kubectl get experiments,trials"),
        ("trial_executor", object(), "no trial executor to replace; shape the pods with resources_per_trial="),
        ("trial_dirname_creator", lambda trial: str(trial), "named after its Trial object.*trial_name_creator"),
    ],
)
def test_keywords_kubetune_cannot_honour_are_refused_by_name_with_the_alternative(key, value, why):
    with pytest.raises(ValueError, match=rf"{key} is not supported by kubetune: .*{why}"):
        args(**{key: value})


@pytest.mark.parametrize("key, default", [("with_server", False), ("trial_executor", None)])
def test_rays_defaults_of_refused_keywords_are_accepted(key, default):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert args(**{key: default}) == (None, None, False, [], ())


def test_a_keyword_ray_has_not_is_still_a_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):
        args(no_such_argument=1)


def test_tune_run_checks_them_before_it_asks_the_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    with pytest.raises(ValueError, match="resume=True re-attaches to the Experiment of the run's name: pass name="):
        tune.run("m:T", resume=True, storage="s3://b/p")
    with pytest.warns(UserWarning, match="ray_auto_init is ignored by kubetune") as record:
        with pytest.raises(ClusterUnavailable):  # accepted: the next step asks the cluster
            tune.run("m:T", name="exp", upload_dir="s3://b/p", ray_auto_init=False, resume=True, return_trials=True)
    assert record[0].filename == __file__  # the warning points at the caller's line
