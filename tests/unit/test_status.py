"""Status math: conditions, trial counts, the best trial, the experiment phase, merge patches, size bounds."""

from __future__ import annotations

import copy
import json
import math
from datetime import datetime, timedelta, timezone

import pytest
from conftest_crds import root_schema, validate

from kubetune_operator import status as st

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)


def _status_schema(kind: str) -> dict:
    return root_schema(kind)["properties"]["status"]


# ------------------------------------------------------------------ conditions


def test_format_time_is_rfc3339_utc_seconds():
    assert st.format_time(T0) == "2024-05-01T12:00:00Z"
    plus2 = timezone(timedelta(hours=2))
    assert st.format_time(datetime(2024, 5, 1, 14, 0, 0, 999, tzinfo=plus2)) == "2024-05-01T12:00:00Z"
    with pytest.raises(ValueError):
        st.format_time(datetime(2024, 5, 1))


def test_new_condition_is_appended_with_now():
    conditions = st.set_condition(None, "Running", True, "TrialsRunning", "2 running", 3, T0)
    assert conditions == [
        {
            "type": "Running",
            "status": "True",
            "reason": "TrialsRunning",
            "message": "2 running",
            "lastTransitionTime": "2024-05-01T12:00:00Z",
            "observedGeneration": 3,
        }
    ]


def test_same_status_keeps_the_transition_time_but_updates_the_rest():
    first = st.set_condition([], "Running", "True", "TrialsRunning", "1 running", 1, T0)
    second = st.set_condition(first, "Running", "True", "GoalReached", "stopping", 2, T1)
    assert second == [
        {
            "type": "Running",
            "status": "True",
            "reason": "GoalReached",
            "message": "stopping",
            "lastTransitionTime": "2024-05-01T12:00:00Z",
            "observedGeneration": 2,
        }
    ]


def test_status_flip_moves_the_transition_time():
    first = st.set_condition([], "Running", True, "TrialsRunning", "", 1, T0)
    flipped = st.set_condition(first, "Running", False, "ExperimentSuspended", "", 1, T1)
    assert flipped[0]["status"] == "False" and flipped[0]["lastTransitionTime"] == "2024-05-01T12:05:00Z"


def test_set_condition_keeps_others_in_order_and_does_not_mutate():
    conditions = st.set_condition([], "Ready", True, "SpecValid", "", 1, T0)
    conditions = st.set_condition(conditions, "Running", True, "TrialsRunning", "", 1, T0)
    conditions = st.set_condition(conditions, "Suspended", False, "NotSuspended", "", 1, T0)
    before = copy.deepcopy(conditions)
    after = st.set_condition(conditions, "Running", False, "TrialsPending", "", 2, T1)
    assert conditions == before
    assert [c["type"] for c in after] == ["Ready", "Running", "Suspended"]
    assert after[0] == before[0] and after[2] == before[2]


def test_condition_without_generation_has_no_observed_generation():
    assert "observedGeneration" not in st.set_condition([], "Ready", True, "SpecValid", "", None, T0)[0]


@pytest.mark.parametrize(
    "status, reason",
    [("yes", "Fine"), ("True", "not camel"), ("True", "lowerStart"), ("True", ""), ("True", "Has Space")],
)
def test_set_condition_rejects_bad_status_and_reasons(status, reason):
    with pytest.raises(ValueError):
        st.set_condition([], "Ready", status, reason, "", 1, T0)


def test_messages_are_truncated_to_a_byte_bound():
    long = "é" * 2000  # 2 bytes each
    (condition,) = st.set_condition([], "Failed", True, "AllTrialsFailed", long, 1, T0)
    assert len(condition["message"].encode()) <= st.MAX_MESSAGE_BYTES
    assert condition["message"].endswith("...") and condition["message"].startswith("éé")
    assert st.truncate_message("short") == "short"
    assert st.truncate_message("x" * 10, 10) == "x" * 10 and st.truncate_message("x" * 11, 10) == "xxxxxxx..."


def test_get_condition():
    conditions = st.set_condition([], "Ready", True, "SpecValid", "", 1, T0)
    assert st.get_condition(conditions, "Ready")["reason"] == "SpecValid"
    assert st.get_condition(conditions, "Running") is None and st.get_condition(None, "Ready") is None


# ------------------------------------------------------------------ counts


def test_trial_counts():
    phases = ["Running", "Running", "Pending", None, "", "Paused", "Succeeded", "Failed", "Succeeded"]
    assert st.trial_counts(phases) == {"total": 9, "pending": 3, "running": 2, "paused": 1, "succeeded": 2, "failed": 1}
    assert st.trial_counts([]) == {"total": 0, "pending": 0, "running": 0, "paused": 0, "succeeded": 0, "failed": 0}
    with pytest.raises(ValueError):
        st.trial_counts(["Exploded"])


# ------------------------------------------------------------------ best trial


def make_trial(
    index: int, value=None, *, last_result=None, iteration=None, checkpoint=None, phase="Running", config=None
) -> dict:
    status = {"phase": phase}
    if value is not None:
        status["metricValue"] = value
    if last_result is not None:
        status["lastResult"] = last_result
    if iteration is not None:
        status["iteration"] = iteration
    if checkpoint:
        status["checkpoint"] = {"uri": checkpoint, "iteration": iteration}
    return {
        "metadata": {"name": f"exp-{index:05d}"},
        "spec": {"index": index, "config": config if config is not None else {"i": index}},
        "status": status,
    }


def test_best_trial_max_and_min():
    trials = [make_trial(0, 0.5), make_trial(1, 0.9, iteration=7, checkpoint="s3://b/ck7"), make_trial(2, 0.1)]
    assert st.best_trial(trials, "acc", "max") == {
        "name": "exp-00001",
        "metricValue": 0.9,
        "iteration": 7,
        "checkpoint": "s3://b/ck7",
        "config": {"i": 1},
    }
    assert st.best_trial(trials, "acc", "min")["name"] == "exp-00002"


def test_best_trial_ties_go_to_the_earliest_trial():
    trials = [make_trial(5, 0.7), make_trial(2, 0.7), make_trial(9, 0.7)]
    for trial, name in zip(trials, ("a", "z", "b")):  # names sort unlike indexes
        trial["metadata"]["name"] = name
    assert st.best_trial(trials, "acc", "max")["name"] == "z"
    assert st.best_trial(list(reversed(trials)), "acc", "min")["name"] == "z"


def test_best_trial_reads_last_result_when_metric_value_is_missing():
    trials = [
        make_trial(0, last_result={"acc": 0.3}),
        make_trial(1, last_result={"eval": {"acc": 0.8}}),
        make_trial(2, last_result={"acc": 0.6}),
    ]
    assert st.best_trial(trials, "acc", "max")["name"] == "exp-00002"
    assert st.best_trial(trials, "eval/acc", "max")["metricValue"] == 0.8


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, True, "0.9", None, 10**400])
def test_best_trial_ignores_values_that_are_not_finite_numbers(bad):
    trials = [make_trial(0, 0.2), make_trial(1, last_result={"acc": bad})]
    trials[1]["status"]["metricValue"] = bad
    assert st.best_trial(trials, "acc", "max")["name"] == "exp-00000"
    assert st.best_trial(trials, "acc", "min")["name"] == "exp-00000"


def test_best_trial_is_none_without_values_and_checks_mode():
    assert st.best_trial([make_trial(0), {"metadata": {"name": "x"}}], "acc", "max") is None
    with pytest.raises(ValueError):
        st.best_trial([make_trial(0, 1.0)], "acc", "maximum")


def test_best_trial_leaves_out_a_large_config():
    huge = {"weights": list(range(5000))}
    best = st.best_trial([make_trial(0, 1.0, config=huge)], "acc", "max")
    assert best == {"name": "exp-00000", "metricValue": 1.0}


def test_best_trial_scope_all_ranks_each_trials_best_value_and_falls_back_to_the_last():
    """Ray's ``get_best_trial(scope="all")``: the best value at any iteration (``status.metricRange``), by mode."""
    trials = [make_trial(0, 0.5), make_trial(1, 0.4), make_trial(2, 0.3)]
    trials[0]["status"]["metricRange"] = {"loss": {"min": 0.5, "max": 0.9}}
    trials[1]["status"]["metricRange"] = {"loss": {"min": 0.1, "max": 0.4}}  # its last value is not its best
    assert st.best_trial(trials, "loss", "min")["name"] == "exp-00002"
    assert st.best_trial(trials, "loss", "min", "all") == {"name": "exp-00001", "metricValue": 0.1, "config": {"i": 1}}
    assert st.best_trial(trials, "loss", "max", "all")["metricValue"] == 0.9
    assert st.best_trial(trials[2:], "loss", "min", "all")["metricValue"] == 0.3  # no range yet: its last value


def test_a_metric_range_takes_every_results_numbers_metric_first_bounded_and_in_any_order():
    results = [
        {"training_iteration": 1, "acc": 0.5, "loss": 0.9, "eval": {"f1": 0.2}, "done": False, "ok": True},
        {"training_iteration": 2, "acc": 0.75, "loss": math.nan, "note": "text", "time_total_s": 3.0},
        {"training_iteration": 3, "acc": 0.25, "loss": 0.4, "eval": {"f1": 0.6}},
    ]
    ranges = st.widen_range(None, results, "loss")
    assert ranges == {
        "loss": {"min": 0.4, "max": 0.9},
        "acc": {"min": 0.25, "max": 0.75},
        "eval/f1": {"min": 0.2, "max": 0.6},
    }
    assert list(ranges)[0] == "loss"  # Ray's auto-filled keys, done, bools, strings and NaN left out
    assert st.widen_range(ranges, results[::-1], "loss") == ranges  # taken again, in another order: the same
    assert (
        st.merge_ranges(st.widen_range(None, results[:1], "loss"), st.widen_range(None, results[1:], "loss")) == ranges
    )
    many = {f"k{i:02d}": float(i) for i in range(40)}
    wide = st.widen_range(None, [many, {"loss": 1.0}], "loss")
    assert len(wide) == st.MAX_RANGE_KEYS and "loss" not in wide  # a key first seen once the range is full
    assert list(st.widen_range(None, [{"loss": 1.0, **many}], "loss"))[0] == "loss"


def test_metric_value():
    assert st.metric_value({"acc": 1}, "acc") == 1.0 and isinstance(st.metric_value({"acc": 1}, "acc"), float)
    assert st.metric_value({"a": {"b": {"c": 2.5}}}, "a/b/c") == 2.5
    assert st.metric_value({"a/b": 3.0, "a": {"b": 4.0}}, "a/b") == 3.0
    assert st.metric_value({"acc": False}, "acc") is None
    assert st.metric_value(None, "acc") is None and st.metric_value({}, "acc") is None


@pytest.mark.parametrize(
    "text, seconds", [("1h30m", 5400), ("45m", 2700), ("90s", 90), ("1.5h", 5400), ("2h0m30s", 7230), ("0.25s", 0.25)]
)
def test_parse_duration(text, seconds):
    assert st.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "1d", "1h 30m", "h", "-1h", "1.h", "1H"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        st.parse_duration(text)


# ------------------------------------------------------------------ experiment phase


def counts(**kw) -> dict:
    c = dict.fromkeys(("pending", "running", "paused", "succeeded", "failed"), 0)
    c.update(kw)
    c["total"] = sum(c.values())
    return c


@pytest.mark.parametrize(
    "c, kwargs, phase, reason, stop",
    [
        (counts(), {}, "Pending", "TrialsPending", False),
        (counts(pending=4), {}, "Pending", "TrialsPending", False),
        (counts(pending=3, running=1), {}, "Running", "TrialsRunning", False),
        (counts(pending=2, succeeded=1), {}, "Running", "TrialsRunning", False),
        (counts(paused=2), {}, "Running", "TrialsRunning", False),
        (counts(running=2), {"suspended": True}, "Suspended", "ExperimentSuspended", False),
        (counts(running=2), {"search_finished": True}, "Running", "TrialsRunning", False),
        (counts(succeeded=3, failed=1), {"search_finished": True}, "Succeeded", "AllTrialsCompleted", True),
        (counts(failed=3), {"search_finished": True}, "Failed", "AllTrialsFailed", True),
        (counts(), {"search_finished": True}, "Succeeded", "AllTrialsCompleted", True),
        (counts(running=2, succeeded=1), {"goal_reached": True}, "Running", "GoalReached", True),
        (counts(succeeded=3), {"goal_reached": True}, "Succeeded", "GoalReached", True),
        (counts(running=1), {"time_budget_exhausted": True}, "Running", "TimeBudgetExhausted", True),
        (counts(succeeded=1, failed=1), {"time_budget_exhausted": True}, "Succeeded", "TimeBudgetExhausted", True),
        (counts(running=1, failed=2), {"max_failed_trials": 2}, "Running", "TrialsRunning", False),
        (counts(running=1, failed=3), {"max_failed_trials": 2}, "Running", "MaxFailedTrialsExceeded", True),
        (counts(failed=1), {"max_failed_trials": 0}, "Failed", "MaxFailedTrialsExceeded", True),
        (
            counts(failed=1, succeeded=1),
            {"max_failed_trials": 0, "goal_reached": True},
            "Succeeded",
            "GoalReached",
            True,
        ),
        (counts(paused=1), {"suspended": True, "goal_reached": True}, "Running", "GoalReached", True),
        (counts(succeeded=2), {"suspended": True, "search_finished": True}, "Succeeded", "AllTrialsCompleted", True),
    ],
)
def test_experiment_phase(c, kwargs, phase, reason, stop):
    decision = st.experiment_phase(c, **kwargs)
    assert (decision.phase, decision.reason, decision.stop_remaining) == (phase, reason, stop)
    assert decision.phase in st.EXPERIMENT_PHASES and decision.message


def test_ending_with_active_trials_says_how_many_are_stopped():
    decision = st.experiment_phase(counts(running=2, paused=1, pending=1), goal_reached=True)
    assert "stopping 4 trials" in decision.message


def test_experiment_conditions_follow_the_phase():
    running = st.experiment_phase(counts(running=1))
    conditions = st.set_condition([], "Ready", True, "SpecValid", "", 1, T0)
    conditions = st.experiment_conditions(conditions, running, 1, T0)
    assert {c["type"]: c["status"] for c in conditions} == {"Ready": "True", "Running": "True", "Suspended": "False"}

    suspended = st.experiment_phase(counts(paused=1), suspended=True)
    conditions = st.experiment_conditions(conditions, suspended, 2, T1)
    by_type = {c["type"]: c for c in conditions}
    assert by_type["Running"]["status"] == "False" and by_type["Suspended"]["status"] == "True"
    assert by_type["Suspended"]["reason"] == "ExperimentSuspended"
    assert by_type["Suspended"]["lastTransitionTime"] == st.format_time(T1)
    assert by_type["Ready"]["lastTransitionTime"] == st.format_time(T0)

    done = st.experiment_phase(counts(succeeded=1), search_finished=True)
    conditions = st.experiment_conditions(conditions, done, 2, T1)
    by_type = {c["type"]: c for c in conditions}
    assert by_type["Complete"]["status"] == "True" and by_type["Complete"]["reason"] == "AllTrialsCompleted"
    assert "Failed" not in by_type
    assert by_type["Running"]["status"] == by_type["Suspended"]["status"] == "False"
    assert validate(conditions, _status_schema("Experiment")["properties"]["conditions"]) == []


def test_failed_experiment_gets_the_failed_condition():
    failed = st.experiment_phase(counts(failed=2), max_failed_trials=1)
    by_type = {c["type"]: c for c in st.experiment_conditions([], failed, 1, T0)}
    assert by_type["Failed"]["status"] == "True" and by_type["Failed"]["reason"] == "MaxFailedTrialsExceeded"
    assert "Complete" not in by_type


# ------------------------------------------------------------------ status assembly and size


def test_experiment_status_leaves_out_none_and_checks_phase():
    s = st.experiment_status(phase="Pending", conditions=[], observed_generation=1, counts=counts())
    assert s == {"phase": "Pending", "conditions": [], "observedGeneration": 1, "trials": counts()}
    with pytest.raises(ValueError):
        st.experiment_status(phase="Done", conditions=[], observed_generation=1, counts=counts())


def test_status_of_ten_thousand_trials_stays_under_16_kib():
    phases = ["Succeeded", "Failed", "Running", "Paused", "Pending"]
    big_config = {"note": "é" * 400, "layers": list(range(300))}  # just under the best-config bound
    assert st.MAX_BEST_CONFIG_BYTES - 400 < len(json.dumps(big_config).encode()) < st.MAX_BEST_CONFIG_BYTES
    trials = [
        make_trial(
            i,
            (i * 7919 % 10007) / 10007,
            iteration=i % 100,
            phase=phases[i % 5],
            checkpoint=f"s3://{'b' * 500}/{'p' * 500}/ns/exp/exp-{i:05d}/checkpoint_{i:06d}",
            config=big_config,
        )
        for i in range(10_000)
    ]
    c = st.trial_counts(t["status"]["phase"] for t in trials)
    best = st.best_trial(trials, "acc", "max")
    assert c["total"] == 10_000 and best["config"] == big_config
    conditions: list = []
    long = "trial exp-00001 failed: " + "Traceback ... " * 5000
    for type_ in st.CONDITION_TYPES:
        conditions = st.set_condition(conditions, type_, True, "SomeVeryLongCamelCaseReasonName", long, 10**9, T0)
    status = st.experiment_status(
        phase="Running",
        conditions=conditions,
        observed_generation=10**9,
        counts=c,
        best=best,
        start_time=st.format_time(T0),
        completion_time=st.format_time(T1),
    )
    for ascii_only in (True, False):
        size = len(json.dumps(status, ensure_ascii=ascii_only).encode())
        assert size < 16 * 1024, size
    assert validate(status, _status_schema("Experiment"), ".status") == []


# ------------------------------------------------------------------ compact results


def test_compact_result_keeps_scalars_and_drops_bookkeeping():
    result = {
        "acc": 0.9,
        "loss": float("nan"),
        "training_iteration": 3,
        "time_total_s": 1.5,
        "done": False,
        "config": {"lr": 0.1},
        "hostname": "node-1",
        "pid": 7,
        "date": "2024-05-01_12-00-00",
        "eval": {"f1": 0.7, "cm": [[1, 0], [0, 1]]},
        "note": "ok",
        "blob": "z" * 1000,
        "inf": math.inf,
        "steps": 10**30,
    }
    assert st.compact_result(result, "acc") == {
        "acc": 0.9,
        "training_iteration": 3,
        "time_total_s": 1.5,
        "done": False,
        "eval/f1": 0.7,
        "note": "ok",
    }


def test_compact_result_is_bounded_and_keeps_the_metric_and_progress_first():
    result = {f"m{i:04d}": float(i) for i in range(2000)}
    result.update({"zz_metric": 1.0, "training_iteration": 9})
    compact = st.compact_result(result, "zz_metric")
    assert len(json.dumps(compact, separators=(",", ":")).encode()) <= st.MAX_RESULT_BYTES
    assert list(compact)[:2] == ["zz_metric", "training_iteration"]
    assert len(compact) > 50
    assert validate(compact, _status_schema("Trial")["properties"]["lastResult"]) == []


# ------------------------------------------------------------------ patches


def test_status_patch_is_none_when_nothing_changed():
    s = {"phase": "Running", "trials": {"running": 1}, "conditions": [{"type": "Ready"}]}
    assert st.status_patch(s, copy.deepcopy(s)) is None
    assert st.status_patch(None, {}) is None and st.status_patch({}, None) is None


def test_status_patch_carries_only_changes():
    old = {"phase": "Running", "trials": {"running": 2, "succeeded": 1}, "bestTrial": {"name": "a", "metricValue": 1}}
    new = {"phase": "Running", "trials": {"running": 1, "succeeded": 2}, "bestTrial": {"name": "a", "metricValue": 1}}
    assert st.status_patch(old, new) == {"trials": {"running": 1, "succeeded": 2}}


def test_status_patch_deletes_what_new_leaves_out():
    old = {
        "phase": "Running",
        "bestTrial": {"name": "a", "checkpoint": "s3://x", "config": {"lr": 1}},
        "searcherState": {"i": 1},
    }
    new = {"phase": "Running", "bestTrial": {"name": "a", "config": {}}, "completionTime": None}
    assert st.status_patch(old, new) == {
        "bestTrial": {"checkpoint": None, "config": {"lr": None}},
        "searcherState": None,
    }


def test_status_patch_replaces_lists_and_new_objects_whole():
    old = {"conditions": [{"type": "Ready", "status": "True"}]}
    new = {"conditions": [{"type": "Ready", "status": "False"}], "bestTrial": {"name": "b", "checkpoint": None}}
    assert st.status_patch(old, new) == {
        "conditions": [{"type": "Ready", "status": "False"}],
        "bestTrial": {"name": "b"},
    }


def test_status_patch_tells_booleans_from_numbers():
    assert st.status_patch({"x": 1}, {"x": True}) == {"x": True}
    assert st.status_patch({"x": 1}, {"x": 1.0}) is None


def test_status_patch_applied_as_a_merge_patch_gives_new():
    def apply(target, patch):
        out = copy.deepcopy(target)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = apply(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
        return out

    old = {
        "phase": "Running",
        "trials": {"running": 3, "paused": 1},
        "bestTrial": {"name": "a", "iteration": 3},
        "conditions": [{"type": "Running"}],
        "searcherState": {"seen": [1, 2], "rng": {"s": 1}},
    }
    new = {
        "phase": "Succeeded",
        "trials": {"running": 0, "paused": 0, "succeeded": 4},
        "bestTrial": {"name": "b", "metricValue": 2.0},
        "conditions": [{"type": "Running"}, {"type": "Complete"}],
        "searcherState": {"seen": [1, 2, 3], "rng": {}},
        "completionTime": "2024-05-01T12:05:00Z",
    }
    assert apply(old, st.status_patch(old, new)) == new


# ----------------------------------------------------------------------------- Pareto front


def moo_trial(index, loss, latency, phase="Succeeded", name=None):
    result = {k: v for k, v in (("loss", loss), ("latency", latency)) if v is not None}
    return {
        "metadata": {"name": name or f"exp-{index:05d}"},
        "spec": {"index": index},
        "status": {"phase": phase, "lastResult": result},
    }


def front_names(trials, modes=("min", "min")):
    return [p["trial"] for p in st.pareto_front(trials, ["loss", "latency"], list(modes))]


def test_pareto_front_keeps_the_non_dominated_trials_in_index_order():
    trials = [
        moo_trial(3, 1.0, 5.0),
        moo_trial(0, 2.0, 2.0),
        moo_trial(1, 3.0, 3.0),  # dominated by 0
        moo_trial(2, 5.0, 1.0),
        moo_trial(4, 2.0, 6.0),  # dominated by 0 (equal loss, worse latency)
    ]
    assert front_names(trials) == ["exp-00000", "exp-00002", "exp-00003"]
    assert st.pareto_front(trials, ["loss", "latency"], ["min", "min"])[0] == {
        "trial": "exp-00000",
        "values": [2.0, 2.0],
    }


def test_pareto_front_follows_each_objectives_mode():
    trials = [moo_trial(0, 1.0, 1.0), moo_trial(1, 2.0, 2.0)]
    assert front_names(trials, ("min", "min")) == ["exp-00000"]
    assert front_names(trials, ("max", "max")) == ["exp-00001"]
    assert front_names(trials, ("min", "max")) == ["exp-00000", "exp-00001"]


def test_pareto_front_keeps_ties_and_leaves_out_what_it_cannot_compare():
    trials = [
        moo_trial(0, 1.0, 1.0),
        moo_trial(1, 1.0, 1.0),  # a tie: neither dominates
        moo_trial(2, math.nan, 0.0),
        moo_trial(3, -math.inf, 5.0),
        moo_trial(4, 0.5, None),  # a missing objective
        moo_trial(5, 0.0, 0.0, phase="Running"),
        moo_trial(6, 0.0, 0.0, phase="Failed"),
        moo_trial(7, True, 0.0),  # not a number
    ]
    assert front_names(trials) == ["exp-00000", "exp-00001"]
    assert st.pareto_front([], ["loss", "latency"], ["min", "min"]) == []
    with pytest.raises(ValueError, match="mode"):
        st.pareto_front(trials, ["loss", "latency"], ["min", "lowest"])


def test_pareto_status_is_bounded_and_counts_the_whole_front():
    # 8 objectives on a hyperplane: every one of 500 trials is on the front
    metrics = [f"objective_{i}" for i in range(8)]
    trials = [
        {
            "metadata": {"name": f"a-rather-long-experiment-name-{i:05d}"},
            "spec": {"index": i},
            "status": {
                "phase": "Succeeded",
                "lastResult": {m: i / 7 + j * 1e-3 if j == 0 else (500 - i) / 3.3 for j, m in enumerate(metrics)},
            },
        }
        for i in range(500)
    ]
    front = st.pareto_front(trials, metrics, ["min"] * 8)
    assert len(front) == 500
    shown = st.pareto_status(front)
    assert shown["count"] == 500 and len(shown["trials"]) == st.MAX_PARETO_TRIALS
    assert [p["trial"] for p in shown["trials"]] == [f"a-rather-long-experiment-name-{i:05d}" for i in range(20)]
    assert st.pareto_status([]) is None
    status = st.experiment_status(
        phase="Running", conditions=[], observed_generation=1, counts=st.trial_counts(["Succeeded"] * 500), pareto=shown
    )
    assert len(json.dumps(status).encode()) < 16 * 1024
    assert validate(status, root_schema("Experiment")["properties"]["status"]) == []
