"""kubetune.runtime.results: the result log's lineage rule across restarts, CSV columns, sync."""

from __future__ import annotations

import csv
import io
import json

from kubetune import env as trial_env
from kubetune.runtime.results import ResultLog
from kubetune.storage import open_storage


def _log(tmp_path, lines: list[str] | None = None):
    trial_dir = f"file://{tmp_path / 'store'}/trial"
    storage = open_storage(trial_dir)
    if lines is not None:
        storage.put_bytes(f"{trial_dir}/result.json", "".join(line + "\n" for line in lines).encode())
    return ResultLog(storage, trial_dir, tmp_path / "local", sync_period_s=3600), storage, trial_dir


def _line(iteration: int, **extra) -> str:
    return json.dumps({"training_iteration": iteration, "loss": iteration / 10, "config": {"lr": 1}, **extra})


def test_resume_keeps_the_lineage_up_to_the_restored_iteration(tmp_path):
    stored = [_line(i) for i in range(1, 7)]
    log, storage, trial_dir = _log(tmp_path, stored + ['{"training_iteration": 7, "lo'])  # cut last line
    assert log.resume(4) == (4, 3)
    log.append(json.loads(_line(5, loss=99)))
    assert log.sync()
    text = storage.get_bytes(f"{trial_dir}/result.json").decode()
    assert text.splitlines() == stored[:4] + [_line(5, loss=99)]  # kept lines are verbatim
    rows = list(csv.DictReader(io.StringIO(storage.get_bytes(f"{trial_dir}/progress.csv").decode())))
    assert [r["training_iteration"] for r in rows] == ["1", "2", "3", "4", "5"]
    assert "config/lr" not in rows[0] and rows[-1]["loss"] == "99"
    log.close()


def test_resume_after_a_jump_from_another_trials_checkpoint(tmp_path):
    # Iterations 1-3 were this trial's own; then it restored another trial's checkpoint at 10.
    log, _, _ = _log(tmp_path, [_line(i) for i in (1, 2, 3, 11, 12, 13)])
    assert log.resume(12) == (5, 1)
    log.close()


def test_fresh_start_drops_everything_and_no_history_is_fine(tmp_path):
    log, _, _ = _log(tmp_path, [_line(1), _line(2)])
    assert log.resume(0) == (0, 2)
    log.close()
    log, _, _ = _log(tmp_path / "other")
    assert log.resume(0) == (0, 0)
    log.close()


def test_csv_columns_come_from_the_first_result_and_sync_only_uploads_changes(tmp_path):
    log, storage, trial_dir = _log(tmp_path)
    log.append({"training_iteration": 1, "a": {"b": 1}, "config": {"x": 1}})
    log.append({"training_iteration": 2, "a": {"b": 2}, "new_key": "ignored, as Ray's CSV logger does"})
    log.append({"training_iteration": 3})
    assert log.sync() is True
    assert log.sync() is False
    assert storage.get_bytes(f"{trial_dir}/progress.csv").decode().splitlines() == [
        "training_iteration,a/b",
        "1,1",
        "2,2",
        "3,",
    ]
    assert len(storage.get_bytes(f"{trial_dir}/result.json").decode().splitlines()) == 3
    log.close()


def _events(data: bytes) -> list:
    """The records of a TensorBoard event file (TFRecord framing: length, CRC, payload, CRC)."""
    import struct

    from tensorboardX.proto import event_pb2

    events, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        events.append(event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length]))
        pos += 12 + length + 4
    return events


def test_tensorboard_events_go_to_storage_next_to_result_json(tmp_path):
    log, storage, trial_dir = _log(tmp_path)
    for i in (1, 2, 3):
        log.append(
            {
                "training_iteration": i,
                "loss": i / 10,
                "info": {"grad": 2.0},
                "done": False,
                "note": "text",
                "config": {"lr": 0.5, "model": {"layers": 2}},
            }
        )
    assert log.sync()  # uploads the event file with what its writer thread has written so far
    names = [uri.rsplit("/", 1)[1] for uri in storage.list(trial_dir)]
    (event_file,) = [n for n in names if n.startswith("events.out.tfevents.")]
    assert log.sync(final=True)  # no new result, but the writer is closed: every event, the hyperparameters
    events = _events(storage.get_bytes(f"{trial_dir}/{event_file}"))
    scalars = [
        (e.step, v.tag, round(v.simple_value, 6))
        for e in events
        for v in e.summary.value
        if v.tag.startswith("ray/tune/")
    ]
    assert scalars == [
        (i, tag, value)
        for i in (1, 2, 3)
        for tag, value in (("ray/tune/training_iteration", i), ("ray/tune/loss", i / 10), ("ray/tune/info/grad", 2.0))
    ]
    tags = [v.tag for e in events for v in e.summary.value]
    assert "_hparams_/experiment" in tags and "_hparams_/session_end_info" in tags
    log.close()


def test_the_objectives_of_a_multi_objective_experiment_travel_to_the_pod_and_lead_its_results():
    sent = trial_env.TrialEnv(
        namespace="ns",
        experiment="e",
        trial="e-00000",
        attempt=0,
        config={},
        trial_dir_uri="s3://b/p",
        metric=["loss", "gain"],
        mode=["min", "max"],
    )
    variables = trial_env.encode_trial_env(sent)
    assert variables[trial_env.METRIC] == '["loss", "gain"]'
    got = trial_env.read_trial_env(variables, "{}")
    assert got.metric == ["loss", "gain"] and got.mode == ["min", "max"]
    one = trial_env.read_trial_env({**variables, trial_env.METRIC: "[not json", trial_env.MODE: "max"}, "{}")
    assert one.metric == "[not json" and one.mode == "max"
    result = {"a": 1, "gain": 2.0, "loss": 1.0, **{f"k{i}": i for i in range(100)}}
    assert list(trial_env.compact_result(result, ["loss", "gain"], 40))[:2] == ["loss", "gain"]
    assert list(trial_env.compact_result(result, None, 40))[:2] == ["a", "gain"]  # sorted when no metric leads
