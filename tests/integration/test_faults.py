"""Faults on the local cluster. The operator SIGKILLed every few seconds while Experiments run:
every scheduler and searcher continues exactly where it was (its journal, ``docs/architecture.md``).
Writes the API server refuses (quotas): a condition or an event, then the same outcome once they
are allowed. Names past 63 characters, and an invalid edit of a running Experiment.

Trials run one at a time, so the order in which the operator saw results is the order of the
trials; the decisions it made are then checked against the same algorithm fed those results
offline, uninterrupted (``result.json`` in storage holds every result of every trial), and against
the shape of an uninterrupted run: as many trials, every iteration run once, all terminal.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client

from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from kubetune_operator import journal
from kubetune_operator.algorithms import create_scheduler, create_searcher
from kubetune_operator.controller import ExperimentController
from kubetune_operator.schedulers.pb2_gp import select
from kubetune_operator.settings import Settings
from kubetune_operator.status import compact_result
from tests.integration.test_operator import (
    GROUP,
    VERSION,
    events,
    experiment,
    get,
    phase_is,
    posted,
    result_lines,
    trials,
)

MAX_T = 6


class Killer:
    """SIGKILLs the operator every ``every_s`` seconds and starts a new one (about 2 s), until stopped.

    With ``may_kill``, a kill that is due also waits until ``may_kill()`` is true (polled every 0.5 s): for work that
    a restarted operator must do from its start and that takes longer than ``every_s`` on a loaded machine, so that
    the kills cannot keep it from ever finishing (the test would then wait for an Experiment that never ends).
    """

    def __init__(self, operator, every_s: float = 3.0, may_kill=None):
        self.operator, self.every_s, self.may_kill, self.kills = operator, every_s, may_kill, 0
        self.gate_error: Exception | None = None  # the last error of may_kill, shown if too few kills happened
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.wait(self.every_s):
            while self.may_kill is not None and not self._may_kill():
                if self.done.wait(0.5):
                    return
            self.operator.kill()
            self.kills += 1
            self.operator.start()

    def _may_kill(self) -> bool:
        try:
            return self.may_kill()
        except Exception as exc:  # noqa: BLE001 - a journal read racing a journal write: ask again at the next poll
            self.gate_error = exc
            return False

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        # An operator started by the killer thread gets its parent-death signal when that thread ends
        # (PR_SET_PDEATHSIG follows the thread): replace it with one the main thread owns.
        if self.kills:
            self.operator.kill()
            self.operator.start()


def run_with_kills(custom, operator, namespace, spec, expected_trials, every_s=3.0, may_kill=None):
    name = spec["metadata"]["name"]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    with Killer(operator, every_s, may_kill) as killer:
        try:
            wait_for(
                lambda: phase_is(custom, namespace, name, "Succeeded", "Failed"),
                timeout=300,
                what=f"{name} to finish while its operator is killed every {every_s:.0f} s",
            )
        except AssertionError as exc:  # say where each trial got stuck
            states = {
                n: {k: t.get("status", {}).get(k) for k in ("phase", "reason", "attempt", "iteration")}
                for n, t in sorted(trials(custom, namespace).items())
            }
            raise AssertionError(f"{exc}; trials: {states}") from None
    assert killer.kills >= 2, f"{killer.kills} kills; the kill gate's last error: {killer.gate_error!r}"
    exp = get(custom, namespace, "experiments", name)
    assert exp["status"]["phase"] == "Succeeded", exp["status"]
    found = dict(sorted(trials(custom, namespace).items(), key=lambda kv: kv[1]["spec"]["index"]))
    assert len(found) == expected_trials and exp["status"]["trials"]["total"] == expected_trials
    assert all(t["status"]["phase"] == "Succeeded" for t in found.values()), {
        n: {k: t["status"].get(k) for k in ("phase", "reason", "attempt", "message")} for n, t in found.items()
    }
    return found


def lines_once(s3, namespace, exp, trial):
    """The trial's results, checked to hold each iteration once, from 1 on."""
    lines = result_lines(s3, namespace, exp, trial)
    assert [r["training_iteration"] for r in lines] == list(range(1, len(lines) + 1)), trial
    return lines


ASHA = {"name": "asha", "params": {"grace_period": 1, "reduction_factor": 2, "max_t": MAX_T}}


@pytest.mark.parametrize(
    ("scheduler", "workers"),
    [
        (ASHA, 0),
        (
            {
                "name": "median_stopping_rule",
                "params": {"time_attr": "training_iteration", "grace_period": 2, "min_samples_required": 2},
            },
            0,
        ),
        (ASHA, 2),
    ],
    ids=["asha", "median", "asha-gangs"],
)
def test_killed_operator_stops_the_trials_an_uninterrupted_scheduler_stops(
    cluster, operator, custom, core, s3, namespace, storage_secret, scheduler, workers
):
    """With ``workers``, each trial is a gang (the head and idle workers the operator deletes when it ends)."""
    xs = [3, 1, 4, 2, 6, 5, 0.5]
    gang = {"resourcesPerTrial": {"cpu": "100m", "workers": {"replicas": workers, "cpu": "100m"}}} if workers else {}
    spec = experiment(
        "storm",
        cluster,
        storage_secret,
        config={"x": {"grid_search": xs}, "sleep": 0.4},
        stop={"training_iteration": MAX_T},
        maxConcurrentTrials=1,
        scheduler=scheduler,
        **gang,
    )
    found = run_with_kills(custom, operator, namespace, spec, len(xs))
    if workers:  # every gang ended whole: no member left running
        wait_for(
            lambda: (
                not [
                    p
                    for p in core.list_namespaced_pod(namespace, label_selector="kubetune.io/rank").items
                    if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp
                ]
            ),
            timeout=60,
            what="no gang member left running",
        )
        assert all(t["status"]["gang"]["total"] == 1 + workers for t in found.values())
    replay = create_scheduler(scheduler["name"], "score", "max", **scheduler["params"])
    stops = 0
    for name, trial in found.items():
        replay.on_trial_add(name)
        lines = lines_once(s3, namespace, "storm", name)
        # as the operator and Ray's controller: a result that meets spec.stop reaches the scheduler only as the
        # trial's completion (on_trial_complete below), never through on_trial_result; once a trial is stopped,
        # none of its later results reaches it (a pod that did not hear the stop trains on, unheard)
        decisions = []
        for r in lines:
            if r["training_iteration"] >= MAX_T or "stop" in decisions:
                break
            decisions.append(replay.on_trial_result(name, r))
        stops += "stop" in decisions
        if trial["status"]["reason"] == "EarlyStopped":
            assert "stop" in decisions, (name, decisions)  # never stopped by a decision Ray would not make
            replay.on_trial_remove(name)
        else:  # a trial may end before a stop reaches it (the runtime trains on while the operator is down)
            assert trial["status"]["reason"] == "Completed" and len(lines) == MAX_T, (name, trial["status"])
            final = lines[len(decisions) - 1] if "stop" in decisions else lines[-1]  # the result it was stopped at
            replay.on_trial_complete(name, compact_result(final, "score"))
    assert stops >= 2  # the scheduler had decisions to make
    # What the restarted operators' scheduler knows at the end is what it knows uninterrupted.
    assert json.dumps(operator_scheduler(custom, core, namespace, "storm").get_state(), sort_keys=True) == json.dumps(
        replay.get_state(), sort_keys=True
    )


def operator_controller(custom, core, namespace, name):
    """The Experiment's controller as a restarted operator rebuilds it from the journal in the cluster."""
    ctl = ExperimentController(get(custom, namespace, "experiments", name), Settings(), b"k" * 32)
    for trial in trials(custom, namespace).values():
        ctl.observe_trial(trial)
    configmaps = core.list_namespaced_config_map(namespace, label_selector=journal.LABEL_STATE)
    ctl.restore([client.ApiClient().sanitize_for_serialization(cm) for cm in configmaps.items])
    return ctl


def operator_scheduler(custom, core, namespace, name):
    """The Experiment's scheduler as a restarted operator rebuilds it from the journal in the cluster."""
    return operator_controller(custom, core, namespace, name).decisions.scheduler


def test_killed_operator_suggests_what_an_uninterrupted_optuna_search_suggests(
    cluster, operator, custom, s3, namespace, storage_secret
):
    space = {"x": {"uniform": [0.5, 3.0]}, "sleep": 0.3}
    algo = {"name": "optuna", "seed": 11, "params": {"sampler_args": {"n_startup_trials": 3}}}
    spec = experiment(
        "optuna-storm",
        cluster,
        storage_secret,
        config=space,
        numSamples=7,
        stop={"training_iteration": 4},
        maxConcurrentTrials=1,
        searchAlgorithm=algo,
    )
    found = run_with_kills(custom, operator, namespace, spec, 7)
    replay = create_searcher("optuna", space, "score", "max", num_samples=7, seed=11, **algo["params"])
    for name, trial in found.items():
        assert replay.suggest(name) == trial["spec"]["config"], name
        lines = lines_once(s3, namespace, "optuna-storm", name)
        assert len(lines) == 4 and trial["status"]["lastResult"]["score"] == lines[-1]["score"]
        replay.on_trial_complete(name, trial["status"]["lastResult"])


def test_killed_operator_tells_optuna_the_trials_asha_stopped_as_pruned_with_prune_early_stopped(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    """The BOHB idea through the real operator: every trial ASHA stopped reaches the study as pruned at the
    iteration it reached with its score there, every other as complete with its last score, and nothing is
    told twice, with the operator killed every 3 s."""
    algo = {
        "name": "optuna",
        "seed": 5,
        "params": {"prune_early_stopped": True, "sampler_args": {"n_startup_trials": 3}},
    }
    spec = experiment(
        "bohb-storm",
        cluster,
        storage_secret,
        config={"x": {"uniform": [0.5, 3.0]}, "sleep": 0.3},
        numSamples=8,
        stop={"training_iteration": 6},
        maxConcurrentTrials=2,
        scheduler={"name": "asha", "params": {"max_t": 6, "grace_period": 1, "reduction_factor": 2}},
        searchAlgorithm=algo,
    )
    found = run_with_kills(custom, operator, namespace, spec, 8)
    reasons = {name: t["status"]["reason"] for name, t in found.items()}
    assert {"Completed", "EarlyStopped"} <= set(reasons.values()), reasons
    searcher = operator_controller(custom, core, namespace, "bohb-storm").decisions.searcher
    study = {t.number: t for t in searcher._study.trials}
    rungs = (1, 2, 4)  # ASHA's milestones for max_t 6, grace_period 1, reduction_factor 2: where it stops trials
    for name, reason in reasons.items():
        lines = lines_once(s3, namespace, "bohb-storm", name)
        told = study[searcher._trials[name]["number"]]
        # a trial ASHA stopped is told with the result it was stopped at, whatever its pod ran on to unheard
        if reason == "EarlyStopped":
            ((at, value),) = told.intermediate_values.items()
            assert told.state.name == "PRUNED" and at in rungs and value == lines[at - 1]["score"], (name, at)
        else:  # completed, or stopped at a rung while its pod trained on to the end unheard
            reported = {lines[at - 1]["score"] for at in (*rungs, 6)}
            assert told.state.name == "COMPLETE" and told.value in reported and len(lines) == 6, name
    assert len(study) == 8


def test_killed_operator_runs_hyperband_to_the_end(cluster, operator, custom, s3, namespace, storage_secret):
    xs = [3, 1, 4, 2, 6, 5]
    # Ray's brackets for max_t 9: (3 trials, rung 9), then (5, rung 3): the last three trials are judged at 3
    spec = experiment(
        "hb-storm",
        cluster,
        storage_secret,
        config={"x": {"grid_search": xs}, "sleep": 1.0},
        stop={"training_iteration": 9},
        maxConcurrentTrials=2,
        scheduler={"name": "hyperband", "params": {"max_t": 9, "reduction_factor": 3}},
    )
    started = time.monotonic()
    found = run_with_kills(custom, operator, namespace, spec, len(xs))
    assert time.monotonic() - started < 300
    reasons = {t["status"]["reason"] for t in found.values()}
    assert reasons <= {"Completed", "EarlyStopped"} and "EarlyStopped" in reasons, reasons
    for name in found:
        lines_once(s3, namespace, "hb-storm", name)  # paused and resumed from checkpoints: no iteration twice


def condition(custom, namespace, name, type_):
    conditions = get(custom, namespace, "experiments", name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def quota(core, namespace, hard):
    """A ResourceQuota, waited for until the quota controller has counted usage (admission enforces it then)."""
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "limits"}, "spec": {"hard": hard}})
    wait_for(
        lambda: core.read_namespaced_resource_quota("limits", namespace).status.hard or {},
        timeout=60,
        what="the quota's status",
    )


def test_a_refused_journal_write_degrades_the_experiment_until_it_succeeds(
    cluster, operator, custom, core, namespace, storage_secret
):
    quota(core, namespace, {"configmaps": "0"})
    spec = experiment(
        "refused",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1, 2, 3]}},
        scheduler={"name": "asha", "params": {"grace_period": 1, "max_t": 3}},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    degraded = wait_for(
        lambda: (
            condition(custom, namespace, "refused", "Degraded").get("status") == "True"
            and condition(custom, namespace, "refused", "Degraded")
        ),
        what="Degraded=True",
    )
    assert degraded["reason"] == "ReconcileError" and "forbidden" in degraded["message"].lower(), degraded
    posted(core, namespace, "ReconcileFailed")
    assert trials(custom, namespace) == {}  # nothing was decided that the journal does not hold
    core.delete_namespaced_resource_quota("limits", namespace)
    wait_for(
        lambda: phase_is(custom, namespace, "refused", "Succeeded", "Failed"),
        timeout=180,
        what="the experiment to finish once the quota is gone",
    )
    assert get(custom, namespace, "experiments", "refused")["status"]["phase"] == "Succeeded"
    assert condition(custom, namespace, "refused", "Degraded")["status"] == "False"


def test_trials_refused_by_a_quota_are_created_later_with_the_same_configs(
    cluster, operator, custom, core, namespace, storage_secret
):
    quota(core, namespace, {"count/trials.kubetune.io": "2"})
    space = {"x": {"uniform": [0.5, 3.0]}, "sleep": 0.2}
    algo = {"name": "optuna", "seed": 5, "params": {"sampler_args": {"n_startup_trials": 4}}}
    spec = experiment(
        "quota", cluster, storage_secret, config=space, numSamples=4, maxConcurrentTrials=4, searchAlgorithm=algo
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(lambda: events(core, namespace, "APICallsFailed"), what="an event about the refused creates")
    assert "exceeded quota" in events(core, namespace, "APICallsFailed")[0].message
    assert len(trials(custom, namespace)) == 2
    core.delete_namespaced_resource_quota("limits", namespace)
    wait_for(
        lambda: phase_is(custom, namespace, "quota", "Succeeded", "Failed"),
        timeout=180,
        what="the experiment to finish once the quota is gone",
    )
    found = sorted(trials(custom, namespace).values(), key=lambda t: t["spec"]["index"])
    replay = create_searcher("optuna", space, "score", "max", num_samples=4, seed=5, **algo["params"])
    assert [t["spec"]["config"] for t in found] == [replay.suggest(t["metadata"]["name"]) for t in found]
    assert get(custom, namespace, "experiments", "quota")["status"]["trials"]["succeeded"] == 4


def test_an_experiment_with_a_100_character_name_runs(cluster, operator, custom, namespace, storage_secret):
    name = "a-very-long-experiment-name-" + "x" * 72
    assert len(name) == 100
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment(name, cluster, storage_secret, config={"x": {"grid_search": [1, 2]}}),
    )
    wait_for(lambda: phase_is(custom, namespace, name, "Succeeded", "Failed"), what="the long-named experiment")
    exp = get(custom, namespace, "experiments", name)
    assert exp["status"]["phase"] == "Succeeded" and exp["status"]["trials"]["succeeded"] == 2


def test_an_experiment_deleted_and_created_again_starts_afresh(
    cluster, operator, custom, s3, namespace, storage_secret
):
    old = custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment("again", cluster, storage_secret, config={"x": 1, "sleep": 0.5}, stop={"training_iteration": 30}),
    )
    wait_for(
        lambda: (trials(custom, namespace).get("again-00000", {}).get("status", {}).get("iteration") or 0) >= 3,
        what="the first incarnation's trial to checkpoint a few iterations",
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", "again")
    wait_for(lambda: not get(custom, namespace, "experiments", "again"), what="the Experiment to go")
    new = custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment("again", cluster, storage_secret, config={"x": 2}, stop={"training_iteration": 4}),
    )
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    wait_for(lambda: phase_is(custom, namespace, "again", "Succeeded", "Failed"), what="the new incarnation to end")
    status = get(custom, namespace, "experiments", "again")["status"]
    assert status["phase"] == "Succeeded" and status["trials"]["total"] == 1, status
    trial = wait_for(
        lambda: [
            t
            for t in trials(custom, namespace).values()
            if t["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"]
        ]
    )[0]
    assert trial["spec"]["config"] == {"x": 2} and trial["status"]["iteration"] == 4
    assert status["bestTrial"]["metricValue"] == 8.0  # 4 steps of 2: nothing carried over from the old trial
    key = f"experiments/{namespace}/again/{new['metadata']['uid'][:8]}/again-00000/result.json"
    lines = [json.loads(line) for line in s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read().splitlines()]
    assert [(r["training_iteration"], r["score"]) for r in lines] == [(1, 2.0), (2, 4.0), (3, 6.0), (4, 8.0)]


def test_an_invalid_edit_keeps_ready_false_while_the_last_valid_spec_runs(
    cluster, operator, custom, core, namespace, storage_secret
):
    spec = experiment("edited", cluster, storage_secret, config={"x": 1, "sleep": 0.5}, stop={"training_iteration": 12})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    wait_for(lambda: phase_is(custom, namespace, "edited", "Running"), what="Running")
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", "edited", {"spec": {"config": {"x": 1, "lr": {"loguniform": [0, 1]}}}}
    )
    wait_for(
        lambda: condition(custom, namespace, "edited", "Ready").get("reason") == "InvalidSpec",
        what="Ready=False/InvalidSpec",
    )
    time.sleep(4)  # several reconcile passes and status writes later
    ready = condition(custom, namespace, "edited", "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec" and "loguniform" in ready["message"]
    # what kstatus reads (docs/operations.md, "GitOps health"): the refused generation observed, Stalled
    exp = get(custom, namespace, "experiments", "edited")
    assert exp["status"]["observedGeneration"] == exp["metadata"]["generation"] == 2
    assert condition(custom, namespace, "edited", "Stalled")["reason"] == "InvalidSpec"
    assert condition(custom, namespace, "edited", "Reconciling")["status"] == "False"
    wait_for(lambda: phase_is(custom, namespace, "edited", "Succeeded", "Failed"), what="the last valid spec to end")
    assert get(custom, namespace, "experiments", "edited")["status"]["phase"] == "Succeeded"


def test_trials_that_cannot_start_say_why(cluster, operator, custom, core, namespace, storage_secret):
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment("greedy", cluster, storage_secret, config={"x": 1}, resourcesPerTrial={"gpu": 8}),
    )
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "experiments", experiment("typo", cluster, "s3-credz", config={"x": 1})
    )
    bad = experiment(
        "sideways",
        cluster,
        storage_secret,
        config={"x": 1},
        template={"tolerations": [{"key": "k", "operator": "Sideways"}]},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", bad)

    greedy = wait_for(
        lambda: (
            condition(custom, namespace, "greedy", "TrialsWaiting").get("status") == "True"
            and condition(custom, namespace, "greedy", "TrialsWaiting")
        ),
        what="TrialsWaiting on greedy",
    )
    assert greedy["reason"] == "Unschedulable" and "nvidia.com/gpu" in greedy["message"], greedy
    trial = get(custom, namespace, "trials", "greedy-00000")["status"]
    assert trial["phase"] == "Pending" and trial["reason"] == "Unschedulable"

    typo = wait_for(
        lambda: (
            condition(custom, namespace, "typo", "TrialsWaiting").get("status") == "True"
            and condition(custom, namespace, "typo", "TrialsWaiting")
        ),
        what="TrialsWaiting on typo",
    )
    assert typo["reason"] == "CreateContainerConfigError" and "s3-credz" in typo["message"], typo
    env = cluster.env()  # the user fixes it: the Secret appears, the trial starts and finishes
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "s3-credz"},
            "stringData": {
                "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
                "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
            },
        },
    )
    wait_for(lambda: phase_is(custom, namespace, "typo", "Succeeded"), timeout=120, what="typo to succeed")
    assert condition(custom, namespace, "typo", "TrialsWaiting")["status"] == "False"

    ready = wait_for(
        lambda: (
            condition(custom, namespace, "sideways", "Ready").get("status") == "False"
            and condition(custom, namespace, "sideways", "Ready")
        ),
        what="Ready=False on sideways",
    )
    assert "Sideways" in ready["message"] and "refused trial pod" in ready["message"], ready
    assert any("Sideways" in e.message for e in events(core, namespace, "APICallsFailed"))


def test_a_misspelled_domain_is_flagged_and_two_domains_in_one_object_refused(
    cluster, operator, custom, core, namespace, storage_secret
):
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment("typo-domain", cluster, storage_secret, config={"x": 1, "lr": {"loguniforn": [0.0001, 0.1]}}),
    )
    flagged = wait_for(lambda: events(core, namespace, "SuspiciousConfig"), what="a SuspiciousConfig event")
    assert "config.lr" in flagged[0].message and "loguniform" in flagged[0].message
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "experiments",
        experiment(
            "two-domains", cluster, storage_secret, config={"x": 1, "lr": {"uniform": [0, 1], "choice": [1, 2]}}
        ),
    )
    ready = wait_for(
        lambda: (
            condition(custom, namespace, "two-domains", "Ready").get("status") == "False"
            and condition(custom, namespace, "two-domains", "Ready")
        ),
        what="Ready=False on two-domains",
    )
    assert ready["reason"] == "InvalidSpec" and "several domains" in ready["message"]


def test_killed_operator_carries_out_pbt_exploits_across_restarts(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    scheduler = {
        "name": "pbt",
        "params": {
            "time_attr": "training_iteration",
            "perturbation_interval": 2,
            "hyperparam_mutations": {"x": [1, 2, 3, 4]},
            "resample_probability": 0.0,
        },
    }
    spec = experiment(
        "pbt-storm",
        cluster,
        storage_secret,
        # the best x first: trials start seconds apart on a loaded machine and PBT compares the latest scores,
        # so the trial that starts last is the worst and reaches a perturbation boundary (and exploits) while the
        # best still runs; in the other order an early start can outrun the better rates until all have ended
        config={"x": {"grid_search": [4, 3, 2, 1]}, "sleep": 0.5},
        stop={"training_iteration": 16},
        maxConcurrentTrials=4,
        scheduler=scheduler,
        checkpoint={"frequency": 0, "atEnd": True},
    )
    found = run_with_kills(custom, operator, namespace, spec, 4)
    perturbed = [t for t in found.values() if t["status"].get("perturbations")]
    assert perturbed, {n: t["status"].get("reason") for n, t in found.items()}
    for trial in perturbed:
        name = trial["metadata"]["name"]
        # one lineage, every iteration once; it jumps where a donor whose answer came late (its operator was
        # down) had checkpointed later than the exploit asked, and its nearest checkpoint was restored; one
        # restored at the stop iteration reports one more result, then stops (as Ray's does)
        iterations = [r["training_iteration"] for r in result_lines(s3, namespace, "pbt-storm", name)]
        assert iterations == sorted(set(iterations)) and iterations[-1] in (16, 17), (name, iterations)
        lines = result_lines(s3, namespace, "pbt-storm", name)
        last = trial["status"]["perturbations"][-1]
        assert trial["status"]["config"]["x"] in (1, 2, 3, 4)
        # the lineage it ended with runs the explored x (each result carries its config): +x per step
        x = trial["status"]["config"]["x"]
        if "x" not in last["newConfig"]:
            continue  # explore kept x: the results do not tell the lineages apart
        new = [r for r in lines if r["config"] == trial["status"]["config"]]
        assert new and new[-1]["training_iteration"] == iterations[-1], (name, last)
        steps = [
            (b["score"] - a["score"])
            for a, b in zip(new, new[1:])
            if b["training_iteration"] == a["training_iteration"] + 1
        ]
        assert steps == [x] * len(steps), (name, steps, x)
    # the journal a restarted operator replays holds every exploit the operators carried out
    rebuilt = operator_scheduler(custom, core, namespace, "pbt-storm")
    assert rebuilt.num_perturbations >= sum(len(t["status"]["perturbations"]) for t in perturbed)


def test_killed_operator_carries_out_pb2_exploits_with_the_configs_its_explore_steps_chose(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    """PB2 in the real operator: its explore steps run in the operator's worker process, and the operator is
    killed every 5 s, but not again while an explore step is open and none ended since the last kill: a worker
    spawned by a new operator imports scikit-learn first (10 s and more on a loaded 2-core machine), so a fixed
    cycle could kill every step before it ends and the Experiment would never finish. Every exploit is carried
    out with the config its journaled step chose, and those steps are what the explore function gives on the
    journaled data."""
    spec = experiment(
        "pb2-storm",
        cluster,
        storage_secret,
        config={"x": {"grid_search": [1.5, 2.5, 3.25, 4.5]}, "sleep": 0.5},  # not integral: PB2 keeps ints ints
        stop={"training_iteration": 16},
        maxConcurrentTrials=4,
        scheduler={
            "name": "pb2",
            "params": {
                "time_attr": "training_iteration",
                "perturbation_interval": 2,
                "hyperparam_bounds": {"x": [1, 5]},
            },
        },
        checkpoint={"frequency": 0, "atEnd": True},
    )
    steps_at_kill = [-1]

    def may_kill() -> bool:  # a step ended since the last kill, or none is open
        log = operator_scheduler(custom, core, namespace, "pb2-storm").get_state()["log"]
        steps = [e for e in log if e[0] == "explore"]
        ended = sum(1 for e in steps if e[4] is not None)
        if ended > steps_at_kill[0] or ended == len(steps):
            steps_at_kill[0] = ended
            return True
        return False

    found = run_with_kills(custom, operator, namespace, spec, 4, every_s=5.0, may_kill=may_kill)
    perturbed = [t for t in found.values() if t["status"].get("perturbations")]
    assert perturbed, {n: t["status"].get("reason") for n, t in found.items()}
    rebuilt = operator_scheduler(custom, core, namespace, "pb2-storm")
    for trial in perturbed:
        name, status = trial["metadata"]["name"], trial["status"]
        assert all(p["operations"] == {} for p in status["perturbations"])
        assert 1.0 <= status["config"]["x"] <= 5.0 and status["config"] == rebuilt._configs[name]
        iterations = [r["training_iteration"] for r in result_lines(s3, namespace, "pb2-storm", name)]
        assert iterations == sorted(set(iterations)) and iterations[-1] in (16, 17), (name, iterations)
    # the journal holds every step, each with the choice the explore function makes on the journaled data:
    # a scheduler given the same data with the steps open takes them again, one by one, to the same configs
    state = rebuilt.get_state()
    steps = [e for e in state["log"] if e[0] == "explore"]
    assert steps and all(e[4] is not None for e in steps)
    assert sum(1 for e in steps if e[4]["row"]) >= 1, steps  # at least one config chosen by the GP bandit
    again = create_scheduler("pb2", "score", "max", **spec["spec"]["scheduler"]["params"])
    again.set_state(
        {
            **state,
            "log": [e if e[0] == "row" else [*e[:4], None] for e in state["log"]],
            "current": None,
            "exploredAt": 0.0,
        }
    )
    for entry in steps:
        job = again.next_exploration()
        assert (job["trial"], job["donor"], job["seed"]) == tuple(entry[1:4])
        again.explored(job["trial"], select(job))
    assert again.get_state()["log"] == state["log"] and again.get_state()["current"] == state["current"]


def test_killed_operator_runs_bohb_to_the_end_and_its_journal_keeps_what_bohb_learned(
    cluster, operator, custom, core, s3, namespace, storage_secret
):
    """TuneBOHB with HyperBandForBOHB, the operator killed every 3 s, one trial at a time: the brackets are
    HyperBandForBOHB's (the largest, (9 trials, rung 1), first); every observation the rebuilt searcher holds at
    a rung is the trial's result at that iteration in result.json (a pod that ran on while the operator was down
    still gives its result at the rung, once), and the rebuilt searcher gives each Trial its config."""
    space = {"x": {"uniform": [0.5, 3.0]}, "sleep": 1.0}
    algo = {"name": "bohb", "seed": 5, "params": {"bohb_config": {"random_fraction": 0}}}
    spec = experiment(
        "bohb-storm-2",
        cluster,
        storage_secret,
        config=space,
        numSamples=10,
        stop={"training_iteration": 9},
        maxConcurrentTrials=1,
        scheduler={"name": "hyperband_bohb", "params": {"max_t": 9, "reduction_factor": 3}},
        searchAlgorithm=algo,
    )
    found = run_with_kills(custom, operator, namespace, spec, 10)
    reasons = {name: t["status"]["reason"] for name, t in found.items()}
    ctl = operator_controller(custom, core, namespace, "bohb-storm-2")
    assert ctl.decisions.scheduler.brackets()[:2] == [(9, 1), (5, 3)]
    learned = ctl.decisions.searcher.get_state()["observations"]
    lines = {name: lines_once(s3, namespace, "bohb-storm-2", name) for name in found}
    for budget, seen in learned.items():
        for name, loss in seen.items():
            assert loss == -lines[name][int(budget) - 1]["score"], (budget, name)
    assert len(learned["1"]) >= 5, (learned, reasons)
    for name, trial in found.items():
        assert ctl.decisions.searcher.suggest(name) == trial["spec"]["config"], name
