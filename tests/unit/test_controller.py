"""The per-Experiment controller's lifecycle decisions, without a cluster:
trial creation under concurrency limits, pod outcomes, retries, suspend,
goal, collector decisions and the Experiment's status."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

import pytest

from devcluster.testkit import experiment_object
from kubetune.env import OUTCOME_COMPLETED, OUTCOME_PAUSED, OUTCOME_STOPPED, OUTCOME_TERMINATED
from kubetune_operator.controller import ExperimentController
from kubetune_operator.labels import pod_name
from kubetune_operator.podview import PodView, pod_view
from kubetune_operator.settings import Settings
from kubetune_operator.spec_intake import InvalidSpec
from kubetune_operator.tokens import verify_token

KEY = b"k" * 32
T0 = 1_800_000_000.0


def experiment(**spec):
    base = {
        "trainable": {"entrypoint": "m:T"},
        "image": "img",
        "config": {"lr": {"grid_search": [1, 2, 3, 4]}},
        "numSamples": 1,
        "metric": "acc",
        "mode": "max",
        "maxConcurrentTrials": 2,
        "storage": {"uri": "s3://bucket/prefix"},
        "failure": {"maxFailures": 1},
    }
    base.update(spec)
    return experiment_object(**base)


def adopt_created(ctl, plan):
    for m in plan.create_trials:
        ctl.trial_created(m["metadata"]["name"], "uid-" + m["metadata"]["name"])


def pod(name, phase, outcome=None, exit_code=None, message=None, deleting=False):
    trial, attempt = name.rsplit("-", 1)
    if outcome is not None:
        message = json.dumps({"outcome": outcome, "iteration": 3})
    return PodView(name, trial, int(attempt), phase, deleting=deleting, exit_code=exit_code, message=message)


@pytest.fixture
def ctl():
    return ExperimentController(experiment(), Settings(), KEY)


def test_creates_trials_up_to_max_concurrent_then_their_pods(ctl):
    plan = ctl.plan({}, T0)
    assert [m["metadata"]["name"] for m in plan.create_trials] == ["exp-00000", "exp-00001"]
    assert [m["spec"]["config"] for m in plan.create_trials] == [{"lr": 1}, {"lr": 2}]
    assert plan.create_pods == []  # pods wait for the Trial's uid (their owner)
    adopt_created(ctl, plan)
    plan = ctl.plan({}, T0 + 1)
    assert sorted(p["metadata"]["name"] for p in plan.create_pods) == ["exp-00000-0", "exp-00001-0"]
    assert plan.create_trials == []
    token = plan.token_secrets["exp-00000-0"]["stringData"]["token"]  # created before the pod, which reads it
    assert verify_token(KEY, token, "ns", "exp-00000", 0, "uid-exp-00000")
    assert sorted(plan.token_secrets) == ["exp-00000-0", "exp-00001-0"]
    # asking again soon does not re-create what the index has not shown yet
    assert ctl.plan({}, T0 + 2).create_pods == []


def test_pod_outcomes_move_trials_through_their_phases(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    plan = ctl.plan({"exp-00000-0": pod("exp-00000-0", "Running")}, T0 + 2)
    assert plan.trial_status["exp-00000"]["phase"] == "Running"
    plan = ctl.plan({"exp-00000-0": pod("exp-00000-0", "Succeeded", OUTCOME_COMPLETED)}, T0 + 3)
    assert ctl.trials["exp-00000"].status["phase"] == "Succeeded"
    assert ctl.trials["exp-00000"].status["reason"] == "Completed"
    # a slot freed: the third trial is created
    assert [m["metadata"]["name"] for m in plan.create_trials] == ["exp-00002"]


def test_collector_stop_gives_early_stopped_and_pause_gives_paused(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    ctl.plan(
        {
            "exp-00000-0": pod("exp-00000-0", "Succeeded", OUTCOME_STOPPED),
            "exp-00001-0": pod("exp-00001-0", "Succeeded", OUTCOME_PAUSED),
        },
        T0 + 2,
    )
    assert ctl.trials["exp-00000"].status["reason"] == "EarlyStopped"
    assert ctl.trials["exp-00001"].status["phase"] == "Paused"


def test_failed_attempt_retries_then_fails_the_trial(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    plan = ctl.plan({"exp-00000-0": pod("exp-00000-0", "Failed", exit_code=1, message="Traceback: boom")}, T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert (trial.phase, trial.attempt, trial.status["failures"]) == ("Pending", 1, 1)
    assert "exp-00000-1" in [p["metadata"]["name"] for p in plan.create_pods]
    assert any(e[2] == "TrialRetried" for e in plan.events)
    ctl.plan({"exp-00000-1": pod("exp-00000-1", "Failed", exit_code=1, message="Traceback: boom again")}, T0 + 3)
    assert trial.phase == "Failed" and trial.status["message"] == "Traceback: boom again"


def test_an_oom_killed_attempt_says_it_went_over_its_memory_limit(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    oom = PodView("exp-00000-0", "exp-00000", 0, "Failed", reason="OOMKilled", exit_code=137)
    ctl.plan({"exp-00000-0": oom}, T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert trial.status["failures"] == 1 and trial.status["reason"] == "Retrying"
    assert "over its memory limit" in trial.status["message"] and "resourcesPerTrial.memory" in trial.status["message"]


def test_running_pod_that_vanishes_is_retried_without_counting_a_failure(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    ctl.plan({"exp-00000-0": pod("exp-00000-0", "Running")}, T0 + 2)
    plan = ctl.plan({}, T0 + 3)
    trial = ctl.trials["exp-00000"]
    assert trial.attempt == 1 and trial.status["reason"] == "PodDeleted" and not trial.status.get("failures")
    assert "exp-00000-1" in [p["metadata"]["name"] for p in plan.create_pods]
    assert [e[2] for e in plan.events if e[0] == "exp-00000"] == ["TrialDisrupted"]


def test_sigterm_not_asked_for_is_retried_from_the_checkpoint(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    ctl.plan({"exp-00000-0": pod("exp-00000-0", "Succeeded", OUTCOME_TERMINATED)}, T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert trial.attempt == 1 and trial.status["reason"] == "Terminated" and not trial.status.get("failures")


@pytest.mark.parametrize(
    "condition, status_reason, reason",
    [
        (
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
            None,
            "EvictionByEvictionAPI",
        ),
        (
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
            None,
            "PreemptionByScheduler",
        ),
        (None, "Evicted", "Evicted"),
    ],
)
def test_disruptions_are_retried_even_with_no_retries_left(condition, status_reason, reason):
    ctl = ExperimentController(experiment(failure={"maxFailures": 0}), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    body = {
        "metadata": {"name": "exp-00000-0", "labels": {"kubetune.io/trial": "exp-00000", "kubetune.io/attempt": "0"}},
        "status": {
            "phase": "Failed",
            "reason": status_reason,
            "conditions": [condition] if condition else [],
            "containerStatuses": [{"name": "trial", "state": {"terminated": {"exitCode": 137}}}],
        },
    }
    plan = ctl.plan({"exp-00000-0": pod_view(body)}, T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert trial.phase == "Pending" and trial.attempt == 1 and trial.status["reason"] == reason
    assert not trial.status.get("failures")
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["exp-00000-1"]  # one truth: a new attempt


@pytest.mark.parametrize("ran", [True, False])
def test_a_pod_the_kubelet_refused_on_readmission_is_a_disruption_one_refused_before_it_ran_a_failure(ran):
    """After a kubelet restart, a running pod whose device plugin has not registered again is refused
    (UnexpectedAdmissionError, "no healthy devices"): retried, not counted. A pod refused at its first admission never
    ran: a failure, so that a node that keeps refusing does not loop."""
    ctl = ExperimentController(experiment(failure={"maxFailures": 0}), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    terminated = {"exitCode": 137, "reason": "Error"} | ({"startedAt": "2026-11-28T05:00:00Z"} if ran else {})
    body = {
        "metadata": {"name": "exp-00000-0", "labels": {"kubetune.io/trial": "exp-00000", "kubetune.io/attempt": "0"}},
        "status": {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate "
            "unhealthy devices nvidia.com/gpu, which is unexpected",
            "containerStatuses": [{"name": "trial", "state": {"terminated": terminated}}],
        },
    }
    ctl.plan({"exp-00000-0": pod_view(body)}, T0 + 2)
    trial = ctl.trials["exp-00000"]
    if ran:
        assert (trial.phase, trial.attempt, trial.status["reason"]) == ("Pending", 1, "UnexpectedAdmissionError")
        assert not trial.status.get("failures")
    else:
        assert (trial.phase, trial.status["reason"]) == ("Failed", "UnexpectedAdmissionError")
        assert "no healthy devices" in trial.status["message"]


@pytest.mark.parametrize("phase, outcome", [("Running", None), ("Succeeded", OUTCOME_TERMINATED)])
def test_an_evicted_pod_seen_only_once_deleted_is_retried_with_the_eviction_as_its_reason(ctl, phase, outcome):
    # the kubelet deletes an evicted pod as soon as it ended: the pass often sees only its last state
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    ctl.plan({"exp-00000-0": pod("exp-00000-0", "Running")}, T0 + 2)
    last = dataclasses.replace(
        pod("exp-00000-0", phase, outcome), gone=True, deleting=True, disruption="EvictionByEvictionAPI"
    )
    plan = ctl.plan({"exp-00000-0": last}, T0 + 3)
    trial = ctl.trials["exp-00000"]
    assert (trial.phase, trial.attempt, trial.status["reason"]) == ("Pending", 1, "EvictionByEvictionAPI")
    assert not trial.status.get("failures")
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["exp-00000-1"]
    (event,) = [e for e in plan.events if e[0] == "exp-00000"]
    assert event[2] == "TrialDisrupted" and "ended by EvictionByEvictionAPI" in event[3]
    assert plan.collect_secrets == [(f"exp-00000-0-{trial.uid[:8]}", "exp-00000")] and not plan.collect_pods
    plan = ctl.plan({"exp-00000-0": last}, T0 + 4)  # still in the cache: an earlier attempt's, nothing more
    assert trial.attempt == 1 and not [e for e in plan.events if e[0] == "exp-00000"]


def test_a_suspended_trial_whose_last_pod_is_still_seen_resumes():
    ctl = ExperimentController(experiment(), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    ctl.plan({"exp-00000-0": pod("exp-00000-0", "Running")}, T0 + 2)
    ctl.update(experiment(suspend=True))
    last = {"exp-00000-0": dataclasses.replace(pod("exp-00000-0", "Succeeded", OUTCOME_TERMINATED), gone=True)}
    ctl.plan(last, T0 + 3)
    trial = ctl.trials["exp-00000"]
    assert (trial.phase, trial.status["reason"]) == ("Paused", "Suspended")
    ctl.update(experiment(suspend=False))
    plan = ctl.plan(last, T0 + 4)  # the ended pod is not read a second time, as a SIGTERM not asked for
    assert (trial.phase, trial.attempt, trial.status["reason"]) == ("Pending", 1, "Resumed")
    assert [e[2] for e in plan.events if e[0] == "exp-00000"] == ["TrialResumed"]
    assert "exp-00000-1" in [p["metadata"]["name"] for p in plan.create_pods]


def test_max_failures_minus_one_retries_without_limit():
    ctl = ExperimentController(experiment(failure={"maxFailures": -1}), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    for attempt in range(5):
        ctl.plan({}, T0 + 10 * attempt + 1)
        ctl.plan(
            {f"exp-00000-{attempt}": pod(f"exp-00000-{attempt}", "Failed", exit_code=1, message="boom")},
            T0 + 10 * attempt + 2,
        )
    trial = ctl.trials["exp-00000"]
    assert trial.phase == "Pending" and trial.attempt == 5 and trial.status["failures"] == 5


def test_suspend_stops_pods_and_resume_restarts_from_checkpoint():
    ctl = ExperimentController(experiment(), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    running = {n: pod(n, "Running") for n in ("exp-00000-0", "exp-00001-0")}
    ctl.plan(running, T0 + 2)
    ctl.update(experiment(suspend=True))
    plan = ctl.plan(running, T0 + 3)
    assert sorted(name for name, _ in plan.delete_pods) == ["exp-00000-0", "exp-00001-0"]
    assert plan.create_trials == []
    ended = {n: pod(n, "Succeeded", OUTCOME_TERMINATED) for n in running}
    plan = ctl.plan(ended, T0 + 4)
    assert {t.phase for t in ctl.trials.values()} == {"Paused"}
    assert ctl.exp_status["phase"] == "Suspended"
    ctl.update(experiment(suspend=False))
    plan = ctl.plan(ended, T0 + 5)
    assert sorted(p["metadata"]["name"] for p in plan.create_pods) == ["exp-00000-1", "exp-00001-1"]
    assert all(t.status["failures"] if "failures" in t.status else 0 == 0 for t in ctl.trials.values())


def test_results_update_status_and_decide(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.5, "training_iteration": 1}], None) == "continue"
    assert ctl.record_results("exp-00000", 1, [{"acc": 0.5}], None) is None  # stale attempt
    assert (
        ctl.record_results(
            "exp-00000", 0, [{"acc": 0.6, "training_iteration": 2, "done": True}], {"uri": "s3://b/c", "iteration": 2}
        )
        == "stop"
    )
    status = ctl.trials["exp-00000"].status
    assert status["metricValue"] == 0.6 and status["iteration"] == 2
    assert status["checkpoint"] == {"uri": "s3://b/c", "iteration": 2}


def test_stop_criteria_from_the_spec_stop_a_trial():
    ctl = ExperimentController(experiment(stop={"training_iteration": 3}), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.1, "training_iteration": 2}], None) == "continue"
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.1, "training_iteration": 3}], None) == "stop"


def test_a_result_that_ends_the_trial_is_never_a_result_the_scheduler_decides_on():
    """Ray's controller: a result meeting the stop criteria (or done) stops the trial without
    scheduler.on_trial_result, so PBT cannot take a trial that has stopped as a donor."""
    spec = experiment(
        stop={"training_iteration": 4},
        maxConcurrentTrials=4,
        scheduler={
            "name": "pbt",
            "params": {
                "time_attr": "training_iteration",
                "perturbation_interval": 2,
                "hyperparam_mutations": {"lr": [1, 2, 3, 4]},
            },
        },
    )
    ctl = ExperimentController(spec, Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    trials = [f"exp-0000{i}" for i in range(4)]
    for trial, acc in reversed(list(zip(trials, (0.9, 0.5, 0.4, 0.1)))):  # the first last: top of 4 at iteration 2
        ctl.record_results(trial, 0, [{"acc": acc, "training_iteration": i} for i in (1, 2)], None)
    seen = []
    decide = ctl.decisions.scheduler.on_trial_result
    ctl.decisions.scheduler.on_trial_result = lambda trial, result: (
        seen.append((trial, result["training_iteration"])) or decide(trial, result)
    )
    assert ctl.record_results(trials[0], 0, [{"acc": 0.95, "training_iteration": i} for i in (3, 4)], None) == "stop"
    assert ctl.record_results(trials[1], 0, [{"acc": 0.5, "training_iteration": 3, "done": True}], None) == "stop"
    assert seen == [(trials[0], 3)]  # not iteration 4 of the first, nor the done result of the second
    # its checkpoint iteration as a donor: 2, not 4
    assert ctl.decisions.scheduler.get_state()["trials"][trials[0]][3] == 2


def test_goal_reached_stops_the_rest_and_succeeds_the_experiment():
    ctl = ExperimentController(experiment(goal=0.9), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    running = {n: pod(n, "Running") for n in ("exp-00000-0", "exp-00001-0")}
    ctl.plan(running, T0 + 2)
    ctl.record_results("exp-00001", 0, [{"acc": 0.95, "training_iteration": 1}], None)
    plan = ctl.plan(running, T0 + 4)
    assert sorted(n for n, _ in plan.delete_pods) == ["exp-00000-0", "exp-00001-0"]
    assert plan.create_trials == []
    ended = {n: pod(n, "Succeeded", OUTCOME_TERMINATED) for n in running}
    ctl.plan(ended, T0 + 5)
    assert {t.status["reason"] for t in ctl.trials.values()} == {"GoalReached"}
    assert ctl.exp_status["phase"] == "Succeeded"
    assert ctl.exp_status["bestTrial"]["name"] == "exp-00001"


def test_experiment_succeeds_when_all_trials_finish_with_best_trial():
    ctl = ExperimentController(experiment(maxConcurrentTrials=4), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    for i, name in enumerate(sorted(ctl.trials)):
        ctl.record_results(name, 0, [{"acc": i / 10, "training_iteration": 5}], {"uri": f"s3://b/{i}", "iteration": 5})
    ended = {pod_name(n, 0): pod(pod_name(n, 0), "Succeeded", OUTCOME_COMPLETED) for n in ctl.trials}
    plan = ctl.plan(ended, T0 + 3)
    assert plan.experiment_status["phase"] == "Succeeded"
    best = ctl.exp_status["bestTrial"]
    assert best == {
        "name": "exp-00003",
        "metricValue": 0.3,
        "iteration": 5,
        "checkpoint": "s3://b/3",
        "config": {"lr": 4},
    }
    assert ctl.exp_status["trials"] == {
        "total": 4,
        "pending": 0,
        "running": 0,
        "paused": 0,
        "succeeded": 4,
        "failed": 0,
    }
    assert ctl.finished


def test_max_failed_trials_fails_the_experiment():
    ctl = ExperimentController(experiment(failure={"maxFailures": 0, "maxFailedTrials": 0}), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    running = {"exp-00001-0": pod("exp-00001-0", "Running")}
    ctl.plan({**running, "exp-00000-0": pod("exp-00000-0", "Failed", exit_code=2, message="bad")}, T0 + 2)
    assert ctl.trials["exp-00000"].phase == "Failed"
    plan = ctl.plan(running, T0 + 3)
    assert plan.delete_pods == [("exp-00001-0", Settings().trials.termination_grace_period_s)]
    ctl.plan({"exp-00001-0": pod("exp-00001-0", "Failed", exit_code=143, deleting=True)}, T0 + 4)
    assert ctl.exp_status["phase"] == "Failed"
    assert any(c["reason"] == "MaxFailedTrialsExceeded" for c in ctl.exp_status["conditions"])


def test_spec_changes_to_concurrency_and_samples_take_effect(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.update(experiment(maxConcurrentTrials=4, numSamples=2))
    plan = ctl.plan({}, T0 + 1)
    assert [m["metadata"]["name"] for m in plan.create_trials] == ["exp-00002", "exp-00003"]
    assert ctl.decisions.searcher.total == 8


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"config": {"lr": {"loguniform": [0, 1]}}}, "loguniform"),
        ({"config": {"lr": {"gaussian": [0, 1]}}}, r"config\.lr: 'gaussian' is not a domain .*domains are: choice"),
        ({"searchAlgorithm": {"name": "nope"}}, "nope"),
        ({"scheduler": {"name": "asha", "params": {"bogus": 1}}}, "bogus"),
        ({"storage": {}}, "storage.uri"),
        ({"timeBudget": "soon"}, "duration"),
    ],
)
def test_invalid_specs_raise_with_a_clear_message(spec, words):
    with pytest.raises(InvalidSpec, match=words):
        ExperimentController(experiment(**spec), Settings(), KEY)


def test_time_budget_stops_running_trials_and_ends_the_experiment():
    ctl = ExperimentController(experiment(timeBudget="30s"), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    running = {n: pod(n, "Running") for n in ("exp-00000-0", "exp-00001-0")}
    assert ctl.plan(running, T0 + 29).delete_pods == []
    plan = ctl.plan(running, T0 + 31)
    assert sorted(n for n, _ in plan.delete_pods) == ["exp-00000-0", "exp-00001-0"]
    assert ctl.record_results("exp-00000", 0, [{"acc": 0.1, "training_iteration": 9}], None) == "stop"
    ctl.plan({n: pod(n, "Succeeded", OUTCOME_TERMINATED) for n in running}, T0 + 32)
    assert {t.status["reason"] for t in ctl.trials.values()} == {"TimeBudgetExhausted"}
    assert ctl.exp_status["phase"] == "Succeeded"


def test_failed_status_writes_are_written_whole_on_the_next_pass(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    plan = ctl.plan({}, T0 + 1)
    assert plan.trial_status["exp-00000"]["podName"] == "exp-00000-0"
    ctl.status_write_failed("exp-00000")
    ctl.status_write_failed(None)
    plan = ctl.plan({}, T0 + 1.1)
    assert plan.trial_status["exp-00000"] == {"phase": "Pending", "attempt": 0, "podName": "exp-00000-0"}
    assert plan.experiment_status["phase"] == "Pending" and "conditions" in plan.experiment_status
    assert ctl.plan({}, T0 + 1.2).trial_status == {}


def test_every_created_trial_is_announced_in_an_event(ctl):
    plan = ctl.plan({}, T0)
    adopt_created(ctl, plan)
    announced = [e[3] for e in plan.events if e[2] == "TrialsCreated"]
    ctl.plan({}, T0 + 1)
    for step, name in enumerate(["exp-00000", "exp-00001"]):
        plan = ctl.plan({pod_name(name, 0): pod(pod_name(name, 0), "Succeeded", OUTCOME_COMPLETED)}, T0 + 2 + step)
        adopt_created(ctl, plan)
        announced += [e[3] for e in plan.events if e[2] == "TrialsCreated"]
    assert announced == [
        "created 2 trials: exp-00000 .. exp-00001",
        "created 1 trial: exp-00002",
        "created 1 trial: exp-00003",
    ]
    assert ctl.search_finished


def test_the_experiment_status_holds_no_searcher_state():
    ctl = ExperimentController(
        experiment(
            searchAlgorithm={"name": "optuna", "seed": 1}, config={"lr": {"loguniform": [1e-4, 1e-1]}}, numSamples=3
        ),
        Settings(),
        KEY,
    )
    plan = ctl.plan({}, T0)
    assert "searcherState" not in plan.experiment_status  # it lives in the journal, however large
    assert [entry[0] for entry in ctl.journal.pending] == ["suggest", "add", "suggest", "add"]


def test_a_pod_that_cannot_start_says_why_in_the_trial_and_the_experiment(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    labels = {"kubetune.io/trial": "exp-00000", "kubetune.io/attempt": "0"}
    body = {
        "metadata": {"name": "exp-00000-0", "labels": labels},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    plan = ctl.plan({"exp-00000-0": pod_view(body)}, T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert trial.phase == "Pending" and trial.status["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in trial.status["message"]
    assert [e[2] for e in plan.events if e[0] == "exp-00000"] == ["TrialWaiting"]
    waiting = next(c for c in plan.experiment_status["conditions"] if c["type"] == "TrialsWaiting")
    assert waiting["status"] == "True" and waiting["reason"] == "Unschedulable"
    assert "exp-00000: 0/2 nodes are available" in waiting["message"]
    body["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {
                "name": "trial",
                "state": {
                    "waiting": {"reason": "CreateContainerConfigError", "message": 'secret "s3-credz" not found'}
                },
            }
        ],
    }
    ctl.plan({"exp-00000-0": pod_view(body)}, T0 + 3)
    assert trial.status["reason"] == "CreateContainerConfigError" and "s3-credz" in trial.status["message"]
    body["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    plan = ctl.plan({"exp-00000-0": pod_view(body)}, T0 + 9)
    assert trial.status["reason"] == "Starting"
    waiting = next(c for c in ctl.exp_status["conditions"] if c["type"] == "TrialsWaiting")
    assert waiting["status"] == "False"


def test_a_pod_held_by_a_scheduling_gate_is_waiting_for_admission_until_it_is_lifted(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    labels = {"kubetune.io/trial": "exp-00000", "kubetune.io/attempt": "0"}
    body = {
        "metadata": {"name": "exp-00000-0", "labels": labels},
        "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        },
    }
    plan = ctl.plan({"exp-00000-0": pod_view(body)}, T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert trial.phase == "Pending" and trial.status["reason"] == "SchedulingGated"
    assert trial.status["message"] == "waiting for admission: held by scheduling gates kueue.x-k8s.io/admission"
    waiting = next(c for c in plan.experiment_status["conditions"] if c["type"] == "TrialsWaiting")
    assert waiting["status"] == "True" and waiting["reason"] == "SchedulingGated"
    body["spec"] = {}  # the admission controller lifted its gate
    body["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    ctl.plan({"exp-00000-0": pod_view(body)}, T0 + 9)
    assert trial.status["reason"] == "Starting"
    waiting = next(c for c in ctl.exp_status["conditions"] if c["type"] == "TrialsWaiting")
    assert waiting["status"] == "False"


def test_a_pod_the_api_server_refuses_makes_the_experiment_not_ready(ctl):
    ctl.pod_rejected('the API server refused trial pod exp-00000-0: Pod "exp-00000-0" is invalid: spec.tolerations')
    plan = ctl.plan({}, T0)
    ready = next(c for c in plan.experiment_status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec" and "tolerations" in ready["message"]
    ctl.pod_accepted()  # the cause went away (a relaxed admission policy): the next pod was created
    ready = next(c for c in ctl.health_conditions(None, datetime.now(timezone.utc)) if c["type"] == "Ready")
    assert ready["status"] == "True"
    ctl.health.invalid = "spec.config: bad"  # a refused spec edit is not cleared by a pod of the spec still in force
    ctl.pod_accepted()
    ready = next(c for c in ctl.health_conditions(None, datetime.now(timezone.utc)) if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["message"] == "spec.config: bad"


def test_an_edit_of_scheduler_params_is_refused_and_the_old_ones_stay():
    sched = {"name": "asha", "params": {"grace_period": 1, "max_t": 9}}
    ctl = ExperimentController(experiment(scheduler=sched), Settings(), KEY)
    edited = experiment(scheduler={"name": "asha", "params": {"grace_period": 3, "max_t": 9}})
    with pytest.raises(InvalidSpec, match="scheduler.params cannot change"):
        ctl.update(edited)
    assert ctl.decisions.scheduler.grace_period == 1
    ctl.update(experiment(scheduler=sched, maxConcurrentTrials=3))  # other edits apply
    assert ctl.admission.limit() == 3


def test_a_restarted_operator_takes_the_newest_attempt_its_pods_show():
    ctl = ExperimentController(experiment(), Settings(), KEY)
    trial = {
        "metadata": {"name": "exp-00000", "uid": "uid-exp-00000"},
        "spec": {"index": 0, "config": {"lr": 1}},
        "status": {"phase": "Pending", "attempt": 1},
    }  # attempt 2's status write was lost
    ctl.observe_trial(trial)
    ctl.restore([])
    plan = ctl.plan({"exp-00000-2": pod("exp-00000-2", "Running")}, T0)
    assert ctl.trials["exp-00000"].attempt == 2 and ctl.trials["exp-00000"].phase == "Running"
    assert ctl.record_results("exp-00000", 2, [{"training_iteration": 1, "acc": 0.5}], None) == "continue"
    assert plan.create_pods == []


def test_a_pod_of_an_earlier_trial_of_the_same_name_is_not_adopted(ctl):
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    old = pod("exp-00000-0", "Succeeded", OUTCOME_COMPLETED)
    old.owner_uid = "uid-of-a-deleted-trial"  # still being garbage-collected
    ctl.plan({"exp-00000-0": old}, T0 + 2)
    assert ctl.trials["exp-00000"].phase == "Pending"  # not completed by someone else's pod
    mine = pod("exp-00000-0", "Running")
    mine.owner_uid = "uid-exp-00000"
    ctl.plan({"exp-00000-0": mine}, T0 + 3)
    assert ctl.trials["exp-00000"].phase == "Running"


def _run_two_trials_to_their_end(ctl):
    """exp-00000: attempt 0 fails, attempt 1 completes; exp-00001: attempt 0 pauses. Returns the pods."""
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    pods = {
        "exp-00000-0": pod("exp-00000-0", "Failed", exit_code=1, message="boom"),
        "exp-00001-0": pod("exp-00001-0", "Succeeded", OUTCOME_PAUSED),
    }
    first = ctl.plan(pods, T0 + 2)
    pods["exp-00000-1"] = pod("exp-00000-1", "Running")
    ctl.plan(pods, T0 + 3)
    pods["exp-00000-1"] = pod("exp-00000-1", "Succeeded", OUTCOME_COMPLETED)
    return first, ctl.plan(pods, T0 + 4), pods


def test_ended_pods_are_deleted_once_recorded_keeping_failed_ones_by_default(ctl):
    first, last, pods = _run_two_trials_to_their_end(ctl)
    # every ended attempt's token Secret goes, once, whatever the retention policy
    assert sorted(first.collect_secrets + last.collect_secrets) == [
        ("exp-00000-0-uid-exp-", "exp-00000"),
        ("exp-00000-1-uid-exp-", "exp-00000"),
        ("exp-00001-0-uid-exp-", "exp-00001"),
    ]
    assert ctl.plan(pods, T0 + 4.5).collect_secrets == []
    # the paused pod goes in the pass that records the pause, and only after its status write
    assert first.collect_pods == [("exp-00001-0", "exp-00001")] and "exp-00001" in first.trial_status
    assert ("exp-00000-1", "exp-00000") in last.collect_pods and "exp-00000" in last.trial_status
    assert all(name != "exp-00000-0" for name, _ in first.collect_pods + last.collect_pods)  # failed: kept
    # a running pod, or a pod of an attempt newer than the status knows, is never collected
    pods["exp-00002-0"] = pod("exp-00002-0", "Running")
    pods["exp-00000-7"] = pod("exp-00000-7", "Succeeded", OUTCOME_COMPLETED)
    names = [name for name, _ in ctl.plan(pods, T0 + 5).collect_pods]
    assert "exp-00002-0" not in names and "exp-00000-7" not in names


@pytest.mark.parametrize(
    "policy, collected",
    [
        ({"whenSucceeded": "Retain", "whenFailed": "Retain"}, set()),
        ({"whenSucceeded": "Retain", "whenFailed": "Delete"}, {"exp-00000-0"}),
        ({"whenSucceeded": "Delete", "whenFailed": "Delete"}, {"exp-00000-0", "exp-00000-1", "exp-00001-0"}),
    ],
)
def test_the_pod_retention_policy_chooses_what_is_deleted(policy, collected):
    ctl = ExperimentController(experiment(podRetentionPolicy=policy), Settings(), KEY)
    first, last, pods = _run_two_trials_to_their_end(ctl)
    assert {name for name, _ in first.collect_pods + last.collect_pods} == collected


def test_a_pass_stops_asking_a_slow_searcher_and_the_next_goes_on(monkeypatch):
    import kubetune_operator.trial_admission as trial_admission

    monkeypatch.setattr(trial_admission, "SUGGEST_SECONDS_PER_PASS", 0.0)  # every searcher is "slow"
    ctl = ExperimentController(
        experiment(
            searchAlgorithm={"name": "optuna", "seed": 1},
            config={"lr": {"uniform": [0, 1]}},
            numSamples=3,
            maxConcurrentTrials=3,
        ),
        Settings(),
        KEY,
    )
    names = []
    for step in range(4):
        plan = ctl.plan({}, T0 + step)
        assert len(plan.create_trials) <= 1
        adopt_created(ctl, plan)
        names += [m["metadata"]["name"] for m in plan.create_trials]
    assert names == ["exp-00000", "exp-00001", "exp-00002"]


def test_a_pass_looks_only_at_open_trials_and_counts_and_best_stay_those_of_every_trial():
    """Trials retire once terminal with their status written: a pass then skips them (O(open trials)),
    and the counts and best trial equal a full computation over every trial at each pass, including a
    retired trial whose last status write failed (it opens again) and results that tie."""
    from kubetune_operator import status as st

    ctl = ExperimentController(
        experiment(config={"lr": {"grid_search": list(range(12))}}, maxConcurrentTrials=3, failure={"maxFailures": 0}),
        Settings(),
        KEY,
    )
    pods, now, reopened = {}, T0, False
    while not ctl.finished:
        plan = ctl.plan(pods, now)
        adopt_created(ctl, plan)
        for manifest in plan.create_pods:
            name = manifest["metadata"]["name"]
            trial = name.rsplit("-", 1)[0]
            index = ctl.trials[trial].index
            acc = index % 4 / 4  # ties between trials 0, 4 and 8: the lowest index wins
            ctl.record_results(trial, 0, [{"training_iteration": 1, "acc": acc}], None)
            pods[name] = pod(
                name,
                "Failed" if index == 5 else "Succeeded",
                None if index == 5 else OUTCOME_COMPLETED,
                exit_code=1 if index == 5 else None,
            )
        if not reopened and "exp-00001" in ctl.trials and "exp-00001" not in ctl.book.open:
            ctl.status_write_failed("exp-00001")  # its last status patch failed after it retired
            assert "exp-00001" in ctl.book.open
            reopened = True
        everyone = ctl.trials.values()
        assert ctl.book.counts() == st.trial_counts(t.phase for t in everyone)
        assert ctl.best() == st.best_trial([t.as_object() for t in everyone], "acc", "max")
        assert len(ctl.book.open) <= 3 + len(plan.create_trials) + 1
        now += 1
    assert ctl.book.counts()["succeeded"] == 11 and ctl.book.counts()["failed"] == 1
    assert ctl.best()["name"] == "exp-00003"  # acc 0.75 first reached by index 3
    assert reopened and "exp-00001" not in ctl.book.open  # written on the next pass, then retired again


def test_result_only_status_writes_are_spread_over_passes():
    """At most PERIODIC_STATUS_WRITES_PER_PASS Trials per pass get a status write that only shows a new
    result: 150 running trials are written over two passes, and none is forgotten."""
    from kubetune_operator.status_projection import PERIODIC_STATUS_WRITES_PER_PASS

    ctl = ExperimentController(
        experiment(config={"lr": {"grid_search": list(range(150))}}, maxConcurrentTrials=150), Settings(), KEY
    )
    adopt_created(ctl, ctl.plan({}, T0))
    pods = {m["metadata"]["name"]: pod(m["metadata"]["name"], "Running") for m in ctl.plan({}, T0 + 1).create_pods}
    ctl.plan(pods, T0 + 2)  # Running: phase changes, all written at once
    for name in ctl.trials:
        ctl.record_results(name, 0, [{"training_iteration": 1, "acc": 0.5}], None)
    later = T0 + 2 + Settings().status.write_interval_s
    first = ctl.plan(pods, later).trial_status
    second = ctl.plan(pods, later).trial_status
    assert len(first) == PERIODIC_STATUS_WRITES_PER_PASS == 100
    assert sorted(first) + sorted(second) == sorted(ctl.trials)
    assert all(patch["lastResult"]["acc"] == 0.5 for patch in [*first.values(), *second.values()])


def test_a_multi_objective_experiment_keeps_its_pareto_front_over_retired_trials():
    spec = experiment(
        config={"x": {"uniform": [0, 1]}},
        numSamples=3,
        maxConcurrentTrials=3,
        objectives=[{"metric": "acc", "mode": "max"}, {"metric": "cost", "mode": "min"}],
        searchAlgorithm={"name": "optuna", "seed": 1},
    )
    del spec["spec"]["metric"], spec["spec"]["mode"]
    ctl = ExperimentController(spec, Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({}, T0 + 1)
    ctl.plan({f"exp-{i:05d}-0": pod(f"exp-{i:05d}-0", "Running") for i in range(3)}, T0 + 2)
    results = {"exp-00000": (0.9, 5.0), "exp-00001": (0.5, 1.0), "exp-00002": (0.4, 2.0)}  # 2 is dominated by 1
    for name, (acc, cost) in results.items():
        assert ctl.record_results(name, 0, [{"training_iteration": 1, "acc": acc, "cost": cost}], None) == "continue"
    ended = {f"{n}-0": pod(f"{n}-0", "Succeeded", OUTCOME_COMPLETED) for n in results}
    plan = ctl.plan(ended, T0 + 3)
    ctl.plan(ended, T0 + 4)  # the statuses were written: the trials retire
    assert not ctl.book.open and [t.name for t in ctl.book.retired_front] == ["exp-00000", "exp-00001"]
    ctl.status_write_failed("exp-00001")  # re-opened until its status is written: still one entry
    front = {
        "count": 2,
        "trials": [{"trial": "exp-00000", "values": [0.9, 5.0]}, {"trial": "exp-00001", "values": [0.5, 1.0]}],
    }
    assert ctl.pareto() == front["trials"]
    ctl.plan(ended, T0 + 10)
    assert ctl.exp_status["paretoFront"] == front and "bestTrial" not in ctl.exp_status
    assert plan.trial_status and all("metricValue" not in p for p in plan.trial_status.values())


@pytest.mark.parametrize("prune", [True, False])
def test_a_trial_asha_stops_reaches_optuna_as_pruned_with_prune_early_stopped(prune):
    """The BOHB idea through Optuna: the trial ASHA stops at its first rung is told to the study as pruned at
    that iteration with prune_early_stopped, as complete (Ray's OptunaSearch) without; the one that runs to
    spec.stop is complete either way."""
    from optuna.trial import TrialState

    spec = experiment(
        config={"x": {"uniform": [0, 1]}},
        numSamples=2,
        stop={"training_iteration": 3},
        scheduler={"name": "asha", "params": {"max_t": 9, "grace_period": 1, "reduction_factor": 3}},
        searchAlgorithm={"name": "optuna", "seed": 1, "params": {"prune_early_stopped": prune}},
    )
    ctl = ExperimentController(spec, Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    running = {f"exp-{i:05d}-0": pod(f"exp-{i:05d}-0", "Running") for i in range(2)}
    ctl.plan(running, T0 + 1)
    assert ctl.record_results("exp-00000", 0, [{"training_iteration": 1, "acc": 0.9}], None) == "continue"
    assert ctl.record_results("exp-00001", 0, [{"training_iteration": 1, "acc": 0.1}], None) == "stop"
    ended = {
        "exp-00000-0": pod("exp-00000-0", "Succeeded", OUTCOME_COMPLETED),
        "exp-00001-0": pod("exp-00001-0", "Succeeded", OUTCOME_STOPPED),
    }
    ctl.plan(ended, T0 + 2)
    assert [ctl.trials[n].status["reason"] for n in ("exp-00000", "exp-00001")] == ["Completed", "EarlyStopped"]
    study = {t.number: t for t in ctl.decisions.searcher._study.trials}
    assert study[0].state == TrialState.COMPLETE and study[0].value == 0.9
    assert study[1].state == (TrialState.PRUNED if prune else TrialState.COMPLETE) and study[1].value == 0.1
    assert study[1].intermediate_values == ({1: 0.1} if prune else {})
