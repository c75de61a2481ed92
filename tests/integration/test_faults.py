"""The operator SIGKILLed every few seconds while Experiments run, on the local cluster: every
scheduler and searcher continues exactly where it was (its journal, ``docs/architecture.md``).

Trials run one at a time, so the order in which the operator saw results is the order of the
trials; the decisions it made are then checked against the same algorithm fed those results
offline, uninterrupted (``result.json`` in storage holds every result of every trial), and against
the shape of an uninterrupted run: as many trials, every iteration run once, all terminal.
"""

from __future__ import annotations

import threading
import time

import pytest

from kubetune_operator.schedulers import create_scheduler
from kubetune_operator.search import create_searcher
from kubetune_operator.status import compact_result
from tests.integration.support import wait_for
from tests.integration.test_operator import GROUP, VERSION, experiment, get, phase_is, result_lines, trials

MAX_T = 6


class Killer:
    """SIGKILLs the operator every ``every_s`` seconds and starts a new one, until stopped."""

    def __init__(self, operator, every_s: float = 4.0):
        self.operator, self.every_s, self.kills = operator, every_s, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.wait(self.every_s):
            self.operator.kill()
            self.kills += 1
            self.operator.start()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        if self.operator.proc.poll() is not None:
            self.operator.start()


def run_with_kills(custom, operator, namespace, spec, expected_trials):
    name = spec["metadata"]["name"]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", spec)
    with Killer(operator) as killer:
        wait_for(lambda: phase_is(custom, namespace, name, "Succeeded", "Failed"), timeout=300,
                 what=f"{name} to finish while its operator is killed every 4 s")
    assert killer.kills >= 3
    exp = get(custom, namespace, "experiments", name)
    assert exp["status"]["phase"] == "Succeeded", exp["status"]
    found = dict(sorted(trials(custom, namespace).items(), key=lambda kv: kv[1]["spec"]["index"]))
    assert len(found) == expected_trials and exp["status"]["trials"]["total"] == expected_trials
    assert all(t["status"]["phase"] == "Succeeded" for t in found.values()), \
        {n: t["status"] for n, t in found.items()}
    return found


def lines_once(s3, namespace, exp, trial):
    """The trial's results, checked to hold each iteration once, from 1 on."""
    lines = result_lines(s3, namespace, exp, trial)
    assert [r["training_iteration"] for r in lines] == list(range(1, len(lines) + 1)), trial
    return lines


@pytest.mark.parametrize("scheduler", [
    {"name": "asha", "params": {"grace_period": 1, "reduction_factor": 2, "max_t": MAX_T}},
    {"name": "median_stopping_rule", "params": {"time_attr": "training_iteration", "grace_period": 2,
                                                "min_samples_required": 2}},
], ids=["asha", "median"])
def test_killed_operator_stops_the_trials_an_uninterrupted_scheduler_stops(cluster, operator, custom, s3,
                                                                           namespace, storage_secret, scheduler):
    xs = [3, 1, 4, 2, 6, 5, 0.5]
    spec = experiment("storm", cluster, storage_secret, config={"x": {"grid_search": xs}, "sleep": 0.4},
                      stop={"training_iteration": MAX_T}, maxConcurrentTrials=1, scheduler=scheduler)
    found = run_with_kills(custom, operator, namespace, spec, len(xs))
    replay = create_scheduler(scheduler["name"], "score", "max", **scheduler["params"])
    stopped_early = 0
    for name, trial in found.items():
        replay.on_trial_add(name)
        lines = lines_once(s3, namespace, "storm", name)
        decisions = [replay.on_trial_result(name, r) for r in lines]
        status = trial["status"]
        if status["reason"] == "EarlyStopped":
            stopped_early += 1
            assert "stop" in decisions, (name, decisions)
            replay.on_trial_remove(name)
        else:
            assert status["reason"] == "Completed" and "stop" not in decisions[:-1], (name, decisions)
            assert len(lines) == MAX_T
            replay.on_trial_complete(name, compact_result(lines[-1], "score"))
    assert stopped_early >= 2  # the scheduler did decide, and decided as without the kills


def test_killed_operator_suggests_what_an_uninterrupted_optuna_search_suggests(cluster, operator, custom, s3,
                                                                               namespace, storage_secret):
    space = {"x": {"uniform": [0.5, 3.0]}, "sleep": 0.3}
    algo = {"name": "optuna", "seed": 11, "params": {"sampler_args": {"n_startup_trials": 3}}}
    spec = experiment("optuna-storm", cluster, storage_secret, config=space, numSamples=7,
                      stop={"training_iteration": 4}, maxConcurrentTrials=1, searchAlgorithm=algo)
    found = run_with_kills(custom, operator, namespace, spec, 7)
    replay = create_searcher("optuna", space, "score", "max", num_samples=7, seed=11, **algo["params"])
    for name, trial in found.items():
        assert replay.suggest(name) == trial["spec"]["config"], name
        lines = lines_once(s3, namespace, "optuna-storm", name)
        assert len(lines) == 4 and trial["status"]["lastResult"]["score"] == lines[-1]["score"]
        replay.on_trial_complete(name, trial["status"]["lastResult"])


def test_killed_operator_runs_hyperband_to_the_end(cluster, operator, custom, s3, namespace, storage_secret):
    xs = [3, 1, 4, 2, 6, 5]
    spec = experiment("hb-storm", cluster, storage_secret, config={"x": {"grid_search": xs}, "sleep": 0.3},
                      stop={"training_iteration": 9}, maxConcurrentTrials=2,
                      scheduler={"name": "hyperband", "params": {"max_t": 9, "reduction_factor": 3}})
    started = time.monotonic()
    found = run_with_kills(custom, operator, namespace, spec, len(xs))
    assert time.monotonic() - started < 300
    reasons = {t["status"]["reason"] for t in found.values()}
    assert reasons <= {"Completed", "EarlyStopped"} and "EarlyStopped" in reasons, reasons
    for name in found:
        lines_once(s3, namespace, "hb-storm", name)  # paused and resumed from checkpoints: no iteration twice
