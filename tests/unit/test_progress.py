"""kubetune.sdk.progress: the status table of an Experiment, as plain lines, as a rich table and live."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import pytest
from rich.console import Console

from kubetune.sdk.progress import (
    StatusTable,
    format_duration,
    format_value,
    headline,
    phase_counts,
    searched_keys,
    status_lines,
    status_renderable,
)

NOW = datetime(2024, 5, 1, 12, 1, 5, tzinfo=timezone.utc)
SPACE = {
    "lr": {"loguniform": [1e-4, 0.1]},
    "model": {"layers": {"choice": [1, 2, 3]}, "act": "relu"},
    "batch_size": 32,
    "grid": {"grid_search": [1, 2]},
}


def experiment(phase="Running", best=None, conditions=None, metric="mean_accuracy", **status):
    spec = {"config": SPACE, "metric": metric, "mode": "max"} if metric else {"config": SPACE}
    body = {"metadata": {"name": "digits"}, "spec": spec, "status": {"phase": phase, **status}}
    if best:
        body["status"]["bestTrial"] = best
    if conditions:
        body["status"]["conditions"] = conditions
    return body


def trial(index, phase="Running", acc=None, **status):
    body = {
        "metadata": {"name": f"digits-{index}"},
        "spec": {
            "experiment": "digits",
            "index": index,
            "tag": f"{index}_lr=0.001",
            "config": {
                "lr": 0.00123456,
                "model": {"layers": index % 3 + 1, "act": "relu"},
                "batch_size": 32,
                "grid": 1,
            },
        },
        "status": {"phase": phase, **status},
    }
    if acc is not None:
        body["status"].update(
            iteration=index + 1,
            metricValue=acc,
            lastResult={
                "mean_accuracy": acc,
                "mean_loss": 1 - acc,
                "time_total_s": 1.5 * (index + 1),
                "training_iteration": index + 1,
                "info/gpu": "0",
            },
        )
    return body


def rows(lines):
    """The trial rows of status_lines' output: after the rule, before a "... more" line."""
    rule = next(i for i, line in enumerate(lines) if set(line) <= {"-", " "} and line)
    return [line for line in lines[rule + 1 :] if not line.startswith("...")]


def names(lines):
    return [row.split()[0] for row in rows(lines)]


def test_searched_keys_are_the_domains_nested_as_a_slash_b():
    assert searched_keys(SPACE) == ["lr", "model/layers", "grid"]
    assert searched_keys({"a": {"b": 1}, "c": {"notadomain": [1]}, "d": {"uniform": [0, 1], "x": 1}}) == []


def test_sample_from_columns_show_the_values_drawn_and_pbt_columns_the_current_config():
    marker = {"kubetune/pickled_function": "s3://b/p/ns/digits/sdk/functions/f.pkl"}
    assert searched_keys({"lr": {"uniform": [0, 1]}, "n": {"seed": marker}, "c": 1}) == ["lr", "n/seed"]
    exp = experiment()
    exp["spec"]["config"] = {**SPACE, "seed": marker}
    waiting, drawn = trial(0), trial(1, config={"lr": 0.5, "model": {"layers": 3}, "grid": 2, "seed": 0.75})
    waiting["spec"]["config"]["seed"] = drawn["spec"]["config"]["seed"] = marker
    lines = status_lines(exp, [waiting, drawn], now=NOW)
    assert lines[1].split()[3:7] == ["lr", "model/layers", "grid", "seed"]
    assert [row.split()[2:] for row in rows(lines)] == [["0.001235", "1", "1"], ["0.5", "3", "2", "0.75"]]


def test_format_value_and_duration():
    assert format_value(0.123456) == "0.1235"
    assert format_value(1.0e-5) == "1e-05"
    assert format_value(12) == "12" and format_value(None) == "" and format_value(True) == "True"
    assert format_duration(3725.9) == "1:02:05"


def test_columns_are_name_status_searched_keys_iter_time_metric_and_metric_columns():
    lines = status_lines(experiment(), [trial(0, acc=0.91234)], metric_columns=["mean_loss", "info/gpu"], now=NOW)
    assert lines[1].split() == [
        "Trial",
        "name",
        "status",
        "lr",
        "model/layers",
        "grid",
        "iter",
        "total",
        "time",
        "(s)",
        "mean_accuracy",
        "mean_loss",
        "info/gpu",
    ]
    assert "batch_size" not in lines[1] and "model/act" not in lines[1]
    assert rows(lines)[0].split() == [
        "digits-0",
        "Running",
        "0.001235",
        "1",
        "1",
        "1",
        "1.50",
        "0.9123",
        "0.08766",
        "0",
    ]


def test_metric_columns_take_titles_from_a_dict_and_the_metric_is_not_repeated():
    lines = status_lines(
        experiment(), [trial(0, acc=0.5)], metric_columns={"mean_loss": "loss", "mean_accuracy": "acc"}
    )
    header = lines[1].split()
    assert header[-2:] == ["mean_accuracy", "loss"] and "acc" not in header


def test_several_objectives_get_a_column_each():
    multi = experiment(metric=None)
    multi["spec"]["objectives"] = [{"metric": "mean_accuracy", "mode": "max"}, {"metric": "latency", "mode": "min"}]
    row = trial(0)
    row["status"].update(iteration=1, lastResult={"mean_accuracy": 0.75, "latency": 12, "time_total_s": 1.0})
    lines = status_lines(multi, [row, trial(1)], metric_columns=["latency", "extra"], max_rows=1)
    assert lines[1].split()[-3:] == ["mean_accuracy", "latency", "extra"]
    assert rows(lines)[0].split()[-2:] == ["0.75", "12"]


def test_without_a_metric_there_is_no_metric_column():
    lines = status_lines(experiment(metric=None), [trial(0, acc=0.5)])
    assert lines[1].split()[-4:] == ["iter", "total", "time", "(s)"]


def test_numbers_are_right_aligned_and_missing_values_blank():
    lines = status_lines(experiment(), [trial(0, acc=0.5), trial(11, "Pending")])
    header, first = lines[1], rows(lines)[0]  # Pending sorts before Running
    assert first.startswith("digits-11") and first.split() == ["digits-11", "Pending", "0.001235", "3", "1"]
    running = rows(lines)[1]
    assert running.rindex("0.5") + len("0.5") == header.index("mean_accuracy") + len("mean_accuracy")
    assert all(line == line.rstrip() for line in lines)


def test_rows_sort_by_status_as_ray_then_by_name_numerically():
    trials = [
        trial(10, "Succeeded", 0.5),
        trial(2, "Succeeded", 0.6),
        trial(3, "Running", 0.1),
        trial(4, "Pending"),
        trial(5, "Paused", 0.2),
        trial(6, "Failed", reason="Error", message="boom"),
        trial(1, "Running", 0.3),
    ]
    assert names(status_lines(experiment(), trials)) == [
        "digits-6",
        "digits-5",
        "digits-4",
        "digits-1",
        "digits-3",
        "digits-2",
        "digits-10",
    ]


def test_row_limit_shows_the_best_and_the_running_then_every_phase_in_turns():
    trials = (
        [trial(i, "Succeeded", 0.5 + i / 100) for i in range(20)]
        + [trial(20 + i, "Pending") for i in range(5)]
        + [trial(30, "Running", 0.1), trial(31, "Running", 0.2)]
        + [trial(40, "Failed", reason="Error")]
    )
    exp = experiment(best={"name": "digits-3", "metricValue": 0.53})
    lines = status_lines(exp, trials, max_rows=7)
    # Failed, Pending and Succeeded (its best first) take turns for the rows the best and running leave.
    assert names(lines) == ["digits-40", "digits-20", "digits-21", "digits-30", "digits-31", "digits-3", "digits-19"]
    assert lines[-1] == "... 21 more trials not shown (3 Pending, 18 Succeeded)"
    assert len(names(status_lines(exp, trials, max_rows=None))) == len(trials)
    assert not status_lines(exp, trials, max_rows=len(trials))[-1].startswith("...")


def test_row_limit_smaller_than_the_running_trials_keeps_the_best_first():
    trials = [trial(i, "Running", 0.1 * i) for i in range(5)]
    lines = status_lines(experiment(best={"name": "digits-4", "metricValue": 0.4}), trials, max_rows=2)
    assert names(lines) == ["digits-0", "digits-4"]
    assert lines[-1] == "... 3 more trials not shown (3 Running)"


def test_failed_and_stopped_trials_get_their_reason_and_the_last_line_of_the_message():
    trace = 'Traceback (most recent call last):\n  File "train.py", line 3\n' + "ValueError: " + "x" * 100 + "\n"
    trials = [
        trial(0, "Failed", reason="Error", message=trace),
        trial(1, "Succeeded", 0.9, reason="EarlyStopped"),
        trial(2, "Running", 0.5, reason="Running"),
        trial(3, "Pending", reason="Retrying", message="OOMKilled"),
    ]
    lines = status_lines(experiment(), trials)
    assert lines[1].split()[-1] == "reason"
    by_name = {row.split()[0]: row for row in rows(lines)}
    failed = by_name["digits-0"]
    assert "Error: ValueError: xxx" in failed and failed.endswith("...") and len(failed.split("  ")[-1]) <= 60
    assert by_name["digits-1"].endswith("EarlyStopped")
    assert by_name["digits-2"].endswith("0.5")  # "Running" repeats the phase: no reason
    assert by_name["digits-3"].endswith("Retrying: OOMKilled")


def test_no_reason_column_when_no_trial_has_one():
    assert "reason" not in status_lines(experiment(), [trial(0, acc=0.5, reason="Running")])[1]


def test_headline_counts_phases_and_shows_elapsed_time_and_best_trial():
    exp = experiment(best={"name": "digits-3", "metricValue": 0.971234})
    exp["metadata"]["creationTimestamp"] = "2024-05-01T12:00:00Z"
    trials = [trial(0, "Running", 0.5), trial(1, "Succeeded", 0.9), trial(3, "Succeeded", 0.97), trial(4, "Pending")]
    assert headline(exp, trials, NOW) == (
        "Experiment digits: Running | 4 trials: 1 pending, 1 running, "
        "2 succeeded | elapsed 0:01:05 | best mean_accuracy 0.9712 (digits-3)"
    )
    exp["status"].update(phase="Succeeded", completionTime="2024-05-01T12:00:30Z")
    assert "elapsed 0:00:30 " in headline(exp, trials, NOW)


def test_headline_without_trials_counts_from_the_experiment_status():
    exp = experiment(phase="Pending", trials={"total": 3, "pending": 2, "running": 1})
    assert headline(exp, []) == "Experiment digits: Pending | 3 trials: 2 pending, 1 running"
    assert phase_counts([trial(0), trial(1, "Failed")]) == {
        "Pending": 0,
        "Running": 1,
        "Paused": 0,
        "Succeeded": 0,
        "Failed": 1,
    }


def test_noteworthy_conditions_follow_the_headline():
    conditions = [
        {"type": "Ready", "status": "True", "reason": "Accepted", "message": "ok"},
        {"type": "Running", "status": "True", "reason": "TrialsRunning", "message": "2 running"},
        {
            "type": "TrialsWaiting",
            "status": "True",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        },
    ]
    lines = status_lines(experiment(conditions=conditions), [trial(0)])
    assert lines[1] == "TrialsWaiting (Unschedulable): 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert lines[2].startswith("Trial name")


def render(renderable, width=200):
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_the_rich_table_shows_the_same_view():
    trials = [trial(i, "Succeeded", 0.5 + i / 100) for i in range(4)] + [
        trial(9, "Failed", reason="Error", message="RuntimeError: CUDA out of memory")
    ]
    exp = experiment(best={"name": "digits-3", "metricValue": 0.53})
    text = render(status_renderable(exp, trials, metric_columns={"mean_loss": "loss"}, max_rows=3, now=NOW))
    lines = text.splitlines()
    assert lines[0].startswith("Experiment digits: Running | 5 trials: 4 succeeded, 1 failed")
    header = lines[1]
    for title in (
        "Trial name",
        "status",
        "lr",
        "model/layers",
        "grid",
        "iter",
        "total time (s)",
        "mean_accuracy",
        "loss",
        "reason",
    ):
        assert title in header
    assert "batch_size" not in text and "mean_loss" not in text
    shown = [line.split()[0] for line in lines[3:] if line.strip().startswith("digits-")]
    assert shown == ["digits-9", "digits-2", "digits-3"]
    assert "Error: RuntimeError: CUDA out of memory" in text and "0.53" in text and "1.50" not in text
    assert lines[-1] == "... 2 more trials not shown (2 Succeeded)"


def test_on_a_narrow_console_titles_and_reasons_give_way_and_the_values_stay_whole():
    trials = [trial(0, acc=0.91234), trial(1, "Failed", reason="Error", message="ValueError: went badly wrong")]
    text = render(status_renderable(experiment(), trials, metric_columns=["mean_loss"]), width=95)
    assert max(len(line) for line in text.splitlines()) <= 95
    assert "mean_accuracy" not in text  # its title is cut
    for value in ("digits-0", "digits-1", "0.001235", "0.9123", "0.08766"):
        assert value in text


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def plain_console():
    return Console(file=io.StringIO(), width=300, force_terminal=False, force_jupyter=False)


def test_off_a_terminal_the_headline_is_printed_at_most_every_interval_and_the_table_at_the_end():
    console, clock = plain_console(), FakeClock()
    table = StatusTable(console=console, interval_s=5.0, clock=clock)
    for t, phase in [(0, "Pending"), (1, "Running"), (4.9, "Running"), (5.0, "Running"), (7, "Running")]:
        clock.now = t
        table.update(experiment(phase), [trial(0, "Running" if phase == "Running" else "Pending")])
    out = console.file.getvalue().splitlines()
    assert out == ["Experiment digits: Pending | 1 trial: 1 pending", "Experiment digits: Running | 1 trial: 1 running"]
    clock.now = 8
    table.update(experiment("Succeeded"), [trial(0, "Succeeded", 0.9)])  # the end: printed whatever the interval
    table.update(experiment("Succeeded"), [trial(0, "Succeeded", 0.9)])
    table.close()
    out = console.file.getvalue().splitlines()
    assert out[2] == "Experiment digits: Succeeded | 1 trial: 1 succeeded"
    assert out[3].startswith("Trial name") and out[5].startswith("digits-0") and len(out) == 6


def test_off_a_terminal_close_prints_the_last_state_as_a_table_once():
    console, clock = plain_console(), FakeClock()
    with StatusTable(console=console, clock=clock) as table:
        table.update(experiment(), [trial(0, acc=0.5)])
        clock.now = 1
        table.update(experiment(), [trial(0, acc=0.6)])  # within the interval: nothing printed yet
    out = console.file.getvalue().splitlines()
    assert out[0].startswith("Experiment digits: Running") and out[1].startswith("Experiment digits: Running")
    assert out[2].startswith("Trial name") and "0.6" in out[4] and len(out) == 5


def test_intermediate_tables_print_the_whole_table_every_interval():
    console, clock = plain_console(), FakeClock()
    with StatusTable(console=console, clock=clock, interval_s=2, intermediate_tables=True) as table:
        for t in (0, 1, 2):
            clock.now = t
            table.update(experiment(), [trial(0, acc=0.5)])
    out = console.file.getvalue().splitlines()
    assert sum(line.startswith("Trial name") for line in out) == 2  # at 0 and 2; close has nothing new


def test_on_a_terminal_the_table_repaints_in_place_and_stays(monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    console = Console(file=io.StringIO(), width=200, force_terminal=True, force_jupyter=False)
    with StatusTable(console=console, metric_columns=["mean_loss"]) as table:
        table.update(experiment(), [trial(0, "Pending")])
        table.update(experiment("Succeeded"), [trial(0, "Succeeded", 0.875)])
    out = console.file.getvalue()
    assert "\x1b[" in out  # cursor control: repainted in place
    assert "Experiment digits: Succeeded" in out and "0.875" in out and "mean_loss" in out


@pytest.mark.parametrize("max_rows", [0, 1])
def test_tiny_row_limits(max_rows):
    trials = [trial(i, "Succeeded", 0.5) for i in range(3)]
    lines = status_lines(experiment(), trials, max_rows=max_rows)
    assert len(names(lines)) == max_rows
    assert lines[-1] == f"... {3 - max_rows} more trials not shown ({3 - max_rows} Succeeded)"
    assert status_lines(experiment(), trials[:2], max_rows=1)[-1] == "... 1 more trial not shown (1 Succeeded)"
