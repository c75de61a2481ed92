"""HyperBand (kubetune_operator.schedulers.hyperband): brackets, pausing, promotion, stopping."""

from __future__ import annotations

import pytest

from kubetune_operator.schedulers import CONTINUE, PAUSE, STOP, create_scheduler


def hyperband(**params):
    params.setdefault("metric", "acc")
    params.setdefault("mode", "max")
    return create_scheduler("hyperband", **params)


def report(scheduler, trial_id: str, t: int, value: float) -> str:
    return scheduler.on_trial_result(trial_id, {"training_iteration": t, "acc": value})


def small(n: int = 9, **params):
    """max_t=9, eta=3: first bracket (9 trials, r=1), then (5, 3), (3, 9)."""
    scheduler = hyperband(max_t=9, reduction_factor=3, **params)
    for i in range(n):
        scheduler.on_trial_add(f"t{i}")
    return scheduler


def test_default_brackets_are_rays():
    scheduler = hyperband()
    assert (scheduler.time_attr, scheduler.max_t, scheduler.eta) == ("training_iteration", 81, 3)
    for i in range(81 + 34 + 15 + 8 + 5 + 1):
        scheduler.on_trial_add(f"t{i}")
    assert scheduler.brackets() == [(81, 1), (34, 3), (15, 9), (8, 27), (5, 81), (81, 1)]


def test_brackets_too_small_for_max_t_are_skipped():
    scheduler = hyperband(max_t=50)
    for i in range(34 + 15 + 8 + 5):
        scheduler.on_trial_add(f"t{i}")
    assert scheduler.brackets() == [(34, 1), (15, 5), (8, 16), (5, 50)]


def test_trials_pause_at_the_rung_until_all_arrive_then_the_best_third_goes_on():
    scheduler = small()
    values = [0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]
    decisions = [report(scheduler, f"t{i}", 1, v) for i, v in enumerate(values[:-1])]
    assert decisions == [PAUSE] * 8
    assert scheduler.choose_trial_to_run([f"t{i}" for i in range(8)], search_finished=False) is None
    assert report(scheduler, "t8", 1, values[-1]) == STOP  # the last arrival is judged out at once
    paused = [f"t{i}" for i in range(8)]
    assert sorted(scheduler.trials_to_stop(paused)) == ["t0", "t2", "t4", "t6", "t7"]
    promoted = []
    while (chosen := scheduler.choose_trial_to_run([t for t in paused if t not in promoted])) is not None:
        promoted.append(chosen)
    assert sorted(promoted) == ["t1", "t3", "t5"]


def test_the_reporting_trial_continues_when_it_is_promoted_and_runs_to_the_next_rung():
    scheduler = small()
    for i in range(8):
        report(scheduler, f"t{i}", 1, 0.1)
    assert report(scheduler, "t8", 1, 1.0) == CONTINUE
    assert report(scheduler, "t8", 2, 1.0) == CONTINUE
    assert report(scheduler, "t8", 3, 1.0) == PAUSE  # next rung: r = 3


def test_whole_bracket_to_max_t_then_everyone_stops():
    scheduler = small()
    for i in range(9):
        report(scheduler, f"t{i}", 1, i / 10)
    for t in (2, 3):
        for trial_id in ("t6", "t7", "t8"):
            report(scheduler, trial_id, t, 1.0 if trial_id == "t8" else 0.5)
    # rung 3 judged when t8 arrived last: only t8 (the best) goes on to max_t
    assert scheduler.trials_to_stop(["t6", "t7"]) == ["t6", "t7"]
    assert [report(scheduler, "t8", t, 1.0) for t in range(4, 10)] == [CONTINUE] * 5 + [STOP]


def test_ranking_follows_the_mode():
    scheduler = small(mode="min")
    for i in range(9):
        report(scheduler, f"t{i}", 1, float(i))
    assert sorted(scheduler.trials_to_stop([f"t{i}" for i in range(8)])) == [f"t{i}" for i in range(3, 8)]


def test_an_unfilled_bracket_waits_until_the_search_is_finished():
    scheduler = small(n=4)
    assert [report(scheduler, f"t{i}", 1, i) for i in range(4)] == [PAUSE] * 4
    paused = [f"t{i}" for i in range(4)]
    assert scheduler.choose_trial_to_run(paused) is None and scheduler.trials_to_stop(paused) == []
    # ceil(9 / 3) = 3 of the 4 go on: more trials would have come.
    assert scheduler.choose_trial_to_run(paused, search_finished=True) in ("t1", "t2", "t3")
    assert scheduler.trials_to_stop(paused) == ["t0"]


def test_a_failed_trial_no_longer_holds_the_rung():
    scheduler = small()
    for i in range(8):
        report(scheduler, f"t{i}", 1, i)
    scheduler.on_trial_remove("t8")  # failed before reaching the rung
    assert scheduler.choose_trial_to_run([f"t{i}" for i in range(8)]) in ("t5", "t6", "t7")
    assert sorted(scheduler.trials_to_stop([f"t{i}" for i in range(8)])) == [f"t{i}" for i in range(5)]


def test_late_result_of_a_judged_out_trial_gets_stop_and_removal_clears_it():
    scheduler = small()
    for i in range(9):
        report(scheduler, f"t{i}", 1, i)
    assert report(scheduler, "t0", 2, 100.0) == STOP
    scheduler.on_trial_remove("t0")
    assert "t0" not in scheduler.trials_to_stop(["t0"])


def test_stop_last_trials_false_lets_the_last_rung_run_on():
    scheduler = hyperband(max_t=3, reduction_factor=3, stop_last_trials=False)
    for i in range(3):
        scheduler.on_trial_add(f"t{i}")  # bracket (3 trials, r=1), one halving
    assert [report(scheduler, f"t{i}", 1, i) for i in range(3)] == [PAUSE, PAUSE, CONTINUE]
    assert [report(scheduler, "t2", t, 1.0) for t in (2, 3, 4, 50)] == [CONTINUE] * 4


def test_state_round_trip_mid_rung():
    scheduler = small()
    for i in range(5):
        report(scheduler, f"t{i}", 1, i)
    restored = hyperband(max_t=9, reduction_factor=3)
    restored.set_state(scheduler.get_state())
    assert restored.get_state() == scheduler.get_state()
    for i in range(5, 9):
        assert report(restored, f"t{i}", 1, i) == report(scheduler, f"t{i}", 1, i)
    paused = [f"t{i}" for i in range(8)]
    assert restored.trials_to_stop(paused) == scheduler.trials_to_stop(paused)


@pytest.mark.parametrize(("params", "message"), [
    ({"max_t": 0}, "max_t"), ({"reduction_factor": 1}, "reduction_factor"), ({"mode": None}, "mode"),
    ({"grace_period": 1}, "unknown parameter"),
])
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        hyperband(**params)


def test_a_winner_that_paused_on_an_earlier_answer_is_resumed():
    # Two trials in a bracket closed by the end of the search; the runtime applies an answer one step
    # late and keeps the first pause it gets.
    scheduler = small(n=2)
    assert report(scheduler, "t0", 1, 1.0) == PAUSE and report(scheduler, "t1", 1, 2.0) == PAUSE
    assert scheduler.choose_trial_to_run(["t0", "t1"], search_finished=True) == "t0"
    assert scheduler.choose_trial_to_run(["t1"], search_finished=True) == "t1"
    assert report(scheduler, "t1", 2, 3.0) == CONTINUE
    assert report(scheduler, "t1", 3, 4.0) == PAUSE  # at the rung first: t1's runtime will pause
    assert report(scheduler, "t0", 2, 1.5) == CONTINUE
    assert report(scheduler, "t0", 3, 2.0) == STOP  # the rung is judged: t1 wins
    assert report(scheduler, "t1", 4, 5.0) == CONTINUE  # t1's late step; it pauses anyway (first answer)
    assert scheduler.choose_trial_to_run(["t1"], search_finished=True) == "t1"  # not forgotten
    assert scheduler.choose_trial_to_run(["t1"], search_finished=True) is None  # resumed once


def test_the_trial_whose_result_decides_a_rung_is_listed_too():
    scheduler = small(n=2)
    report(scheduler, "t0", 1, 1.0), report(scheduler, "t1", 1, 2.0)
    scheduler.choose_trial_to_run(["t0", "t1"], search_finished=True)
    scheduler.choose_trial_to_run(["t1"], search_finished=True)
    assert report(scheduler, "t1", 3, 9.0) == PAUSE
    assert report(scheduler, "t0", 3, 1.0) == STOP  # answered directly, and listed: were it pausing, it ends
    assert scheduler.trials_to_stop(["t0", "t1"]) == ["t0"]
    assert scheduler.choose_trial_to_run(["t0", "t1"], search_finished=True) == "t1"
