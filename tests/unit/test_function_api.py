"""The function API end to end: every reporting form, checkpoints, restore, errors, stop and reset."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import threading
import traceback

import pytest
from conftest_storage import aws_env, moto_endpoint, new_bucket  # noqa: F401 - fixtures

import kubetune
from kubetune import Checkpoint, Trainable, as_trainable_class, wrap_function
from kubetune.checkpoint_layout import find_checkpoint_dir
from kubetune.runtime.function_trainable import FunctionTrainable
from kubetune.runtime.trainable import RESULT_DUPLICATE


def _run(fn, logdir, config=None, **kwargs):
    """Train a wrapped ``fn`` until its duplicate final result; return (trainable, results)."""
    t = wrap_function(fn)(config or {}, logdir=str(logdir), **kwargs)
    results = []
    while True:
        result = t.train()
        results.append(result)
        if result.get(RESULT_DUPLICATE):
            return t, results
        assert len(results) < 100


def modern(config):
    for i in range(config["n"]):
        kubetune.report({"loss": 1.0 / (i + 1)}, i=i)


def test_modern_report_gives_one_result_per_call_then_a_done_duplicate(tmp_path):
    t, results = _run(modern, tmp_path, {"n": 3})
    *reports, final = results
    assert [r["training_iteration"] for r in reports] == [1, 2, 3]
    assert [(r["loss"], r["i"]) for r in reports] == [(1.0, 0), (0.5, 1), (1 / 3, 2)]
    assert all(r["done"] is False and "should_checkpoint" not in r for r in reports)
    assert reports[0]["config"] == {"n": 3} and reports[0]["trial_id"] == "default"
    # the duplicate repeats the last result, marks done, and counts nothing
    assert final[RESULT_DUPLICATE] is True and final["done"] is True and final["should_checkpoint"] is False
    assert final["training_iteration"] == 3 and final["i"] == 2 and t.iteration == 3
    assert t.train() == {**final, "should_checkpoint": False}  # stays finished
    t.stop()


def test_a_function_that_never_reports_ends_with_an_empty_duplicate(tmp_path):
    t, results = _run(lambda config: None, tmp_path)
    assert results == [{RESULT_DUPLICATE: True, "done": True, "should_checkpoint": False}]


def test_report_of_a_number_and_returned_or_yielded_values_become_metric(tmp_path):
    def numbers(config):
        kubetune.report(0.25)
        return 0.5

    _, results = _run(numbers, tmp_path / "a")
    assert [r["_metric"] for r in results[:-1]] == [0.25, 0.5]

    def generator(config):
        yield 1
        yield {"acc": 0.9}
        yield 3.5

    _, results = _run(generator, tmp_path / "b")
    assert [(r.get("_metric"), r.get("acc")) for r in results[:-1]] == [(1, None), (None, 0.9), (3.5, None)]
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 3]

    def returns_dict(config):
        kubetune.report(step=1)
        return {"final": True}

    _, results = _run(returns_dict, tmp_path / "c")
    assert results[1]["final"] is True and results[1]["training_iteration"] == 2 and len(results) == 3

    def returns_text(config):
        return "oops"

    with pytest.raises(TypeError, match="number or a dict"):
        _run(returns_text, tmp_path / "d")


def test_track_log_and_reporter_forms(tmp_path):
    def tracked(config):
        for i in range(2):
            kubetune.track.log(mean_accuracy=i)

    _, results = _run(tracked, tmp_path / "a")
    assert [r["mean_accuracy"] for r in results] == [0, 1, 1]

    seen = {}

    def with_reporter(config, reporter):
        seen.update(logdir=reporter.logdir, trial_id=reporter.trial_id, trial_name=reporter.trial_name)
        reporter(mean_loss=2.0)
        reporter(0.7)

    _, results = _run(with_reporter, tmp_path / "b", trial_id="t1", trial_name="trial_t1")
    assert results[0]["neg_mean_loss"] == -2.0 and results[1]["_metric"] == 0.7
    assert seen == {"logdir": str(tmp_path / "b"), "trial_id": "t1", "trial_name": "trial_t1"}

    def positional_reporter(config, rep):  # Ray 0.8: any second positional parameter is the reporter
        rep(x=1)

    _, results = _run(positional_reporter, tmp_path / "c")
    assert results[0]["x"] == 1


def test_trial_accessors_inside_and_outside_a_function(tmp_path):
    seen = {}

    def fn(config):
        seen.update(id=kubetune.get_trial_id(), name=kubetune.get_trial_name(), dir=kubetune.get_trial_dir())
        kubetune.report(x=1)

    _run(fn, tmp_path, trial_id="t9", trial_name="exp_t9")
    assert seen == {"id": "t9", "name": "exp_t9", "dir": str(tmp_path)}
    assert kubetune.get_trial_id() is None
    with pytest.warns(RuntimeWarning, match="outside a function trainable"):
        kubetune.report(x=1)
    with pytest.warns(RuntimeWarning):
        assert kubetune.get_checkpoint() is None
    with pytest.raises(RuntimeError, match="inside a function trainable"):
        with kubetune.checkpoint_dir(step=1):
            pass


def counting_with_checkpoint_dir(config, checkpoint_dir=None):
    """Ray 1.x style: state in ``checkpoint_dir``, written through ``kubetune.checkpoint_dir``."""
    start = 0
    if checkpoint_dir:
        with open(os.path.join(checkpoint_dir, "nested", "state.txt")) as f:
            start = int(f.read())
    for step in range(start, config["n"]):
        if step % 2 == 1:
            with kubetune.checkpoint_dir(step=step) as d:
                os.makedirs(os.path.join(d, "nested"))
                with open(os.path.join(d, "nested", "state.txt"), "w") as f:
                    f.write(str(step + 1))
        kubetune.report(step=step, start=start)


def test_checkpoint_dir_form_save_and_restore_continues_numbering(tmp_path):
    cls = wrap_function(counting_with_checkpoint_dir)
    t = cls({"n": 10}, logdir=str(tmp_path / "a"))
    results = [t.train() for _ in range(5)]
    assert [r.get("should_checkpoint", False) for r in results] == [False, True, False, True, False]
    path = t.save()  # at iteration 5; the newest checkpoint came with result 4
    assert path == str(tmp_path / "a" / "checkpoint_000004") + os.sep
    assert sorted(os.listdir(path)) == [".is_checkpoint", ".tune_metadata", "nested"]
    t.stop()

    moved = tmp_path / "moved" / "checkpoint_000004"
    os.renames(path, moved)
    other = cls({"n": 10}, logdir=str(tmp_path / "b"))
    other.restore(str(moved))
    r = other.train()
    assert results[-1]["start"] == 0 and r["start"] == 4  # the function resumed from its checkpoint
    assert (r["step"], r["training_iteration"], r["iterations_since_restore"]) == (4, 5, 1)
    assert r["experiment_id"] == t.experiment_id
    other.stop()


def test_checkpoint_registered_without_a_later_report_rides_on_the_final_result(tmp_path):
    def fn(config):
        kubetune.report(x=1)
        with kubetune.checkpoint_dir(step=1) as d:
            with open(os.path.join(d, "final.txt"), "w") as f:
                f.write("end")

    t, results = _run(fn, tmp_path)
    assert results[-1][RESULT_DUPLICATE] and results[-1]["should_checkpoint"] is True
    path = t.save()
    assert os.path.isfile(os.path.join(path, "final.txt")) and os.path.basename(path[:-1]) == "checkpoint_000001"


def modern_resumable(config):
    """Ray 2.x style: ``report(metrics, checkpoint=...)`` from a temp dir deleted at once."""
    checkpoint = kubetune.get_checkpoint()
    start = 0
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            with open(os.path.join(d, "sub", "epoch")) as f:
                start = int(f.read())
    for epoch in range(start, config["epochs"]):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "sub"))
            with open(os.path.join(d, "sub", "epoch"), "w") as f:
                f.write(str(epoch + 1))
            kubetune.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))


def test_modern_checkpoint_survives_the_callers_temp_dir_and_restores(tmp_path):
    cls = wrap_function(modern_resumable)
    t = cls({"epochs": 6}, logdir=str(tmp_path / "a"))
    results = [t.train() for _ in range(3)]
    assert all(r["should_checkpoint"] is True for r in results)
    path = t.save()
    with open(os.path.join(path, "sub", "epoch")) as f:
        assert f.read() == "3"
    data = t.save_to_object()
    t.stop()

    for restore in (lambda o: o.restore(path), lambda o: o.restore_from_object(data)):
        other = cls({"epochs": 6}, logdir=str(tmp_path / "b"))
        restore(other)
        rest = [other.train() for _ in range(4)]
        assert [r.get("epoch") for r in rest] == [3, 4, 5, 5]
        assert [r["training_iteration"] for r in rest] == [4, 5, 6, 6]
        assert rest[-1][RESULT_DUPLICATE]
        other.stop()


def test_restore_while_running_restarts_the_function(tmp_path):
    cls = wrap_function(modern_resumable)
    t = cls({"epochs": 10}, logdir=str(tmp_path))
    for _ in range(2):
        t.train()
    path = t.save()
    for _ in range(3):
        t.train()
    t.restore(path)
    r = t.train()
    assert (r["epoch"], r["training_iteration"]) == (2, 3)
    t.stop()


def test_save_during_train_in_another_thread_keeps_state_and_files_together(tmp_path):
    """The runtime saves from its main thread on SIGTERM while train() runs in a worker thread."""
    t = wrap_function(modern_resumable)({"epochs": 400}, logdir=str(tmp_path / "trial"))
    worker = threading.Thread(target=lambda: [t.train() for _ in range(400)])
    worker.start()
    saves = 0
    while worker.is_alive() or saves == 0:
        path = t.save(str(tmp_path / "saves" / str(saves)))
        saves += 1
        with open(path + ".tune_metadata", "rb") as f:
            iteration = pickle.load(f)["iteration"]
        assert os.path.basename(find_checkpoint_dir(path)) == f"checkpoint_{iteration:06d}"
        if iteration:
            with open(os.path.join(path, "sub", "epoch")) as f:
                assert int(f.read()) == iteration
    worker.join()
    t.stop()
    assert saves > 1


def test_save_without_a_function_checkpoint_restarts_from_scratch(tmp_path):
    t, _ = _run(modern, tmp_path / "a", {"n": 2})
    path = t.save()
    assert path == str(tmp_path / "a" / "checkpoint_000000" / "checkpoint")
    other = wrap_function(modern)({"n": 2}, logdir=str(tmp_path / "b"))
    other.restore(path)
    assert [other.train()["training_iteration"] for _ in range(3)] == [1, 2, 2]


def test_checkpoint_handle():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "a"))
        with open(os.path.join(d, "a", "f"), "w") as f:
            f.write("x")
        c = Checkpoint.from_directory(d)
        assert c.path == os.path.abspath(d) and c == Checkpoint(d)
        copy = c.to_directory()
        with open(os.path.join(copy, "a", "f")) as f:
            assert f.read() == "x"
        shutil.rmtree(copy)
        with tempfile.TemporaryDirectory() as other:
            target = os.path.join(other, "into")
            assert c.to_directory(target) == target and os.path.isfile(os.path.join(target, "a", "f"))
        with c.as_directory() as local:
            assert local == c.path
    with pytest.raises(NotADirectoryError):
        Checkpoint.from_directory(d)


def _inner_helper(value):
    raise KeyError(f"missing {value}")


def test_exception_in_the_function_propagates_with_its_traceback(tmp_path):
    def failing(config):
        kubetune.report(x=1)
        _inner_helper("lr")

    t = wrap_function(failing)({}, logdir=str(tmp_path))
    t.train()
    with pytest.raises(KeyError, match="missing lr") as info:
        t.train()
    names = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    # the caller's frames (train, step) followed by the function's own frames
    assert names[1] == "train" and names.index("step") < names.index("failing")
    assert names[-2:] == ["failing", "_inner_helper"]
    with pytest.raises(KeyError):  # a failed trainable stays failed
        t.train()


def test_stop_unwinds_a_paused_function(tmp_path):
    unwound = threading.Event()

    def endless(config):
        try:
            while True:
                kubetune.report(x=1)
        finally:
            unwound.set()

    t = wrap_function(endless)({}, logdir=str(tmp_path))
    t.train()
    t.stop()
    assert unwound.is_set()
    assert not any(th.name.startswith("kubetune-function") and th.is_alive() for th in threading.enumerate())
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".function_checkpoints")]


def test_reset_restarts_the_function_with_the_new_config(tmp_path):
    t = wrap_function(modern)({"n": 5}, logdir=str(tmp_path))
    t.train()
    t.train()
    assert t.reset({"n": 1}) is True
    results = [t.train(), t.train()]
    assert results[0]["training_iteration"] == 1 and results[0]["config"] == {"n": 1}
    assert results[1][RESULT_DUPLICATE]


def test_function_checkpoints_go_to_remote_storage(tmp_path, moto_endpoint, aws_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("KUBETUNE_STORAGE_ENDPOINT", moto_endpoint)
    remote = f"s3://{new_bucket(moto_endpoint)}/ns/exp/trial_1"
    cls = wrap_function(modern_resumable)
    t = cls({"epochs": 4}, logdir=str(tmp_path / "a"), remote_checkpoint_dir=remote)
    t.train()
    t.train()
    t.save()
    t.stop()
    other = cls({"epochs": 4}, logdir=str(tmp_path / "b"))
    other.restore(f"{remote}/checkpoint_000002")
    assert [other.train()["training_iteration"] for _ in range(3)] == [3, 4, 4]
    other.stop()


class AClass(Trainable):
    def step(self):
        return {}


def test_as_trainable_class():
    assert as_trainable_class(AClass) is AClass
    wrapped = as_trainable_class(modern)
    assert issubclass(wrapped, FunctionTrainable) and wrapped.__name__ == "modern"
    with pytest.raises(TypeError, match="not a subclass of kubetune.Trainable"):
        as_trainable_class(dict)
    with pytest.raises(TypeError, match="got int"):
        as_trainable_class(3)
    with pytest.raises(TypeError, match="must accept"):
        wrap_function(lambda: None)
    with pytest.raises(TypeError, match="must accept"):
        wrap_function(lambda config, a, b: None)


def test_a_function_that_checkpoints_and_returns_without_reporting_keeps_both(tmp_path):
    # issue 23: Ray keeps the checkpoint and a final result; the checkpoint rode on nothing here before
    def fn(config):
        with kubetune.checkpoint_dir(step=0) as d:
            with open(os.path.join(d, "state.txt"), "w") as f:
                f.write("saved")

    t = wrap_function(fn)({}, logdir=str(tmp_path))
    final = t.train()
    assert RESULT_DUPLICATE not in final and final["done"] is True and final["should_checkpoint"] is True
    assert final["training_iteration"] == 1 and final["trial_id"] == "default"
    path = t.save()
    assert open(os.path.join(path, "state.txt")).read() == "saved"
    assert t.train()[RESULT_DUPLICATE] is True  # finished: the final result is not logged twice
    t.stop()
