"""``python -m kubetune.runtime`` as a real subprocess: loading, restore, result log, signals, failures, collector.

Storage is file:// here (the S3 path of the same code runs in test_runtime_s3.py against moto).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import cloudpickle
import pytest
from conftest_runtime import Collector, free_port, run_runtime, runtime_env, start_runtime, wait_for

import kubetune
from kubetune import shipping
from kubetune.checkpoint_store import latest_committed, list_checkpoints
from kubetune.env import CheckpointPolicy
from kubetune.shipping import FUNCTION_KEY, dumps
from kubetune.storage import open_storage

#: The trainables of these tests; run as inline source, or imported as module ``kt_test_trainables``.
TRAINABLES = '''
import json, os, time
import kubetune


class Counter(kubetune.Trainable):
    """Adds config["inc"] each step. Options: step_s (sleep per step), flag_at/flag (create the file flag
    at that iteration), slow_at/slow_flag (one very slow step that first creates slow_flag),
    fail_at/fail_flag (raise once, creating fail_flag)."""

    def setup(self, config):
        self.total = 0

    def step(self):
        c, it = self.config, self.iteration + 1
        if c.get("fail_at") == it and not os.path.exists(c["fail_flag"]):
            open(c["fail_flag"], "w").close()
            raise RuntimeError(f"boom at iteration {it}")
        if c.get("slow_at") == it:
            open(c["slow_flag"], "w").close()
            time.sleep(600)
        if c.get("flag_at") == it:
            open(c["flag"], "w").close()
        time.sleep(c.get("step_s", 0))
        self.total += c.get("inc", 1)
        return {"total": self.total, "nested": {"score": self.total * 10}}

    def save_checkpoint(self, checkpoint_dir):
        path = os.path.join(checkpoint_dir, "state.json")
        with open(path, "w") as f:
            json.dump({"total": self.total}, f)
        return path

    def load_checkpoint(self, path):
        with open(path) as f:
            self.total = json.load(f)["total"]
'''


def _storage(tmp_path):
    uri = f"file://{tmp_path / 'store'}/ns/exp/trial-0"
    return open_storage(uri), uri


def _lines(storage, trial_dir: str) -> list[dict]:
    return [json.loads(line) for line in storage.get_bytes(f"{trial_dir}/result.json").decode().splitlines()]


def _source(**kw):
    return {"source": TRAINABLES, "name": "Counter", **kw}


def test_inline_source_runs_to_the_stop_criterion_and_writes_the_trial_dir(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"inc": 3},
        stop={"nested": {"score": 150}},
        checkpoint=CheckpointPolicy(frequency=2, atEnd=True, keep=2),
        **_source(),
    )
    code, output = run_runtime(env)
    assert code == 0, output

    lines = _lines(storage, trial_dir)
    assert [r["training_iteration"] for r in lines] == [1, 2, 3, 4, 5]  # score 150 at iteration 5
    assert lines[-1]["total"] == 15 and lines[-1]["config"] == {"inc": 3}
    assert json.loads(storage.get_bytes(f"{trial_dir}/params.json")) == {"inc": 3}
    csv_rows = storage.get_bytes(f"{trial_dir}/progress.csv").decode().splitlines()
    assert "nested/score" in csv_rows[0].split(",") and len(csv_rows) == 6
    committed, _ = list_checkpoints(storage, trial_dir)
    assert [c.iteration for c in committed] == [4, 5]  # keep=2 by training_iteration, atEnd commits 5
    assert "stop criterion nested/score reached" in output


def test_import_path_and_restart_continue_from_the_latest_checkpoint(tmp_path):
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "kt_test_trainables.py").write_text(TRAINABLES)
    storage, trial_dir = _storage(tmp_path)
    common = dict(entrypoint="kt_test_trainables:Counter", checkpoint=CheckpointPolicy(frequency=0, atEnd=True))
    code, output = run_runtime(runtime_env(tmp_path, trial_dir, config={}, stop={"training_iteration": 3}, **common))
    assert code == 0, output
    code, output = run_runtime(
        runtime_env(tmp_path, trial_dir, config={}, stop={"training_iteration": 6}, attempt=1, **common)
    )
    assert code == 0, output
    assert "restored" in output and "at iteration 3" in output
    assert [(r["training_iteration"], r["total"]) for r in _lines(storage, trial_dir)] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 5),
        (6, 6),
    ]


def test_a_corrupt_newest_checkpoint_falls_back_to_the_next_newest(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    policy = CheckpointPolicy(frequency=2, atEnd=False)
    code, output = run_runtime(
        runtime_env(tmp_path, trial_dir, config={}, stop={"training_iteration": 4}, checkpoint=policy, **_source())
    )
    assert code == 0, output
    assert [c.iteration for c in list_checkpoints(storage, trial_dir)[0]] == [2, 4]
    storage.put_bytes(f"{trial_dir}/checkpoint_000004/state.json", b"{")  # cut short: not its committed size
    code, output = run_runtime(
        runtime_env(
            tmp_path, trial_dir, config={}, stop={"training_iteration": 6}, checkpoint=policy, attempt=1, **_source()
        )
    )
    assert code == 0, output
    assert "cannot restore" in output and "checkpoint_000004" in output and "at iteration 2" in output
    assert [(r["training_iteration"], r["total"]) for r in _lines(storage, trial_dir)] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 5),
        (6, 6),
    ]  # iterations 3 and 4 ran again, each logged once


def test_a_trial_restored_at_its_stop_criteria_runs_no_further_step(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    policy = CheckpointPolicy(frequency=0, atEnd=True)
    for attempt in (0, 1):  # the second attempt restores the checkpoint taken at iteration 4
        code, output = run_runtime(
            runtime_env(
                tmp_path,
                trial_dir,
                config={},
                stop={"training_iteration": 4},
                checkpoint=policy,
                attempt=attempt,
                **_source(),
            )
        )
        assert code == 0, output
    assert "already meets the stop criteria" in output
    assert [r["training_iteration"] for r in _lines(storage, trial_dir)] == [1, 2, 3, 4]
    assert json.loads((tmp_path / "termination-log").read_text())["iteration"] == 4


def test_cloudpickled_function_trainable(tmp_path):
    storage, trial_dir = _storage(tmp_path)

    def train_fn(config):  # a local function: cloudpickle sends it by value
        import kubetune

        for i in range(1, 4):
            kubetune.report({"value": i * config["inc"]})

    storage.put_bytes(f"file://{tmp_path / 'store'}/ns/exp/trainable.pkl", cloudpickle.dumps(train_fn))
    env = runtime_env(
        tmp_path, trial_dir, config={"inc": 7}, pickle_uri=f"file://{tmp_path / 'store'}/ns/exp/trainable.pkl"
    )
    code, output = run_runtime(env)
    assert code == 0, output
    lines = _lines(storage, trial_dir)
    assert [(r["training_iteration"], r["value"]) for r in lines] == [(1, 7), (2, 14), (3, 21)]
    assert lines[-1]["done"] is False  # the function's return ends the trial without a duplicate line


def test_a_logger_of_ray_08s_loggers_runs_beside_the_trial_in_its_pod(tmp_path):
    """``tune.run(loggers=[MyLogger])``: the SDK ships the trainable wrapped (``with_loggers``) and the trial pod's
    process makes the logger and hands it every result, then flushes and closes it, as Ray's UnifiedLogger."""
    storage, trial_dir = _storage(tmp_path)
    record = tmp_path / "logged.jsonl"

    class Appending(kubetune.logger.Logger):  # a local class: shipped by value with the trainable
        def _init(self):
            self.out = open(self.config["record"], "a")
            self.out.write(json.dumps({"init": os.path.basename(self.logdir)}) + "\n")

        def on_result(self, result):
            self.out.write(json.dumps({"iteration": result["training_iteration"], "value": result["value"]}) + "\n")

        def close(self):
            self.out.write(json.dumps({"closed": True}) + "\n")
            self.out.close()

    def train_fn(config):
        import kubetune

        for i in range(1, 4):
            kubetune.report({"value": i * config["inc"]})

    shipped = shipping.with_loggers(train_fn, (Appending,))
    storage.put_bytes(f"file://{tmp_path / 'store'}/ns/exp/trainable.pkl", cloudpickle.dumps(shipped))
    config = {"inc": 7, "record": str(record)}
    env = runtime_env(
        tmp_path, trial_dir, config=config, pickle_uri=f"file://{tmp_path / 'store'}/ns/exp/trainable.pkl"
    )
    code, output = run_runtime(env)
    assert code == 0, output
    logged = [json.loads(line) for line in record.read_text().splitlines()]
    assert logged == [
        {"init": "logdir"},
        {"iteration": 1, "value": 7},
        {"iteration": 2, "value": 14},
        {"iteration": 3, "value": 21},
        {"closed": True},
    ]
    assert [r["value"] for r in _lines(storage, trial_dir)] == [7, 14, 21]  # the pod's result.json as ever


def test_failure_exits_nonzero_and_a_retry_does_not_duplicate_results(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    config = {"fail_at": 6, "fail_flag": str(tmp_path / "failed-once")}
    policy = CheckpointPolicy(frequency=4, atEnd=False)
    code, output = run_runtime(
        runtime_env(tmp_path, trial_dir, config=config, stop={"training_iteration": 8}, checkpoint=policy, **_source())
    )
    assert code == 1, output
    message = (tmp_path / "termination-log").read_text()
    assert "RuntimeError: boom at iteration 6" in message and len(message.encode()) <= 4096
    assert "boom at iteration 6" in storage.get_bytes(f"{trial_dir}/error.txt").decode()
    assert 'raise RuntimeError(f"boom at iteration {it}")' in message  # inline source lines show
    assert [r["training_iteration"] for r in _lines(storage, trial_dir)] == [1, 2, 3, 4, 5]

    code, output = run_runtime(
        runtime_env(
            tmp_path,
            trial_dir,
            config=config,
            stop={"training_iteration": 8},
            checkpoint=policy,
            attempt=1,
            **_source(),
        )
    )
    assert code == 0, output
    assert "dropped 1 written after it" in output  # iteration 5 ran again after restoring 4
    lines = _lines(storage, trial_dir)
    assert [r["training_iteration"] for r in lines] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [r["total"] for r in lines] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_sigterm_during_a_long_step_leaves_a_restorable_checkpoint(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    flag = tmp_path / "in-slow-step"
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"slow_at": 3, "slow_flag": str(flag)},
        checkpoint=CheckpointPolicy(frequency=0, atEnd=False),
        **_source(),
    )
    env["KUBETUNE_GRACE_PERIOD_S"] = "4"
    proc = start_runtime(env)
    wait_for(flag.exists, 30, "the slow step")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert time.monotonic() - sent < 4, "exceeded the grace period"
    assert latest_committed(storage, trial_dir) == (f"{trial_dir}/checkpoint_000002", 2)

    env = runtime_env(tmp_path, trial_dir, config={}, stop={"training_iteration": 4}, attempt=1, **_source())
    code, output = run_runtime(env)
    assert code == 0, output
    assert [(r["training_iteration"], r["total"]) for r in _lines(storage, trial_dir)] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
    ]


def test_sigterm_between_steps_checkpoints_the_current_iteration(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    flag = tmp_path / "at-iteration-3"
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"step_s": 0.05, "flag_at": 3, "flag": str(flag)},
        checkpoint=CheckpointPolicy(frequency=0, atEnd=False),
        **_source(),
    )
    proc = start_runtime(env)
    wait_for(flag.exists, 30, "iteration 3")
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    uri, iteration = latest_committed(storage, trial_dir)
    assert iteration == len(_lines(storage, trial_dir)) >= 3


def test_collector_down_then_back_gets_every_result_and_training_goes_on(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    collector = Collector(port=free_port())  # down at first
    flag = tmp_path / "at-iteration-20"
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"step_s": 0.02, "flag_at": 20, "flag": str(flag)},
        stop={"training_iteration": 150},
        collector=collector,
        **_source(),
    )
    proc = start_runtime(env)
    wait_for(flag.exists, 30, "20 iterations while the collector is down")
    collector.start()
    output, _ = proc.communicate(timeout=60)
    collector.stop()
    assert proc.returncode == 0, output

    assert [r["training_iteration"] for r in collector.results()] == list(range(1, 151))
    first = collector.batches[0]["results"]
    assert len(first) >= 19, "the results buffered while the collector was down come as one batch"
    assert collector.batches[-1]["done"] is True
    announced = [b["checkpoint"] for b in collector.batches if b["checkpoint"]]
    assert announced == [{"uri": f"{trial_dir}/checkpoint_000150", "iteration": 150}]
    assert "test-token" not in output


@pytest.mark.parametrize(
    "decision, at_end, expected",
    [("stop", True, 5), ("stop", False, None), ("pause", False, 5), ("checkpoint", False, 5)],
)
def test_collector_decisions(tmp_path, decision, at_end, expected):
    storage, trial_dir = _storage(tmp_path)

    def decide(batch, batches):
        iterations = [r["training_iteration"] for r in batch["results"]]
        return decision if 5 in iterations else "continue"

    collector = Collector(decide=decide).start()
    stop = {"training_iteration": 40} if decision == "checkpoint" else {}
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"step_s": 0.1},
        stop=stop,
        collector=collector,
        checkpoint=CheckpointPolicy(frequency=0, atEnd=at_end),
        **_source(),
    )
    code, output = run_runtime(env)
    collector.stop()
    assert code == 0, output
    committed = [c.iteration for c in list_checkpoints(storage, trial_dir)[0]]
    last = len(_lines(storage, trial_dir))
    if decision == "checkpoint":
        assert last == 40 and committed and 5 <= committed[0] <= 10  # taken when the reply arrived
    else:
        assert 5 <= last <= 10  # the decision arrives a step or a few later
        assert committed == ([] if expected is None else [last])


@pytest.mark.parametrize("decision", ["stop", "pause"])
def test_with_a_decision_wait_a_stop_or_pause_applies_at_the_result_it_is_about(tmp_path, decision):
    # As Ray: the scheduler's answer to iteration 5 is applied before step 6 (the collector answers slowly).
    storage, trial_dir = _storage(tmp_path)

    def decide(batch, batches):
        time.sleep(0.3)  # slower than a step: without waiting, the trial would run on meanwhile
        return decision if 5 in [r["training_iteration"] for r in batch["results"]] else "continue"

    collector = Collector(decide=decide).start()
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"step_s": 0.01},
        collector=collector,
        decision_wait_s=5.0,
        checkpoint=CheckpointPolicy(frequency=0, atEnd=True),
        **_source(),
    )
    code, output = run_runtime(env)
    collector.stop()
    assert code == 0, output
    assert len(_lines(storage, trial_dir)) == 5
    assert [c.iteration for c in list_checkpoints(storage, trial_dir)[0]] == [5]


def test_a_decision_wait_does_not_hold_training_while_the_collector_is_down(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    collector = Collector()  # never started: connections are refused
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"step_s": 0.01},
        stop={"training_iteration": 30},
        collector=collector,
        decision_wait_s=5.0,
        **_source(),
    )
    started = time.monotonic()
    code, output = run_runtime(env)
    assert code == 0, output
    assert len(_lines(storage, trial_dir)) == 30
    assert time.monotonic() - started < 30  # not 5 s per step: the wait ends once the collector is unreachable
    assert "within 5 s (collector unreachable): training on" in output  # the deviation from Ray is in the log


def test_an_answer_later_than_the_decision_wait_is_logged_as_applying_late(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    collector = Collector(decide=lambda batch, batches: time.sleep(0.5) or "continue").start()
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"step_s": 0.01},
        stop={"training_iteration": 2},
        collector=collector,
        decision_wait_s=0.1,
        **_source(),
    )
    code, output = run_runtime(env)
    collector.stop()
    assert code == 0, output
    assert "no answer from the operator to the result of iteration 1 within 0.1 s: training on" in output


def test_a_stale_attempt_stops_at_once_and_writes_nothing_more(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    collector = Collector().start()
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"step_s": 0.05},
        stop={"training_iteration": 100},
        collector=collector,
        checkpoint=CheckpointPolicy(frequency=1, atEnd=True),
        **_source(),
    )
    env["KUBETUNE_TOKEN"] = "a-token-the-collector-refuses"  # as for an attempt the operator replaced
    code, output = run_runtime(env)
    collector.stop()
    assert code == 0, output
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["outcome"] == "fenced"
    committed = [c.iteration for c in list_checkpoints(storage, trial_dir)[0]]
    assert message["iteration"] < 20 and max(committed, default=0) <= message["iteration"]
    assert "end: fenced" not in output and collector.bad_auth == 1


def test_invalid_environment_exits_2(tmp_path):
    env = runtime_env(tmp_path, f"file://{tmp_path}/x", config={}, **_source())
    del env["KUBETUNE_TRIAL"]
    code, output = run_runtime(env)
    assert code == 2
    assert "KUBETUNE_TRIAL" in Path(tmp_path / "termination-log").read_text()


FUNCTION_SOURCE = '''
import json, os, tempfile
import kubetune


def train_fn(config):
    """Counts to 6, checkpointing every second report; fails once after reporting 5."""
    start = 0
    checkpoint = kubetune.get_checkpoint()
    if checkpoint is not None:
        with open(os.path.join(checkpoint.path, "state.json")) as f:
            start = json.load(f)["i"]
    for i in range(start + 1, 7):
        if i == 6 and not os.path.exists(config["fail_flag"]):
            open(config["fail_flag"], "w").close()
            raise RuntimeError("boom in the function")
        if i % 2:
            kubetune.report({"count": i})
            continue
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"i": i}, f)
        kubetune.report({"count": i}, checkpoint=kubetune.Checkpoint.from_directory(d))
'''


def test_function_trainable_checkpoints_and_a_retry_resumes_without_duplicates(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    common = dict(config={"fail_flag": str(tmp_path / "failed-once")}, source=FUNCTION_SOURCE, name="train_fn")
    code, output = run_runtime(runtime_env(tmp_path, trial_dir, **common))
    assert code == 1, output
    assert "boom in the function" in (tmp_path / "termination-log").read_text()
    assert latest_committed(storage, trial_dir)[1] == 4

    code, output = run_runtime(runtime_env(tmp_path, trial_dir, attempt=1, **common))
    assert code == 0, output
    assert "dropped 1 written after it" in output  # result 5 of the failed attempt
    assert [(r["training_iteration"], r["count"]) for r in _lines(storage, trial_dir)] == [(i, i) for i in range(1, 7)]
    assert [c.iteration for c in list_checkpoints(storage, trial_dir)[0]] == [2, 4, 6]


def test_a_trainable_without_save_checkpoint_still_completes(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    source = "import kubetune\nclass T(kubetune.Trainable):\n    def step(self):\n        return {'x': 1}\n"
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={},
        stop={"training_iteration": 3},
        source=source,
        name="T",
        checkpoint=CheckpointPolicy(frequency=2, atEnd=True),
    )
    code, output = run_runtime(env)
    assert code == 0, output
    assert "no checkpoints for this trial" in output
    assert len(_lines(storage, trial_dir)) == 3 and latest_committed(storage, trial_dir) is None


def test_restore_from_seeds_the_first_attempt_and_the_trials_own_checkpoint_wins_after(tmp_path):
    storage, donor_dir = _storage(tmp_path)
    policy = CheckpointPolicy(frequency=2, atEnd=True)
    code, output = run_runtime(
        runtime_env(tmp_path, donor_dir, config={}, stop={"training_iteration": 4}, checkpoint=policy, **_source())
    )
    assert code == 0, output
    trial_dir = donor_dir.replace("/trial-0", "/trial-1")
    seeded = runtime_env(
        tmp_path,
        trial_dir,
        config={"inc": 10},
        stop={"training_iteration": 4},
        checkpoint=policy,
        **_source(),
        restore_from=f"{donor_dir}/checkpoint_000002/state.json",
    )
    code, output = run_runtime(seeded)
    assert code == 0, output
    assert [(r["training_iteration"], r["total"]) for r in _lines(storage, trial_dir)] == [(3, 12), (4, 22)]
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message.pop("result")["total"] == 22  # the last result, for an operator that missed it
    assert message == {"outcome": "completed", "iteration": 4, "checkpoint": f"{trial_dir}/checkpoint_000004"}
    retry = runtime_env(
        tmp_path,
        trial_dir,
        config={"inc": 10},
        stop={"training_iteration": 5},
        checkpoint=policy,
        attempt=1,
        **_source(),
        restore_from=f"{donor_dir}/checkpoint_000002/state.json",
    )
    code, output = run_runtime(retry)
    assert code == 0, output
    assert [(r["training_iteration"], r["total"]) for r in _lines(storage, trial_dir)] == [(3, 12), (4, 22), (5, 32)]


def test_after_a_pbt_exploit_only_checkpoints_of_the_new_lineage_win_over_the_donors(tmp_path):
    storage, donor_dir = _storage(tmp_path)
    policy = CheckpointPolicy(frequency=2, atEnd=True)
    code, output = run_runtime(
        runtime_env(
            tmp_path, donor_dir, config={"inc": 100}, stop={"training_iteration": 4}, checkpoint=policy, **_source()
        )
    )
    assert code == 0, output
    trial_dir = donor_dir.replace("/trial-0", "/trial-1")
    own = runtime_env(
        tmp_path, trial_dir, config={"inc": 1}, stop={"training_iteration": 6}, checkpoint=policy, **_source()
    )
    code, output = run_runtime(own)
    assert code == 0, output
    # the exploit: the explored config, the donor's checkpoint at 2, though the trial's own go up to 6
    donor = f"{donor_dir}/checkpoint_000002"
    exploit = runtime_env(
        tmp_path,
        trial_dir,
        config={"inc": 10},
        stop={"training_iteration": 4},
        checkpoint=policy,
        attempt=1,
        **_source(),
        restore_from=donor,
    )
    code, output = run_runtime(exploit)
    assert code == 0, output
    assert f"restored {donor}" in output
    assert [(r["training_iteration"], r["total"]) for r in _lines(storage, trial_dir)] == [
        (1, 1),
        (2, 2),
        (3, 210),
        (4, 220),
    ]  # its own lines up to the donor's iteration, then the new lineage
    # a retry of the new lineage restores its own checkpoint taken since the exploit (4), not the donor's
    retry = runtime_env(
        tmp_path,
        trial_dir,
        config={"inc": 10},
        stop={"training_iteration": 5},
        checkpoint=policy,
        attempt=2,
        **_source(),
        restore_from=donor,
    )
    code, output = run_runtime(retry)
    assert code == 0, output
    assert f"restored {trial_dir}/checkpoint_000004" in output
    assert [r["total"] for r in _lines(storage, trial_dir)][-1] == 230


def test_a_failing_trial_still_sends_its_results_and_a_final_done_batch(tmp_path):
    storage, trial_dir = _storage(tmp_path)
    collector = Collector().start()
    env = runtime_env(
        tmp_path,
        trial_dir,
        config={"fail_at": 4, "fail_flag": str(tmp_path / "flag")},
        collector=collector,
        **_source(),
    )
    code, output = run_runtime(env)
    collector.stop()
    assert code == 1, output
    assert [r["training_iteration"] for r in collector.results()] == [1, 2, 3]
    assert collector.batches[-1]["done"] is True


def test_a_trainable_that_cannot_be_loaded_fails_with_the_reason(tmp_path):
    _, trial_dir = _storage(tmp_path)
    code, output = run_runtime(runtime_env(tmp_path, trial_dir, config={}, entrypoint="no_such_module_kt:Thing"))
    assert code == 1, output
    assert "ModuleNotFoundError: No module named 'no_such_module_kt'" in (tmp_path / "termination-log").read_text()


def test_the_values_drawn_for_sample_from_functions_reach_the_collector_before_any_result(tmp_path):
    """The operator keeps them for the trial's later attempts (Ray draws them once per trial). A value that JSON
    would not give back the same (a tuple) stays unreported, with a warning: each attempt draws it again."""
    storage, trial_dir = _storage(tmp_path)
    drawn = f"file://{tmp_path / 'store'}/ns/exp/sdk/functions/inc.pkl"
    storage.put_bytes(drawn, dumps(lambda spec: __import__("random").randint(2, 9)))
    scalar = f"file://{tmp_path / 'store'}/ns/exp/sdk/functions/lr.pkl"
    storage.put_bytes(scalar, dumps(lambda spec: __import__("numpy").float64(0.25)))  # reported as a JSON number
    pair = f"file://{tmp_path / 'store'}/ns/exp/sdk/functions/pair.pkl"
    storage.put_bytes(pair, dumps(lambda spec: (1, 2)))
    cases = (
        ({"inc": {FUNCTION_KEY: drawn}, "lr": {FUNCTION_KEY: scalar}, "n": [1]}, True),
        ({"p": {FUNCTION_KEY: pair}}, False),
    )
    for config, reported in cases:
        collector = Collector().start()
        env = runtime_env(
            tmp_path, trial_dir, config=config, stop={"training_iteration": 3}, collector=collector, **_source()
        )
        code, output = run_runtime(env)
        collector.stop()
        assert code == 0, output
        sent = [(b.get("explored"), bool(b["results"])) for b in collector.batches]
        explored = [i for i, (config, _) in enumerate(sent) if config is not None]
        if reported:
            first_results = min(i for i, (_, results) in enumerate(sent) if results)
            assert len(explored) == 1 and explored[0] <= first_results, sent  # once, with or before the first result
            inc = sent[explored[0]][0]["inc"]
            assert sent[explored[0]][0] == {"inc": inc, "lr": 0.25, "n": [1]} and type(inc) is int and 2 <= inc <= 9
            assert collector.results()[0]["total"] == inc  # the trainable ran with the value reported
        else:
            assert explored == [] and "a retried attempt of the trial draws them again" in output
