"""Gangs (kubetune_operator.gang and the controller's use of it): manifests, the rendezvous, and the
all-or-nothing lifecycle of a trial whose attempts are several pods, decided without a cluster."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from test_controller import KEY, T0, adopt_created, experiment

from kubetune.env import OUTCOME_COMPLETED, read_trial_env
from kubetune_operator.controller import ExperimentController
from kubetune_operator.gang import LABEL_RANK, fold, gang_name, member_name
from kubetune_operator.podview import pod_view
from kubetune_operator.settings import Settings, TrialSettings

WORKERS = {"replicas": 3, "cpu": 2, "gpu": 1, "memory": "1Gi", "scheduleTimeoutSeconds": 60}


def gang_experiment(**spec):
    resources = {"cpu": 1, "gpu": 1, "workers": dict(WORKERS)}
    return experiment(resourcesPerTrial=resources, maxConcurrentTrials=1, **spec)


def controller(podgroups=False, **spec):
    settings = Settings(trials=TrialSettings(gang_scheduling="podgroup" if podgroups else "none"))
    ctl = ExperimentController(gang_experiment(**spec), settings, KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    return ctl


def manifests(plan):
    """Every pod the plan creates, workers first as kube.execute creates them."""
    out = []
    for head in plan.create_pods:
        out += plan.gangs[head["metadata"]["name"]].workers + [head]
    return out


def observed(pods, phases, *, scheduled=None, deleting=(), gone=(), created="2027-01-15T08:00:00Z", **status):
    """Pod views of the manifests ``pods`` as the watch would show them: phase by rank (a list); members
    ``scheduled`` (ranks) were bound to a node at ``created``, as was every Running one by default."""
    out = {}
    for manifest in pods:
        rank = int(manifest["metadata"]["labels"][LABEL_RANK])
        body = copy.deepcopy(manifest)
        body["metadata"]["creationTimestamp"] = created
        if rank in deleting:
            body["metadata"]["deletionTimestamp"] = created
        bound = phases[rank] == "Running" if scheduled is None else rank in scheduled
        body["status"] = {
            "phase": phases[rank],
            "conditions": [
                {"type": "PodScheduled", "status": "True" if bound else "False", "lastTransitionTime": created},
                {"type": "Ready", "status": "True" if phases[rank] == "Running" else "False"},
            ],
            **status.get(f"rank{rank}", {}),
        }
        view = pod_view(body)
        if rank in gone:
            view.gone = True
        out[view.name] = view
    return out


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_a_gang_is_its_head_and_workers_with_a_headless_service_and_the_launchers_variables():
    ctl = controller()
    plan = ctl.plan({}, T0 + 1)
    head = plan.create_pods[0]
    gang = plan.gangs["exp-00000-0"]
    assert [w["metadata"]["name"] for w in gang.workers] == ["exp-00000-0-w1", "exp-00000-0-w2", "exp-00000-0-w3"]
    assert gang.podgroup is None  # the cluster has no gang scheduling: the operator's timeout rule alone
    service = gang.service
    assert service["metadata"]["name"] == gang_name("exp-00000-0") == "g-exp-00000-0"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"kubetune.io/trial": "exp-00000", "kubetune.io/attempt": "0"}
    assert service["metadata"]["ownerReferences"][0]["uid"] == "uid-exp-00000"  # goes with its Trial
    for rank, pod in enumerate([head, *gang.workers]):
        env = env_of(pod)
        assert (env["RANK"], env["NODE_RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == (str(rank), str(rank), "4", "0")
        assert env["MASTER_ADDR"] == "rank-0.g-exp-00000-0.ns.svc" and env["MASTER_PORT"] == "29500"
        assert env["JAX_COORDINATOR_ADDRESS"] == "rank-0.g-exp-00000-0.ns.svc:29501"
        assert (env["JAX_NUM_PROCESSES"], env["JAX_PROCESS_ID"]) == ("4", str(rank))
        assert pod["spec"]["hostname"] == f"rank-{rank}" and pod["spec"]["subdomain"] == "g-exp-00000-0"
        assert pod["metadata"]["labels"][LABEL_RANK] == str(rank)
        # every member reads the attempt's Secret (its config); the runtime knows its rank from the environment
        secret = plan.token_secrets["exp-00000-0"]["metadata"]["name"]
        assert pod["spec"]["volumes"][0]["secret"]["secretName"] == secret
        parsed = read_trial_env(env, config_text="{}")
        assert (parsed.rank, parsed.world_size, len(parsed.hosts)) == (rank, 4, 4)
        assert pod["spec"]["automountServiceAccountToken"] is False  # workers are as locked down as the head
    assert head["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "nvidia.com/gpu": "1"}
    worker = gang.workers[0]["spec"]["containers"][0]["resources"]
    assert worker == {
        "requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"},
    }


def test_with_the_schedulers_gang_scheduling_each_attempt_gets_a_podgroup_its_pods_name():
    plan = controller(podgroups=True).plan({}, T0 + 1)
    gang = plan.gangs["exp-00000-0"]
    assert gang.podgroup["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert gang.podgroup["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    for pod in [plan.create_pods[0], *gang.workers]:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "g-exp-00000-0"}


def test_a_kueue_queue_makes_the_gang_one_kueue_pod_group():
    plan = controller(queueName="team-a").plan({}, T0 + 1)
    for pod in manifests(plan):
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "g-exp-00000-0"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "4"
        # the group's Workload ends when no member runs (the head succeeded and the rest were deleted)
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"] == "false"


def test_long_names_stay_valid_dns_labels():
    head = "e" * 50 + "-00000-123456"
    assert len(head) == 63
    assert len(member_name(head, 1023)) <= 63 and member_name(head, 1023).endswith("-w1023")
    assert len(gang_name(head)) <= 63 and gang_name(head)[0].isalpha()
    assert member_name(head, 1) != member_name(head, 2) and member_name(head, 0) == head


def test_the_trial_runs_when_every_member_runs_and_shows_how_many_are_ready():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    plan = ctl.plan(observed(pods, ["Running", "Running", "Pending", "Running"]), T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert trial.phase == "Pending" and trial.status["gang"] == {"ready": 3, "total": 4}
    plan = ctl.plan(observed(pods, ["Running"] * 4), T0 + 3)
    assert trial.phase == "Running" and trial.status["gang"] == {"ready": 4, "total": 4}
    assert ("exp-00000", "Normal", "TrialStarted", "its 4 pods are running") in plan.events


def test_a_waiting_member_is_the_trials_pending_cause():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    unschedulable = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes: Insufficient cpu",
            }
        ]
    }
    ctl.plan(observed(pods, ["Running", "Running", "Running", "Pending"], rank3=unschedulable), T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert trial.status["reason"] == "Unschedulable"
    assert trial.status["message"] == "pod exp-00000-0-w3: 0/1 nodes: Insufficient cpu"


def test_a_failed_worker_fails_the_attempt_deletes_the_rest_and_the_retry_waits_for_them_to_go():
    ctl = controller(failure={"maxFailures": 2})
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Running"] * 4), T0 + 2)
    crash = {"containerStatuses": [{"name": "trial", "state": {"terminated": {"exitCode": 1, "message": "Boom"}}}]}
    views = observed(pods, ["Running", "Running", "Failed", "Running"], rank2=crash)
    plan = ctl.plan(views, T0 + 3)
    collected = list(plan.collect_gangs)
    trial = ctl.trials["exp-00000"]
    assert (trial.phase, trial.attempt, trial.status["failures"]) == ("Pending", 1, 1)
    assert trial.status["message"] == "worker rank 2 (pod exp-00000-0-w2) failed: Boom"
    assert sorted(name for name, _ in plan.delete_pods) == ["exp-00000-0", "exp-00000-0-w1", "exp-00000-0-w3"]
    assert plan.create_pods == []  # not while the last attempt's pods hold their resources
    views = observed(pods, ["Running", "Running", "Failed", "Running"], deleting=(0, 1, 3), rank2=crash)
    plan = ctl.plan(views, T0 + 4)
    assert plan.create_pods == []
    collected += plan.collect_gangs
    ended = observed(pods, ["Failed", "Failed", "Failed", "Failed"], rank2=crash)
    plan = ctl.plan(ended, T0 + 5)
    collected += plan.collect_gangs
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["exp-00000-1"]
    assert len(plan.gangs["exp-00000-1"].workers) == 3
    # the ended attempt's token Secret, Service and PodGroup go (once) when the trial's status holds its outcome
    assert collected == [("g-exp-00000-0", "exp-00000")]


def test_an_evicted_worker_is_a_disruption_of_the_whole_gang():
    ctl = controller()  # maxFailures 1: a disruption does not count against it
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Running"] * 4), T0 + 2)
    evicted = {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}
    plan = ctl.plan(observed(pods, ["Running", "Failed", "Running", "Running"], rank1=evicted), T0 + 3)
    trial = ctl.trials["exp-00000"]
    assert (trial.attempt, trial.status["reason"], trial.status.get("failures")) == (1, "EvictionByEvictionAPI", None)
    assert [e[2] for e in plan.events if e[0] == "exp-00000"] == ["TrialDisrupted"]
    assert len(plan.delete_pods) == 3


def test_a_worker_deleted_while_the_operator_was_away_is_a_disruption():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    views = observed(pods, ["Running"] * 4)
    del views["exp-00000-0-w3"]
    ctl.plan(views, T0 + 2)
    trial = ctl.trials["exp-00000"]
    assert (trial.attempt, trial.status["reason"]) == (1, "PodDeleted")
    assert "worker rank 3 (pod exp-00000-0-w3) disappeared" in trial.status["message"]


def test_the_heads_outcome_is_the_attempts_and_workers_still_running_are_deleted():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Running"] * 4), T0 + 2)
    outcome = {
        "containerStatuses": [
            {
                "name": "trial",
                "state": {
                    "terminated": {"exitCode": 0, "message": json.dumps({"outcome": OUTCOME_COMPLETED, "iteration": 5})}
                },
            }
        ]
    }
    plan = ctl.plan(observed(pods, ["Succeeded", "Succeeded", "Running", "Running"], rank0=outcome), T0 + 3)
    assert ctl.trials["exp-00000"].status["reason"] == "Completed"
    assert sorted(name for name, _ in plan.delete_pods) == ["exp-00000-0-w2", "exp-00000-0-w3"]


def test_stopping_the_experiment_deletes_every_member():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Running"] * 4), T0 + 2)
    ctl.update(gang_experiment(suspend=True))
    plan = ctl.plan(observed(pods, ["Running", "Running", "Running", "Running"], deleting=(0,)), T0 + 3)
    assert sorted(name for name, _ in plan.delete_pods) == ["exp-00000-0-w1", "exp-00000-0-w2", "exp-00000-0-w3"]


@pytest.mark.parametrize("scheduled", [(0, 1), (0, 1, 2)])
def test_a_gang_partly_scheduled_past_its_timeout_is_deleted_whole_and_retried_after_a_back_off(scheduled):
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    created = "2027-01-15T08:00:00Z"  # T0 is 2027-01-15T08:00:00Z
    phases = ["Pending"] * 4
    ctl.plan(observed(pods, phases, scheduled=scheduled, created=created), T0 + 59)
    trial = ctl.trials["exp-00000"]
    assert trial.attempt == 0  # within workers.scheduleTimeoutSeconds
    plan = ctl.plan(observed(pods, phases, scheduled=scheduled, created=created), T0 + 61)
    assert (trial.attempt, trial.status["reason"], trial.status["scheduleTimeouts"]) == (1, "GangTimeout", 1)
    assert f"only {len(scheduled)} of the gang's 4 pods were scheduled after 61 s" in trial.status["message"]
    assert trial.status["nextAttemptTime"] == "2027-01-15T08:01:11Z"  # 10 s back-off
    assert sorted(name for name, grace in plan.delete_pods) == sorted(p["metadata"]["name"] for p in pods)
    assert ("exp-00000", "Warning", "GangTimeout", trial.status["message"]) in plan.events
    assert not trial.status.get("failures")
    gone = observed(pods, phases, scheduled=scheduled, created=created, gone=(0, 1, 2, 3))
    assert ctl.plan(gone, T0 + 70).create_pods == []  # backing off
    plan = ctl.plan(gone, T0 + 72)
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["exp-00000-1"]


def test_the_time_a_gang_waits_unbound_for_admission_does_not_count_towards_its_timeout():
    """Kueue's gate or the scheduler's PodGroup holds a gang whole (no member bound) for an hour; when it is
    admitted its members are bound one by one: the gang is partly scheduled for a moment, not for an hour."""
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Pending"] * 4, scheduled=()), T0 + 3600)
    admitted = "2027-01-15T09:00:00Z"  # T0 + 3600
    ctl.plan(observed(pods, ["Pending"] * 4, scheduled=(0, 1), created=admitted), T0 + 3601)
    assert ctl.trials["exp-00000"].attempt == 0
    ctl.plan(observed(pods, ["Pending"] * 4, scheduled=(0, 1), created=admitted), T0 + 3661)
    assert (ctl.trials["exp-00000"].attempt, ctl.trials["exp-00000"].status["reason"]) == (1, "GangTimeout")


def test_a_gang_the_scheduler_holds_whole_never_times_out():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Pending"] * 4, scheduled=()), T0 + 3600)
    assert ctl.trials["exp-00000"].attempt == 0


def test_fold_leaves_one_pod_trials_as_they_are_and_workers_without_a_head_out():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    views = observed(pods, ["Running"] * 4)
    head = views.pop("exp-00000-0")
    assert fold(views) == {}  # workers are created first: a missing head is one not created yet
    single = dataclasses.replace(head, rank=None, world_size=1)
    assert fold({single.name: single}) == {single.name: single}


def _terminated(code, message, at):
    return {
        "containerStatuses": [
            {"name": "trial", "state": {"terminated": {"exitCode": code, "message": message, "finishedAt": at}}}
        ]
    }


@pytest.mark.parametrize(
    ("head_at", "worker_at", "message"),
    [
        (
            "2027-01-15T08:00:09Z",
            "2027-01-15T08:00:05Z",
            "worker rank 1 (pod exp-00000-0-w1) failed: ValueError: bad shard",
        ),
        ("2027-01-15T08:00:05Z", "2027-01-15T08:00:09Z", "KeyError: 'lr'"),
    ],
)
def test_when_head_and_worker_both_failed_the_first_failure_is_the_attempts(head_at, worker_at, message):
    ctl = controller(failure={"maxFailures": 3})
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Running"] * 4), T0 + 2)
    head = _terminated(1, "KeyError: 'lr'", head_at)
    worker = _terminated(1, "ValueError: bad shard", worker_at)
    lost = _terminated(1, "ConnectionError: the peer went away", "2027-01-15T08:00:10Z")
    views = observed(pods, ["Failed", "Failed", "Failed", "Running"], rank0=head, rank1=worker, rank2=lost)
    ctl.plan(views, T0 + 3)
    assert ctl.trials["exp-00000"].status["message"] == message


def test_a_head_that_failed_because_a_worker_was_deleted_is_a_disruption_not_a_failure():
    ctl = controller()
    pods = manifests(ctl.plan({}, T0 + 1))
    ctl.plan(observed(pods, ["Running"] * 4), T0 + 2)
    head = _terminated(1, "ConnectionError: the peer went away", "2027-01-15T08:00:10Z")
    views = observed(pods, ["Failed", "Running", "Running", "Running"], gone=(2,), rank0=head)
    ctl.plan(views, T0 + 3)
    trial = ctl.trials["exp-00000"]
    assert (trial.attempt, trial.status["reason"], trial.status.get("failures")) == (1, "PodDeleted", None)
