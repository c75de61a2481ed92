"""A trial the scheduler stopped feeds nothing more to it (issue 33): Ray's controller never hands a stopped trial's
results to the scheduler or searcher, while a kubetune pod that could not hear its ``stop`` (the operator restarting)
runs on and reports later results. Those results are shown on the Trial and journaled, but ASHA never records them at
a later rung, so they cannot lower that rung's cutoff and let another trial run further than Ray would; the
scheduler and searcher are told the trial ended with the result it was stopped at. A restart that replays the journal
rebuilds the same state.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from devcluster.testkit import ConfigMaps
from kubetune.env import OUTCOME_COMPLETED
from kubetune_operator.controller import ExperimentController
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings
from tests.unit.test_controller import KEY, T0, adopt_created, experiment, pod

#: Rungs at 1, 2, 4 and 8 (one bracket); a trial is kept at a rung when it is at or above the median there.
ASHA = {"name": "asha", "params": {"max_t": 8, "grace_period": 1, "reduction_factor": 2}}
A, B, C = "exp-00000", "exp-00001", "exp-00002"


def result(iteration: int, acc: float, **extra) -> dict:
    return {"training_iteration": iteration, "acc": acc, **extra}


def rung(ctl: ExperimentController, milestone: int) -> dict:
    """The values ASHA recorded at ``milestone``, by trial."""
    for at, recorded in ctl.decisions.scheduler.rungs[0]:
        if at == milestone:
            return dict(recorded)
    raise AssertionError(f"no rung at {milestone}")


def start(store: ConfigMaps | None = None) -> ExperimentController:
    ctl = ExperimentController(experiment(scheduler=ASHA, maxConcurrentTrials=3), Settings(), KEY)
    adopt_created(ctl, ctl.plan({}, T0))
    ctl.plan({f"{t}-0": pod(f"{t}-0", "Running") for t in (A, B, C)}, T0 + 1)
    return ctl


def commit(ctl: ExperimentController, store: ConfigMaps) -> None:
    asyncio.run(Registry(Settings(), KEY, store.write).commit(ctl))


def a_stopped_at_rung_1(ctl: ExperimentController, same_batch: bool) -> list[str]:
    """C and B pass rung 1; A is below its median and is stopped there. A's pod did not hear it and reports its
    iteration 2 (below everything): in the batch that holds iteration 1, or in a later one. The decisions given."""
    decisions = [ctl.record_results(C, 0, [result(1, 0.8)], None), ctl.record_results(B, 0, [result(1, 0.9)], None)]
    if same_batch:  # the pod ran on while the operator was away and sends both results at once
        decisions.append(ctl.record_results(A, 0, [result(1, 0.1), result(2, 0.1)], None))
    else:
        decisions.append(ctl.record_results(A, 0, [result(1, 0.1)], None))
        decisions.append(ctl.record_results(A, 0, [result(2, 0.1)], None))
    return decisions


@pytest.mark.parametrize("same_batch", [True, False])
def test_results_of_a_trial_asha_stopped_never_change_a_later_rung(same_batch):
    ctl = start()
    decisions = a_stopped_at_rung_1(ctl, same_batch)
    assert decisions == ["continue", "continue", "stop"] + ([] if same_batch else ["stop"])
    assert rung(ctl, 1) == {C: 0.8, B: 0.9, A: 0.1} and rung(ctl, 2) == {}
    assert ctl.trials[A].status["iteration"] == 2  # what the pod reported is still shown
    # Ray's run: B opens rung 2 and C is below its cutoff (0.9); A's 0.1 there would have made it 0.5, and C go on
    assert ctl.record_results(B, 0, [result(2, 0.9)], None) == "continue"
    assert ctl.record_results(C, 0, [result(2, 0.6)], None) == "stop"
    assert rung(ctl, 2) == {B: 0.9, C: 0.6}
    # A's pod ran to max_t unheard and ends completed: the scheduler and searcher are told it ended at iteration 1
    ctl.record_results(A, 0, [result(i, 0.1) for i in range(3, 9)], None)
    told = []
    complete = ctl.decisions.scheduler.on_trial_complete
    ctl.decisions.scheduler.on_trial_complete = lambda trial, last=None: (
        told.append((trial, last)) or complete(trial, last)
    )
    ctl.plan({f"{A}-0": pod(f"{A}-0", "Succeeded", OUTCOME_COMPLETED)}, T0 + 2)
    assert [(trial, last["training_iteration"]) for trial, last in told] == [(A, 1)]
    assert rung(ctl, 2) == {B: 0.9, C: 0.6} and rung(ctl, 4) == {}


def test_a_result_that_stops_a_trial_is_the_last_the_searcher_hears():
    ctl = start()
    heard = []
    on_result = ctl.decisions.searcher.on_trial_result
    ctl.decisions.searcher.on_trial_result = lambda trial, r: (
        heard.append((trial, r["training_iteration"])) or (on_result(trial, r))
    )
    a_stopped_at_rung_1(ctl, same_batch=True)
    ctl.record_results(A, 0, [result(3, 0.1)], None)
    assert heard == [(C, 1), (B, 1), (A, 1)]


def restart(ctl: ExperimentController, store: ConfigMaps) -> ExperimentController:
    """A new operator's controller for ``ctl``'s Experiment: the Trials as the API server has them, then the journal."""
    restarted = ExperimentController(experiment(scheduler=ASHA, maxConcurrentTrials=3), Settings(), KEY)
    for name, state in ctl.trials.items():
        restarted.observe_trial(
            {
                "metadata": {"name": name, "uid": state.uid},
                "spec": {"index": state.index, "config": copy.deepcopy(state.config)},
                "status": copy.deepcopy(state.status),
            }
        )
    restarted.restore(store.list())
    return restarted


@pytest.mark.parametrize("same_batch", [True, False])
@pytest.mark.parametrize("from_snapshot", [False, True])
def test_a_restart_replaying_the_journal_gives_the_state_of_the_uninterrupted_run(same_batch, from_snapshot):
    store, ctl = ConfigMaps(), start()
    a_stopped_at_rung_1(ctl, same_batch)
    commit(ctl, store)
    if from_snapshot:  # the entries compacted into a snapshot, which the restart loads instead
        ctl.journal.snapshot_due = True
        commit(ctl, store)
        assert any("snapshot" in name for name in store.items)
    restarted = restart(ctl, store)
    assert restarted.decisions.scheduler.get_state() == ctl.decisions.scheduler.get_state()
    assert restarted.decisions.applied == ctl.decisions.applied
    assert restarted.decisions.applied[A].decision == "stop"
    assert restarted.decisions.applied[A].stopped_at["training_iteration"] == 1
    restarted.plan({f"{t}-0": pod(f"{t}-0", "Running") for t in (A, B, C)}, T0 + 2)
    for run in (ctl, restarted):  # both go on alike: A's pod, still unheard, reaches rung 2; C is judged without it
        assert run.record_results(A, 0, [result(3, 0.1)], None) == "stop"
        assert run.record_results(B, 0, [result(2, 0.9)], None) == "continue"
        assert run.record_results(C, 0, [result(2, 0.6)], None) == "stop"
        assert rung(run, 2) == {B: 0.9, C: 0.6}
    assert restarted.decisions.scheduler.get_state() == ctl.decisions.scheduler.get_state()
    assert restarted.decisions.applied == ctl.decisions.applied
