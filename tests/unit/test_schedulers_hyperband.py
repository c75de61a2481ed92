"""HyperBand (kubetune_operator.schedulers.hyperband): Ray's bracket order and shapes, rungs, pausing,
promotion and stopping."""

from __future__ import annotations

import pytest

from kubetune_operator.algorithms import create_scheduler
from kubetune_operator.schedulers import CONTINUE, PAUSE, STOP


def hyperband(**params):
    params.setdefault("metric", "acc")
    params.setdefault("mode", "max")
    return create_scheduler("hyperband", **params)


def report(scheduler, trial_id: str, t: int, value: float) -> str:
    return scheduler.on_trial_result(trial_id, {"training_iteration": t, "acc": value})


def small(n: int = 5, **params):
    """max_t=9, eta=3: Ray's brackets (3, 9), (5, 3), (9, 1). Three placeholders fill the first, so the
    ``n`` trials ``t0``.. join the (5 trials, rung 3) bracket, whose rungs are 3 and then min(9, 9) = 9."""
    scheduler = hyperband(max_t=9, reduction_factor=3, **params)
    for i in range(3):
        scheduler.on_trial_add(f"f{i}")
    for i in range(n):
        scheduler.on_trial_add(f"t{i}")
    return scheduler


@pytest.mark.parametrize(
    "params, expected",
    [
        ({}, [(5, 81), (8, 27), (15, 9), (34, 3), (81, 1), (5, 81)]),  # Ray's first bracket runs 5 trials to 81
        ({"max_t": 1000, "reduction_factor": 10}, [(4, 1000), (20, 100), (134, 10), (1000, 1), (4, 1000)]),
        ({"max_t": 50}, [(5, 50), (8, 16), (15, 5), (34, 1), (5, 50)]),  # s=4 gives r=0: skipped
        ({"max_t": 7, "reduction_factor": 2}, [(4, 7), (4, 3), (6, 1), (4, 7)]),  # s=3 gives r=0: skipped
    ],
)
def test_brackets_are_rays_in_rays_order(params, expected):
    scheduler = hyperband(**params)
    for i in range(sum(n for n, _ in expected)):
        scheduler.on_trial_add(f"t{i}")
    assert scheduler.brackets() == expected


def test_rungs_follow_rays_rule_up_to_its_last_one():
    # The (81 trials, r=1) bracket: rungs 1, 3, 9, 27, then min(81, 81) = 81 (Ray 2.x; 0.8.7's
    # min(81, 81 - 27) = 54 left its survivors short of max_t), where its trials stop.
    scheduler = hyperband()
    for i in range(5 + 8 + 15 + 34):
        scheduler.on_trial_add(f"f{i}")
    scheduler.on_trial_add("x")  # alone in its bracket: promoted at every rung once the search is finished
    scheduler.choose_trial_to_run([], search_finished=True)
    decisions = [report(scheduler, "x", t, 1.0) for t in range(1, 82)]
    assert decisions == [CONTINUE] * 80 + [STOP]


def test_trials_pause_at_the_rung_until_all_arrive_then_the_best_third_goes_on():
    scheduler = small()
    values = [0.5, 0.9, 0.1, 0.7, 0.3]
    assert [report(scheduler, f"t{i}", 3, v) for i, v in enumerate(values[:-1])] == [PAUSE] * 4
    assert scheduler.choose_trial_to_run([f"t{i}" for i in range(4)]) is None
    assert report(scheduler, "t4", 3, values[-1]) == STOP  # the last arrival is judged out at once
    paused = [f"t{i}" for i in range(4)]
    assert sorted(scheduler.trials_to_stop(paused)) == ["t0", "t2"]  # ceil(5 / 3) = 2 go on
    promoted = []
    while (chosen := scheduler.choose_trial_to_run([t for t in paused if t not in promoted])) is not None:
        promoted.append(chosen)
    assert sorted(promoted) == ["t1", "t3"]


def test_the_reporting_trial_continues_when_promoted_and_stops_at_the_last_rung():
    scheduler = small()
    for i in range(4):
        report(scheduler, f"t{i}", 3, 0.1)
    assert report(scheduler, "t4", 3, 1.0) == CONTINUE
    assert [report(scheduler, "t4", t, 1.0) for t in range(4, 10)] == [CONTINUE] * 5 + [PAUSE]  # rung 9
    report(scheduler, "t3", 4, 0.1)  # t3 was promoted too (of equal values, the later arrival ranks higher)
    assert report(scheduler, "t3", 9, 0.1) == STOP  # the bracket is finished: everyone stops
    assert scheduler.trials_to_stop(["t4"]) == ["t4"]


def test_an_unfilled_bracket_waits_until_the_search_is_finished():
    scheduler = small(n=2)
    assert report(scheduler, "t0", 3, 1.0) == PAUSE and report(scheduler, "t1", 3, 2.0) == PAUSE
    assert scheduler.choose_trial_to_run(["t0", "t1"]) is None  # three more trials would join in Ray
    # the searcher is finished: both of ceil(5 / 3) = 2 go on
    assert scheduler.choose_trial_to_run(["t0", "t1"], search_finished=True) == "t0"
    assert scheduler.choose_trial_to_run(["t1"], search_finished=True) == "t1"  # t0 runs now


def test_ranking_follows_the_mode():
    scheduler = small(mode="min")
    for i in range(5):
        report(scheduler, f"t{i}", 3, float(i))
    assert sorted(scheduler.trials_to_stop([f"t{i}" for i in range(4)])) == ["t2", "t3"]


def test_a_failed_trial_no_longer_holds_the_rung():
    scheduler = small()
    for i in range(4):
        report(scheduler, f"t{i}", 3, i)
    scheduler.on_trial_remove("t4")  # failed before reaching the rung
    assert scheduler.choose_trial_to_run([f"t{i}" for i in range(4)]) in ("t2", "t3")
    assert sorted(scheduler.trials_to_stop([f"t{i}" for i in range(4)])) == ["t0", "t1"]


def test_a_bracket_takes_its_n0_trials_in_creation_order_even_when_some_ended():
    # As Ray's pending trials fill brackets before any trial ends: an early end frees no place.
    scheduler = small(n=5)
    scheduler.on_trial_remove("t0")
    scheduler.on_trial_add("late")
    assert scheduler.brackets() == [(3, 9), (5, 3), (9, 1)]


def test_late_result_of_a_judged_out_trial_gets_stop_and_its_removal_keeps_it_stopped():
    scheduler = small()
    for i in range(5):
        report(scheduler, f"t{i}", 3, i)
    assert report(scheduler, "t0", 4, 100.0) == STOP
    scheduler.on_trial_remove("t0")
    # an operator killed after journaling the end, before the Trial showed it, finds t0 paused: ended again
    assert scheduler.trials_to_stop(["t0", "t3"]) == ["t0"]
    assert scheduler.choose_trial_to_run(["t0"]) is None


def test_stop_last_trials_false_lets_the_last_rung_run_on():
    scheduler = hyperband(max_t=3, reduction_factor=3, stop_last_trials=False)
    scheduler.on_trial_add("f0")  # bracket (2 trials, r=3)
    scheduler.on_trial_add("f1")
    for i in range(3):
        scheduler.on_trial_add(f"t{i}")  # bracket (3 trials, r=1), one halving
    assert [report(scheduler, f"t{i}", 1, i) for i in range(3)] == [PAUSE, PAUSE, CONTINUE]
    assert [report(scheduler, "t2", t, 1.0) for t in (2, 3, 4, 50)] == [CONTINUE] * 4


def test_state_round_trip_mid_rung():
    scheduler = small()
    for i in range(3):
        report(scheduler, f"t{i}", 3, i)
    restored = hyperband(max_t=9, reduction_factor=3)
    restored.set_state(scheduler.get_state())
    assert restored.get_state() == scheduler.get_state()
    for i in range(3, 5):
        assert report(restored, f"t{i}", 3, i) == report(scheduler, f"t{i}", 3, i)
    paused = [f"t{i}" for i in range(4)]
    assert restored.trials_to_stop(paused) == scheduler.trials_to_stop(paused)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_t": 0}, "max_t"),
        ({"reduction_factor": 1}, "reduction_factor"),
        ({"mode": None}, "mode"),
        ({"grace_period": 1}, "unknown parameter"),
    ],
)
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        hyperband(**params)


def test_a_winner_that_paused_on_an_earlier_answer_is_resumed():
    # The runtime may keep a pause it got before the rung was judged.
    scheduler = small(n=2)
    assert report(scheduler, "t0", 3, 1.0) == PAUSE and report(scheduler, "t1", 3, 2.0) == PAUSE
    assert scheduler.choose_trial_to_run(["t0", "t1"], search_finished=True) == "t0"
    assert scheduler.choose_trial_to_run(["t1"], search_finished=True) == "t1"
    assert report(scheduler, "t1", 9, 4.0) == PAUSE  # at the last rung first: t1's runtime will pause
    assert report(scheduler, "t0", 9, 2.0) == STOP  # the bracket is finished
    assert scheduler.trials_to_stop(["t1"]) == ["t1"]  # the paused one is ended too, not forgotten


def test_the_trial_whose_result_decides_a_rung_is_listed_too():
    scheduler = small(n=3)
    scheduler.choose_trial_to_run([], search_finished=True)
    report(scheduler, "t0", 3, 1.0), report(scheduler, "t1", 3, 2.0)
    assert report(scheduler, "t2", 3, 0.5) == STOP  # answered directly, and listed: were it pausing, it ends
    assert scheduler.trials_to_stop(["t0", "t1", "t2"]) == ["t2"]
    assert scheduler.choose_trial_to_run(["t0", "t1"]) == "t0" and scheduler.choose_trial_to_run(["t1"]) == "t1"


@pytest.mark.parametrize("first", range(5))
def test_every_brackets_survivors_reach_max_t(first):
    # Ray 2.x's fix of 0.8.7's rule: the survivors of every bracket of max_t 81 run to 81, not 54.
    scheduler = hyperband()
    for i in range(sum((5, 8, 15, 34, 81)[:first])):
        scheduler.on_trial_add(f"f{i}")
    scheduler.on_trial_add("x")  # alone in bracket `first`: promoted at every rung once the search is finished
    scheduler.choose_trial_to_run([], search_finished=True)
    decisions = [report(scheduler, "x", t, 1.0) for t in range(1, 82)]
    assert decisions == [CONTINUE] * 80 + [STOP]


def test_a_chosen_trial_whose_resume_was_lost_is_chosen_again():
    # The operator journals the choice, then dies before the Trial shows the resume: still paused, it is
    # chosen again (it would otherwise wait for good), and once past its rung it is not.
    scheduler = small(n=2)
    report(scheduler, "t0", 3, 1.0), report(scheduler, "t1", 3, 2.0)
    assert scheduler.choose_trial_to_run(["t0", "t1"], search_finished=True) == "t0"
    assert scheduler.choose_trial_to_run(["t0", "t1"]) == "t0"
    assert report(scheduler, "t0", 9, 1.0) == PAUSE
    assert scheduler.choose_trial_to_run(["t0", "t1"]) == "t1"
