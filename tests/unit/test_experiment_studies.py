"""The dashboard's experiment list (issue 32): which Experiments ``kubetune dashboard`` with no name shows, and how.

kubetune.sdk.experiment_studies and kubetune.sdk.experiment_summary over real parts: the Experiments come from
the small API server of tests/unit/test_cli_errors.py (real HTTP, answering 403 where RBAC would refuse) through
the client library, and their trials from storage written by the runtime's own writers (file://). The command
itself runs as a process against that API server, and Optuna Dashboard's API answers over HTTP.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from kubernetes.client import ApiException
from optuna_dashboard._note import get_note
from stored_experiment import EXPERIMENT, METRIC, NAMESPACE, SPACE, TRIALS, UID, store
from test_analysis import write_trial
from test_cli_errors import DISCOVERY, SERVED, api  # noqa: F401 - the API server fixture

from kubetune.sdk.client import Cluster
from kubetune.sdk.dashboard import ExperimentsDashboard
from kubetune.sdk.experiment_studies import ExperimentStudies, readable_experiments, study_name, unshown_reason
from kubetune.sdk.experiment_summary import age, summary, trials_by_phase
from kubetune.sdk.tuner import experiment_analysis
from kubetune.storage import join_uri

API = "/apis/kubetune.io/v1alpha1"
OTHER, MNIST, MNIST_UID = "other", "mnist", "77aa88bb"
CREATED = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=3, minutes=5)).strftime(
    "%Y-%m-%dT%H:%M:%SZ"
)


def experiment(namespace, name, uid, root, *, phase="Running", counts=None, best=None, **spec) -> dict:
    """An Experiment as the API returns it, its trials stored under ``root``."""
    status = {"phase": phase, "trials": counts or {}}
    if best:
        status["bestTrial"] = {"name": best[0], "metricValue": best[1]}
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name, "namespace": namespace, "uid": f"{uid}-0000", "creationTimestamp": CREATED},
        "spec": {"metric": METRIC, "mode": "max", "config": SPACE, "storage": {"uri": root}, **spec},
        "status": status,
    }


@pytest.fixture
def root(tmp_path) -> str:
    """Storage holding team/digits (the eight trials of stored_experiment) and other/mnist (one trial)."""
    uri = f"file://{tmp_path}/store"
    store(uri, tmp_path)
    write_mnist(uri, tmp_path, [0.3, 0.4])
    return uri


def write_mnist(root, tmp_path, values, name="mnist-00000"):
    write_trial(
        join_uri(root, OTHER, MNIST, MNIST_UID),
        name,
        [{METRIC: v} for v in values],
        config={"lr": 0.01, "layers": 1, "act": "relu", "epochs": 6},
        workdir=tmp_path / name,
    )


def digits(root, **kwargs):
    return experiment(NAMESPACE, EXPERIMENT, UID, root, **kwargs)


def mnist(root, **kwargs):
    return experiment(OTHER, MNIST, MNIST_UID, root, **kwargs)


def studies_of(listed: list[dict], settle_s: float = 0) -> ExperimentStudies:
    """The studies of whatever ``listed`` holds at each refresh, read as the command reads them (no failed Trial)."""
    return ExperimentStudies(
        lambda: list(listed),
        lambda e, previous, listed: experiment_analysis(e, [], previous, listed),
        settle_s=settle_s,
    )


def test_an_experiment_in_a_few_words():
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    assert [age(t, now) for t in ("2026-01-02T03:04:00Z", "2026-01-02T02:50:05Z", "2026-01-01T22:00:00Z")] == [
        "5s",
        "14m",
        "5h",
    ]
    assert (age("2025-12-30T03:04:05Z", now), age(None, now)) == ("3d", "-")
    status = {"trials": {"total": 9, "failed": 1, "running": 2, "succeeded": 5, "paused": 0, "pending": 1}}
    assert trials_by_phase(status) == "1 pending, 2 running, 5 succeeded, 1 failed"
    assert trials_by_phase({}) == "none"
    exp = {"metadata": {"creationTimestamp": "2026-01-02T02:04:05Z"}, "status": {**status, "phase": "Running"}}
    assert summary(exp, now) == {
        "phase": "Running",
        "trials": "1 pending, 2 running, 5 succeeded, 1 failed",
        "age": "1h",
    }
    exp["status"]["bestTrial"] = {"name": "e-00003", "metricValue": 0.97}
    assert summary(exp, now)["best_value"] == 0.97 and summary(exp, now)["best_trial"] == "e-00003"
    assert summary({"metadata": {}}, now) == {"phase": "Pending", "trials": "none", "age": "-"}


def test_which_experiments_show_cluster_wide_else_the_readable_namespaces(api):  # noqa: F811 - fixture
    """Through the client library over HTTP: 403 on the cluster-wide list falls back to the namespaces given, each
    once; a namespace that answers 403 is left out; any other refusal is raised."""
    cluster = Cluster.connect()
    a, b = digits("file:///x"), mnist("file:///x")
    api.routes[f"{API}/experiments"] = {"items": [b, a]}
    assert [study_name(e) for e in readable_experiments(cluster.list_all_namespaces, cluster.list, ["nope"])] == [
        "other/mnist",
        "team/digits",
    ]
    assert api.requests == [f"{API}/experiments"]

    api.requests.clear()
    api.routes[f"{API}/experiments"] = 403
    api.routes[f"{API}/namespaces/team/experiments"] = {"items": [a]}
    api.routes[f"{API}/namespaces/other/experiments"] = 403
    shown = readable_experiments(cluster.list_all_namespaces, cluster.list, ["other", "team", "other"])
    assert [study_name(e) for e in shown] == ["team/digits"]
    assert api.requests == [
        f"{API}/experiments",
        f"{API}/namespaces/other/experiments",
        f"{API}/namespaces/team/experiments",
    ]

    api.routes[f"{API}/namespaces/other/experiments"] = 401
    with pytest.raises(ApiException) as refused:
        readable_experiments(cluster.list_all_namespaces, cluster.list, ["team", "other"])
    assert refused.value.status == 401
    api.routes[f"{API}/experiments"] = 500
    with pytest.raises(ApiException):
        readable_experiments(cluster.list_all_namespaces, cluster.list, ["team"])


def test_each_experiment_is_a_study_named_namespace_slash_name_with_its_trials_and_words(root):
    listed = [
        digits(root, counts={"running": 2, "succeeded": 5, "failed": 1}, best=("digits-00003", 0.93)),
        mnist(root, phase="Pending"),
    ]
    studies = studies_of(listed)
    assert studies.refresh() is True
    shown = studies.studies()
    assert list(shown) == ["team/digits", "other/mnist"]
    assert [t.user_attrs["kubetune_trial"] for t in shown["team/digits"].trials] == [t.name for t in TRIALS]
    assert [t.state.name for t in shown["team/digits"].trials][:2] == ["COMPLETE", "COMPLETE"]
    assert shown["team/digits"].user_attrs == {
        "phase": "Running",
        "trials": "2 running, 5 succeeded, 1 failed",
        "age": "3h",
        "best_value": 0.93,
        "best_trial": "digits-00003",
    }
    assert get_note(shown["team/digits"]) == (
        "Experiment `team/digits`: **Running** · trials: 2 running, 5 succeeded, 1 failed · "
        f"best {METRIC}: 0.93 (digits-00003) · age: 3h"
    )
    assert shown["other/mnist"].user_attrs == {"phase": "Pending", "trials": "none", "age": "3h"}
    assert [t.intermediate_values for t in shown["other/mnist"].trials] == [{1: 0.3, 2: 0.4}]
    assert studies.refresh() is False  # nothing changed

    listed[1] = mnist(root, phase="Succeeded", counts={"succeeded": 1}, best=("mnist-00000", 0.4))
    assert studies.refresh() is True
    assert studies.studies()["other/mnist"].user_attrs["phase"] == "Succeeded"
    assert f"best {METRIC}: 0.4 (mnist-00000)" in get_note(studies.studies()["other/mnist"])


def test_an_experiment_whose_trials_cannot_show_is_a_study_saying_why_until_they_can(root, tmp_path):
    listed = [
        experiment("team", "no-metric", "11111111", root, metric=None, mode=None),
        experiment(
            "team",
            "two",
            "22222222",
            root,
            metric=None,
            mode=None,
            objectives=[{"metric": "a", "mode": "max"}, {"metric": "b", "mode": "min"}],
        ),
        experiment("team", "elsewhere", "33333333", root, storage={"uri": "gs://bucket/kubetune"}),
        experiment("team", "fresh", "44444444", root),
    ]
    studies = studies_of(listed)
    studies.refresh()
    shown = studies.studies()
    assert list(shown) == ["team/no-metric", "team/two", "team/elsewhere", "team/fresh"]
    assert all(study.trials == [] for study in shown.values())
    reasons = {name: get_note(study).split("\n\n")[1] for name, study in shown.items()}
    assert (
        reasons["team/no-metric"]
        == "Its trials are not shown: it has no spec.metric and spec.mode to rank its trials by."
    )
    assert reasons["team/two"] == "Its trials are not shown: nothing is in its storage yet."
    assert len(shown["team/two"].directions) == 2
    assert reasons["team/elsewhere"].startswith("Its trials are not shown: its storage cannot be read (ValueError: ")
    assert reasons["team/fresh"] == "Its trials are not shown: nothing is in its storage yet."
    ids = {name: study._study_id for name, study in shown.items()}
    assert studies.refresh() is False and {n: s._study_id for n, s in studies.studies().items()} == ids

    write_trial(join_uri(root, "team", "fresh", "44444444"), "fresh-00000", [{METRIC: 0.5}], workdir=tmp_path / "f")
    assert studies.refresh() is True
    fresh = studies.studies()["team/fresh"]
    assert [t.user_attrs["kubetune_trial"] for t in fresh.trials] == ["fresh-00000"]
    assert "not shown" not in get_note(fresh)
    assert studies.storage.get_study_id_from_name("team/fresh") == fresh._study_id  # one study of that name

    write_trial(join_uri(root, "team", "two", "22222222"), "two-00000", [{"a": 0.5, "b": 2.0}], workdir=tmp_path / "t")
    assert studies.refresh() is True
    two = studies.studies()["team/two"]
    assert [d.name for d in two.directions] == ["MAXIMIZE", "MINIMIZE"] and two.metric_names == ["a", "b"]
    assert [t.user_attrs["kubetune_trial"] for t in two.trials] == ["two-00000"]


def test_new_experiments_appear_deleted_ones_stay_and_one_created_again_replaces_its_study(root, tmp_path):
    listed = [digits(root)]
    studies = studies_of(listed, settle_s=3600)
    studies.refresh()
    assert list(studies.studies()) == ["team/digits"]
    listed.append(mnist(root))
    assert studies.refresh() is True
    assert list(studies.studies()) == ["team/digits", "other/mnist"]
    write_mnist(root, tmp_path, [0.1], name="mnist-00001")
    assert studies.refresh() is True  # a new trial in a running experiment
    assert len(studies.studies()["other/mnist"].trials) == 2

    del listed[0]  # team/digits deleted: its study stays as last seen
    assert studies.refresh() is False
    assert len(studies.studies()["team/digits"].trials) == len(TRIALS)
    again = digits(root)
    again["metadata"]["uid"] = "99999999-0000"  # created again: a new folder, nothing stored yet
    listed.append(again)
    studies.refresh()
    assert studies.studies()["team/digits"].trials == []
    assert [s.study_name for s in studies.storage.get_all_studies()] == ["other/mnist", "team/digits"]


def test_an_experiment_with_a_metric_and_a_mode_can_be_a_study():
    assert unshown_reason({"metric": "acc", "mode": "max"}) is None
    assert unshown_reason({"metric": "acc"}) is not None
    two = [{"metric": "acc", "mode": "max"}, {"metric": "latency", "mode": "min"}]
    assert unshown_reason({"objectives": two}) is None
    assert unshown_reason({"objectives": [two[0], {"metric": "latency"}]}) is not None


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _refused(url: str, method: str) -> int:
    request = urllib.request.Request(url, method=method, data=b'{"study_name": "x", "directions": ["minimize"]}')
    request.add_header("Content-Type", "application/json")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    return refused.value.code


def test_the_list_is_served_read_only_with_each_studys_words(root):
    with ExperimentsDashboard(studies_of([digits(root), mnist(root)]), refresh_s=0.2) as served:
        api_url = served.url.replace("/dashboard", "/api")
        deadline = time.monotonic() + 10
        while len(_get(f"{api_url}/studies")["study_summaries"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        listed = {s["study_name"]: s for s in _get(f"{api_url}/studies")["study_summaries"]}
        assert list(listed) == ["team/digits", "other/mnist"]
        assert {"key": "phase", "value": "Running"} in listed["team/digits"]["user_attrs"]
        assert _refused(f"{api_url}/studies", "POST") == 405
        study_id = listed["team/digits"]["study_id"]
        assert _refused(f"{api_url}/studies/{study_id}", "DELETE") == 405
        assert _refused(f"{api_url}/studies/{study_id}/rename", "POST") == 405
        assert [s["study_name"] for s in _get(f"{api_url}/studies")["study_summaries"]] == [
            "team/digits",
            "other/mnist",
        ]
        assert len(_get(f"{api_url}/studies/{study_id}")["trials"]) == len(TRIALS)


def test_the_command_shows_only_the_namespaces_the_identity_may_read(api, root):  # noqa: F811 - fixture
    """``kubetune dashboard`` with no name, as a process: the cluster-wide list and namespace ``other`` answer 403,
    ``team`` (the context's) answers; only team/digits shows, and nothing fails."""
    api.routes[DISCOVERY] = SERVED
    api.routes[f"{API}/experiments"] = 403
    api.routes[f"{API}/namespaces/team/experiments"] = {"items": [digits(root)]}
    api.routes[f"{API}/namespaces/team/trials"] = {"items": []}
    api.routes[f"{API}/namespaces/other/experiments"] = 403
    command = [sys.executable, "-m", "kubetune.sdk.cli", "dashboard", "--no-browser", "--port", "0", "--refresh", "0.2"]
    proc = subprocess.Popen([*command, "-n", "other", "-n", "team"], stderr=subprocess.PIPE, text=True, env=os.environ)
    try:
        line = proc.stderr.readline()
        assert "Optuna Dashboard of the Experiments you may list (every namespace, else other, team)" in line, line
        api_url = line.split(": ")[-1].split()[0].replace("/dashboard", "/api")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            names = [s["study_name"] for s in _get(f"{api_url}/studies")["study_summaries"]]
            if names and api.requests.count(f"{API}/namespaces/other/experiments") >= 2:
                break
            time.sleep(0.1)
        assert names == ["team/digits"]
        study_id = _get(f"{api_url}/studies")["study_summaries"][0]["study_id"]
        assert len(_get(f"{api_url}/studies/{study_id}")["trials"]) == len(TRIALS)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"Ctrl-C did not end the dashboard: {proc.communicate()[1][-3000:]}") from None
    assert proc.returncode == 0 and "Traceback" not in err and "forbidden" not in err.lower(), err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--storage-only"], "--storage-only, --metric and --mode go with NAME"),
        (["--metric", "acc"], "--storage-only, --metric and --mode go with NAME"),
        (["exp", "-n", "a", "-n", "b"], "kubetune dashboard NAME takes one --namespace"),
    ],
)
def test_what_the_list_does_not_take_is_a_usage_error(args, message, capsys):
    from kubetune.sdk import cli

    assert cli.main(["dashboard", "--no-browser", *args]) == cli.USAGE
    assert message in capsys.readouterr().err
