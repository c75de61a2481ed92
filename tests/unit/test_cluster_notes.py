"""What the dashboard shows of an Experiment's cluster objects (issue 32): kubetune.sdk.cluster_notes.

The Markdown of the notes and the Trial status columns from Trials, Experiments and Events shaped as the API returns
them (pure functions); :class:`~kubetune.sdk.cluster_notes.ClusterNotes` over a fake cluster reader (its reads
counted, its failures the client library's ``ApiException``) writing into the studies of the experiment list and of
one experiment, their trials read from storage written by the runtime's own writers (file://); and the cluster's
reads of :class:`kubetune.sdk.client.Cluster` over HTTP against the small API server of test_cli_errors.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import optuna
import pytest
from kubernetes.client import ApiException
from optuna_dashboard import get_note
from stored_experiment import EXPERIMENT, METRIC, NAMESPACE, SPACE, TRIALS, UID
from test_analysis import write_trial
from test_cli_errors import DISCOVERY, SERVED, api  # noqa: F401 - the API server fixture
from test_experiment_studies import digits, root  # noqa: F401 - root is a fixture

from kubetune.sdk.analysis import ExperimentAnalysis
from kubetune.sdk.client import Cluster
from kubetune.sdk.cluster_notes import (
    ClusterNotes,
    LogRead,
    clean_log,
    conditions_table,
    events_table,
    fenced,
    read_error,
    trial_attrs,
    trial_note,
)
from kubetune.sdk.dashboard import Dashboard
from kubetune.sdk.experiment_studies import ExperimentStudies
from kubetune.sdk.tuner import experiment_analysis

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
EXPERIMENT_UID = f"{UID}-0000"  # test_experiment_studies.experiment's


def refused(status: int, message: str) -> ApiException:
    """An ``ApiException`` as the client library raises it for a refusal, with a header that must never show."""
    exc = ApiException(status=status, reason={403: "Forbidden", 404: "Not Found"}.get(status, "Error"))
    exc.body = json.dumps({"kind": "Status", "message": message, "code": status})
    exc.headers = {"Www-Authenticate": "Bearer secret-token"}
    return exc


def trial(index: int, phase: str | None = "Running", **status) -> dict:
    """A Trial of the stored experiment as the API returns it."""
    name = TRIALS[index].name if index < len(TRIALS) else f"{EXPERIMENT}-{index:05d}"
    body = {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Trial",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "ownerReferences": [{"kind": "Experiment", "name": EXPERIMENT, "uid": EXPERIMENT_UID}],
        },
        "spec": {"experiment": EXPERIMENT, "index": index, "config": {}},
    }
    if phase is not None:
        attempt = status.pop("attempt", 0)
        body["status"] = {"phase": phase, "attempt": attempt, **status}
        if phase != "Pending" and "podName" not in status:
            body["status"]["podName"] = f"{name}-{attempt}"
    return body


def event(kind: str, name: str, reason: str, message: str, at: str, type_="Normal", count=1) -> dict:
    return {
        "metadata": {"name": f"{name}.{reason}", "namespace": NAMESPACE},
        "involvedObject": {"apiVersion": "kubetune.io/v1alpha1", "kind": kind, "name": name, "namespace": NAMESPACE},
        "type": type_,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "count": count,
    }


CONDITIONS = [
    {
        "type": "Ready",
        "status": "True",
        "reason": "SpecValid",
        "message": "the spec is valid",
        "lastTransitionTime": "2026-01-02T02:04:05Z",
    },
    {
        "type": "TrialsWaiting",
        "status": "True",
        "reason": "Unschedulable",
        "message": "1 trial waits: 0/3 nodes | Insufficient cpu",
        "lastTransitionTime": "2026-01-02T03:03:05Z",
    },
]


class FakeCluster:
    """A :class:`kubetune.sdk.cluster_notes.ClusterReader`: Trials and Events by namespace, logs by pod (a string,
    or an exception raised); each read recorded."""

    def __init__(self):
        self.trials: dict[str, list[dict] | Exception] = {}
        self.events: dict[str, list[dict] | Exception] = {}
        self.logs: dict[str, str | Exception] = {}
        self.reads: list[tuple[str, str]] = []

    def _answer(self, found):
        if isinstance(found, Exception):
            raise found
        return found

    def list_trials(self, namespace: str) -> list[dict]:
        self.reads.append(("trials", namespace))
        return self._answer(self.trials.get(namespace, []))

    def list_events(self, namespace: str) -> list[dict]:
        self.reads.append(("events", namespace))
        return self._answer(self.events.get(namespace, []))

    def log_tail(self, namespace: str, pod: str, lines: int) -> str:
        self.reads.append(("log", pod))
        text = self._answer(self.logs.get(pod, refused(404, f'pods "{pod}" not found')))
        return "\n".join(text.splitlines()[-lines:]) + "\n"

    def log_reads(self) -> list[str]:
        reads = [pod for what, pod in self.reads if what == "log"]
        self.reads.clear()
        return reads


class Clock:
    def __init__(self):
        self.now = NOW.timestamp()

    def __call__(self) -> float:
        return self.now


def log_of(pod: str, lines: int = 80) -> str:
    return "".join(f"{pod} step {i}\n" for i in range(lines))


# --- the pure functions --------------------------------------------------------------------------------------------


def test_a_trials_status_columns():
    waiting = trial(
        3, "Pending", reason="Unschedulable", message="0/3 nodes are available:\n3 Insufficient cpu", attempt=1
    )
    assert trial_attrs(waiting) == {
        "phase": "Pending",
        "reason": "Unschedulable",
        "pending_cause": "0/3 nodes are available: 3 Insufficient cpu",
        "attempt": 1,
    }
    assert trial_attrs(trial(3, "Pending", reason="Starting"))["pending_cause"] == "Starting"
    assert trial_attrs(trial(3, None)) == {
        "phase": "Pending",
        "reason": "",
        "pending_cause": "not scheduled yet",
        "attempt": 0,
    }
    running = trial(3, "Running", reason="Running", attempt=2, message="an earlier attempt's error")
    assert trial_attrs(running) == {"phase": "Running", "reason": "Running", "pending_cause": "", "attempt": 2}


def test_the_conditions_are_a_table_with_each_ones_last_transition():
    table = conditions_table({"status": {"conditions": CONDITIONS}}, NOW)
    assert table.splitlines() == [
        "| Type | Status | Reason | Message | Last transition |",
        "|---|---|---|---|---|",
        "| Ready | True | SpecValid | the spec is valid | 2026-01-02T02:04:05Z (1h ago) |",
        "| TrialsWaiting | True | Unschedulable | 1 trial waits: 0/3 nodes \\| Insufficient cpu "
        "| 2026-01-02T03:03:05Z (1m ago) |",
    ]
    assert conditions_table({"metadata": {}}, NOW).startswith("No conditions yet")


def test_the_events_are_the_newest_about_the_experiment_or_its_trials():
    events = [
        event("Experiment", EXPERIMENT, "TrialsCreated", "created digits-00000", "2026-01-02T03:00:00Z"),
        event(
            "Trial",
            "digits-00001",
            "TrialWaiting",
            "pod digits-00001-0: Unschedulable",
            "2026-01-02T03:04:00Z",
            type_="Warning",
            count=3,
        ),  # fmt: skip
        event("Trial", "other-00000", "TrialSucceeded", "not this experiment's", "2026-01-02T03:04:04Z"),
        event("Experiment", "other", "TrialsCreated", "not this experiment", "2026-01-02T03:04:04Z"),
        event("Trial", "digits-00000", "TrialSucceeded", "Completed at iteration 6", "2026-01-02T03:02:05Z"),
    ]
    table = events_table(events, EXPERIMENT, ["digits-00000", "digits-00001"], NOW)
    assert table.splitlines() == [
        "| Last seen | Type | Reason | Object | Message |",
        "|---|---|---|---|---|",
        "| 5s ago | Warning | TrialWaiting | trial/digits-00001 | pod digits-00001-0: Unschedulable (×3) |",
        "| 2m ago | Normal | TrialSucceeded | trial/digits-00000 | Completed at iteration 6 |",
        "| 4m ago | Normal | TrialsCreated | experiment/digits | created digits-00000 |",
    ]
    newest = events_table(events, EXPERIMENT, ["digits-00000", "digits-00001"], NOW, limit=1)
    assert "TrialWaiting" in newest and "TrialSucceeded" not in newest and newest.endswith("…and 2 older.")
    assert events_table(events, "nothing", [], NOW).startswith("No events")


def test_a_trials_note_says_its_status_and_shows_the_tail_of_its_pods_log():
    running = trial(0, "Running", reason="Running", attempt=1)
    text = "epoch 1\n```not the end of the block```\nepoch 2\n"
    note = trial_note(running, LogRead("digits-00000-1", "Running", text=text, read_at=NOW.timestamp()))
    assert note.startswith("Trial `digits-00000`: **Running** · reason `Running` · attempt 1 · pod `digits-00000-1`")
    assert "Last 50 lines of the log of pod `digits-00000-1` (container `trial`), read at 03:04:05 UTC:" in note
    assert note.endswith("````text\nepoch 1\n```not the end of the block```\nepoch 2\n````")
    assert fenced("a") == "```text\na\n```"
    bar = "\x1b[32mloading\x1b[0m\n 10%|#  |\r 50%|### |\r100%|#####|\n" + "x" * 500 + "\n"
    assert clean_log(bar, lines=3, width=12) == "loading\n100%|#####|\nxxxxxxxxxxx…\n"
    assert clean_log(bar, lines=1) == "x" * 399 + "…\n" and clean_log("") == ""

    waiting = trial(1, "Pending", reason="ErrImagePull", message="pull access denied\nfor image x", attempt=0)
    assert trial_note(waiting, None) == (
        "Trial `digits-00001`: **Pending** · reason `ErrImagePull` · attempt 0\n\n"
        "Message:\n\n```text\npull access denied\nfor image x\n```\n\nNo pod yet."
    )
    retrying = trial(0, "Pending", reason="Retrying", message="RuntimeError: boom", attempt=2, podName="digits-00000-2")
    note = trial_note(retrying, LogRead("digits-00000-1", "Running", text="boom\n", read_at=NOW.timestamp()))
    assert "pod `digits-00000-2`" in note and "```text\nRuntimeError: boom\n```" in note
    assert "log of pod `digits-00000-1`" in note and note.endswith("```text\nboom\n```")  # the failed attempt's
    gone = LogRead("digits-00000-1", "Succeeded", text="last words\n", gone=True, read_at=NOW.timestamp())
    note = trial_note(trial(0, "Succeeded", reason="Completed", attempt=1), gone)
    assert "Pod `digits-00000-1` is gone" in note and "as last read at 03:04:05 UTC" in note and "last words" in note
    forbidden = LogRead("digits-00000-1", "Running", error=read_error(refused(403, "pods/log is forbidden")))
    note = trial_note(running, forbidden)
    assert "cannot be read (00:00:00 UTC): 403 Forbidden: pods/log is forbidden." in note
    assert "secret-token" not in note


# --- over the studies of the experiment list -----------------------------------------------------------------------


def listed_with_notes(root, cluster, clock, **kwargs):  # noqa: F811 - root is the fixture's value
    experiment = digits(root, counts={"running": 6, "failed": 1, "pending": 1})
    experiment["status"]["conditions"] = CONDITIONS
    studies = ExperimentStudies(
        lambda: [experiment],
        lambda e, previous, listed: experiment_analysis(
            e, cluster.trials[NAMESPACE], previous, listed
        ),  # the failed Trials' messages: FAIL at once
        settle_s=3600,
        notes=ClusterNotes(cluster, clock=clock, **kwargs),
    )
    return experiment, studies


def test_the_list_writes_conditions_events_columns_and_logs_bounded_per_refresh(root):  # noqa: F811 - fixture
    cluster, clock = FakeCluster(), Clock()
    trials = [trial(i, "Running", reason="Running") for i in range(6)]
    trials.append(trial(6, "Failed", reason="Error", message="ValueError: the loss diverged", attempt=2))
    trials.append(trial(8, "Pending", reason="Unschedulable", message="0/3 nodes: Insufficient cpu"))  # no storage
    cluster.trials[NAMESPACE] = trials
    cluster.events[NAMESPACE] = [
        event("Trial", "digits-00008", "TrialWaiting", "pod digits-00008-0: Unschedulable", "2026-01-02T03:04:00Z")
    ]
    cluster.logs = {t["status"]["podName"]: log_of(t["status"]["podName"]) for t in trials if "podName" in t["status"]}
    _, studies = listed_with_notes(root, cluster, clock, max_logs=3)

    assert studies.refresh() is True
    study = studies.studies()[f"{NAMESPACE}/{EXPERIMENT}"]
    note = get_note(study)
    assert note.startswith(f"Experiment `{NAMESPACE}/{EXPERIMENT}`: **Running** · trials: 1 pending, 6 running")
    assert "### Conditions\n\n| Type | Status | Reason | Message | Last transition |" in note
    assert "| TrialsWaiting | True | Unschedulable | 1 trial waits: 0/3 nodes \\| Insufficient cpu |" in note
    assert "### Trials waiting for their pod\n\n| Trial | Attempt | Reason | Message |" in note
    assert "| digits-00008 | 0 | Unschedulable | 0/3 nodes: Insufficient cpu |" in note
    assert "| TrialWaiting | trial/digits-00008 | pod digits-00008-0: Unschedulable |" in note

    by_name = {t.user_attrs["kubetune_trial"]: t for t in study.get_trials()}
    assert {k: by_name["digits-00001"].user_attrs[k] for k in ("phase", "reason", "pending_cause", "attempt")} == {
        "phase": "Running",
        "reason": "Running",
        "pending_cause": "",
        "attempt": 0,
    }
    failed = by_name["digits-00006"]  # FAIL as it was added: its columns were read before
    assert failed.state.name == "FAIL" and (failed.user_attrs["phase"], failed.user_attrs["attempt"]) == ("Failed", 2)
    # the failed trial's pod first (its phase is new to the notes), then the running ones in index order, 3 a refresh
    assert cluster.log_reads() == ["digits-00006-2", "digits-00000-0", "digits-00001-0"]
    note = get_note(optuna.Trial(study, by_name["digits-00000"]._trial_id))
    assert "Last 50 lines of the log of pod `digits-00000-0`" in note
    assert "digits-00000-0 step 79\n" in note and "step 30\n" in note and "step 29\n" not in note
    assert get_note(optuna.Trial(study, by_name["digits-00005"]._trial_id)) == ""  # nothing beyond its columns yet

    assert studies.refresh() is False and cluster.reads == [], "read again before interval_s"
    clock.now += 5
    studies.refresh()
    assert cluster.log_reads() == ["digits-00002-0", "digits-00003-0", "digits-00004-0"]
    clock.now += 5
    studies.refresh()  # the failed trial's log was read once; the running ones again, the longest unread first
    assert cluster.log_reads() == ["digits-00005-0", "digits-00000-0", "digits-00001-0"]

    # the trial ends and its pod goes: its note keeps the log as last read and says so
    trials[0] = trial(0, "Succeeded", reason="Completed")
    del cluster.logs["digits-00000-0"]
    clock.now += 5
    studies.refresh()
    assert cluster.log_reads()[0] == "digits-00000-0"
    note = get_note(optuna.Trial(study, by_name["digits-00000"]._trial_id))
    assert note.startswith("Trial `digits-00000`: **Succeeded** · reason `Completed`")
    assert "Pod `digits-00000-0` is gone" in note and "step 79" in note
    assert study.get_trials()[0].user_attrs["phase"] == "Succeeded"
    clock.now += 5
    studies.refresh()
    assert "digits-00000-0" not in cluster.log_reads(), "an ended pod's log is read once"


def test_at_most_max_trial_notes_trials_of_a_study_get_a_note(root):  # noqa: F811 - fixture
    """Optuna Dashboard reads all of a study's notes for each noted trial it serves: two noted trials at most here,
    the failed one (its message) and the first whose log was read; the others' logs are not read, and the study's
    note says how many trials have none."""
    cluster, clock = FakeCluster(), Clock()
    trials = [trial(i, "Running", reason="Running") for i in range(6)]
    trials.append(trial(6, "Failed", reason="Error", message="ValueError: the loss diverged", attempt=2))
    cluster.trials[NAMESPACE] = trials
    cluster.logs = {t["status"]["podName"]: log_of(t["status"]["podName"]) for t in trials}
    _, studies = listed_with_notes(root, cluster, clock, max_logs=2, max_trial_notes=2)
    studies.refresh()
    study = studies.studies()[f"{NAMESPACE}/{EXPERIMENT}"]
    noted = [t.user_attrs["kubetune_trial"] for t in study.get_trials() if get_note(optuna.Trial(study, t._trial_id))]
    assert noted == ["digits-00000", "digits-00006"]
    assert cluster.log_reads() == ["digits-00006-2", "digits-00000-0"]
    assert "Trials left without a note" not in get_note(study)
    clock.now += 5
    studies.refresh()
    assert cluster.log_reads() == ["digits-00000-0"], "only the noted trials' logs"

    trials[3] = trial(3, "Running", reason="Running", message="storage unreachable: retrying")
    clock.now += 5
    studies.refresh()
    assert "*Trials left without a note of their own: 1. At most 2 trials of a study get one" in get_note(study)
    assert len([t for t in study.get_trials() if get_note(optuna.Trial(study, t._trial_id))]) == 2


def test_a_read_the_cluster_refuses_is_said_in_the_note_and_the_rest_shows(root):  # noqa: F811 - fixture
    cluster, clock = FakeCluster(), Clock()
    cluster.trials[NAMESPACE] = [trial(0, "Running", reason="Running")]
    cluster.events[NAMESPACE] = refused(403, 'events is forbidden: User "viewer" cannot list resource "events"')
    cluster.logs["digits-00000-0"] = refused(403, 'pods "digits-00000-0" is forbidden: cannot get pods/log')
    _, studies = listed_with_notes(root, cluster, clock)
    studies.refresh()
    study = studies.studies()[f"{NAMESPACE}/{EXPERIMENT}"]
    note = get_note(study)
    assert "### Conditions" in note and "| Ready | True | SpecValid |" in note
    assert 'The Events cannot be read: 403 Forbidden: events is forbidden: User "viewer" cannot' in note
    trial_note_ = get_note(optuna.Trial(study, study.get_trials()[0]._trial_id))
    assert "The log of pod `digits-00000-0` cannot be read" in trial_note_ and "cannot get pods/log" in trial_note_
    assert "secret-token" not in note + trial_note_

    cluster.trials[NAMESPACE] = refused(403, "trials.kubetune.io is forbidden")
    clock.now += 5
    studies.refresh()
    assert "The Trials cannot be read: 403 Forbidden: trials.kubetune.io is forbidden." in get_note(study)


# --- one experiment ------------------------------------------------------------------------------------------------


def test_one_experiments_dashboard_reads_the_experiment_and_says_when_it_cannot(root, tmp_path):  # noqa: F811
    cluster, clock = FakeCluster(), Clock()
    cluster.trials[NAMESPACE] = [trial(i, "Running", reason="Running") for i in range(len(TRIALS))]
    cluster.logs["digits-00000-0"] = log_of("digits-00000-0")
    experiment = digits(root)
    experiment["status"]["conditions"] = CONDITIONS
    answers: list = [experiment]

    def get():
        answer = answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    path = f"{root}/{NAMESPACE}/{EXPERIMENT}/{UID}"
    analysis = ExperimentAnalysis(path, METRIC, "max", param_space=SPACE)
    served = Dashboard(analysis, settle_s=3600, notes=ClusterNotes(cluster, clock=clock), experiment=get)
    try:
        assert served._refresh_all() is True
        study = served.live.study
        assert "| TrialsWaiting | True | Unschedulable |" in get_note(study)
        assert study.get_trials()[0].user_attrs["phase"] == "Running"
        assert "digits-00000-0 step 79" in get_note(optuna.Trial(study, study.get_trials()[0]._trial_id))

        answers[0] = TimeoutError("read timed out")
        clock.now += 5
        served._refresh_all()
        note = get_note(study)
        assert "*The Experiment cannot be read now (TimeoutError: read timed out); as last read:*" in note
        assert "| TrialsWaiting | True | Unschedulable |" in note  # as last read

        # a trial written to storage while its Trial runs: its columns as it is added
        write_trial(path, "digits-00009", [{METRIC: 0.3}, {METRIC: 0.9}, {METRIC: 0.5}], workdir=tmp_path / "new")
        cluster.trials[NAMESPACE].append(trial(9, "Running", reason="Running", attempt=1))
        answers[0] = experiment
        clock.now += 5
        served._refresh_all()
        added = study.get_trials()[-1]
        assert added.user_attrs["kubetune_trial"] == "digits-00009" and added.user_attrs["attempt"] == 1
        assert (added.user_attrs[METRIC], added.user_attrs[f"best_{METRIC}"]) == (0.5, 0.9)  # last and best
    finally:
        served.close()


def test_notes_go_with_the_experiment_that_they_read(root):  # noqa: F811 - fixture
    analysis = ExperimentAnalysis(f"{root}/{NAMESPACE}/{EXPERIMENT}/{UID}", METRIC, "max")
    with pytest.raises(ValueError, match="notes and experiment go together"):
        Dashboard(analysis, notes=ClusterNotes(FakeCluster()))


# --- the cluster's reads, over HTTP --------------------------------------------------------------------------------


def test_the_log_read_is_the_trial_containers():
    from kubetune.sdk import client
    from kubetune_operator.labels import TRIAL_CONTAINER

    assert client.TRIAL_CONTAINER == TRIAL_CONTAINER  # the SDK may not import the operator: one spelling, checked


def test_the_cluster_lists_trials_and_kubetunes_events_of_a_namespace(api):  # noqa: F811 - fixture
    api.routes["/apis/kubetune.io/v1alpha1/namespaces/team/trials"] = {"items": [trial(0)]}
    api.routes["/api/v1/namespaces/team/events"] = {"items": [event("Trial", "digits-00000", "X", "y", "z")]}
    cluster = Cluster.connect()
    assert [t["metadata"]["name"] for t in cluster.list_trials("team")] == ["digits-00000"]
    assert cluster.list_events("team")[0]["involvedObject"]["kind"] == "Trial"
    api.routes["/api/v1/namespaces/team/events"] = 403
    with pytest.raises(ApiException) as exc:
        cluster.list_events("team")
    assert read_error(exc.value) == "403 Forbidden: status 403"


def test_the_command_for_one_experiment_in_the_cluster_shows_its_notes(api, root):  # noqa: F811 - fixtures
    """``kubetune dashboard NAME`` as a process against the API server: the study's note has the Experiment's
    conditions and Events, a trial its Trial's columns, and its note says why its log cannot be read (403)."""
    base = "/apis/kubetune.io/v1alpha1/namespaces/team"
    experiment = digits(root)
    experiment["status"]["conditions"] = CONDITIONS
    api.routes[DISCOVERY] = SERVED
    api.routes[f"{base}/experiments/{EXPERIMENT}"] = experiment
    api.routes[f"{base}/trials"] = {"items": [trial(i, "Running", reason="Running") for i in range(len(TRIALS))]}
    api.routes["/api/v1/namespaces/team/events"] = {
        "items": [event("Experiment", EXPERIMENT, "TrialsCreated", "created 8 trials", "2026-01-02T03:00:00Z")]
    }
    api.routes["/api/v1/namespaces/team/pods/digits-00000-0/log"] = 403
    command = [sys.executable, "-m", "kubetune.sdk.cli", "dashboard", EXPERIMENT, "--no-browser", "--port", "0"]
    proc = subprocess.Popen([*command, "--refresh", "0.2"], stderr=subprocess.PIPE, text=True, env=os.environ)
    try:
        line = proc.stderr.readline()
        assert "Optuna Dashboard of 8 trials" in line, line + proc.stderr.read()
        study_url = line.split(": ")[-1].split()[0].replace("/dashboard", "/api")
        deadline, detail = time.monotonic() + 30, {}
        while time.monotonic() < deadline:
            with urllib.request.urlopen(study_url, timeout=10) as response:
                detail = json.loads(response.read())
            if "cannot be read" in detail["trials"][0]["note"]["body"]:
                break
            time.sleep(0.2)
        note = detail["note"]["body"]
        assert "| TrialsWaiting | True | Unschedulable |" in note and "| experiment/digits | created 8 trials |" in note
        attrs = {a["key"]: a["value"] for a in detail["trials"][0]["user_attrs"]}
        assert (attrs["phase"], attrs["reason"], attrs["attempt"]) == (
            "Running",
            "Running",
            "0",
        )  # the API serves attributes as text
        assert "The log of pod `digits-00000-0` cannot be read" in detail["trials"][0]["note"]["body"]
        assert "/pods/digits-00000-0/log" in " ".join(api.requests)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"Ctrl-C did not end the dashboard: {proc.communicate()[1][-3000:]}") from None
    assert proc.returncode == 0 and "Traceback" not in err, err
