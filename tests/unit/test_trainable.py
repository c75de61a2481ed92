"""kubetune.Trainable: Ray Tune's train() contract, auto-filled result fields, counters and lifecycle."""

from __future__ import annotations

import ipaddress
import os
import platform
import shutil
import time
import warnings
from datetime import datetime

import pytest

from kubetune import Trainable
from kubetune.runtime.trainable import RESULT_DUPLICATE


class Counter(Trainable):
    """Counts up; each step returns ``{"value": n}`` merged with ``config["extra"]``."""

    def setup(self, config):
        self.value = config.get("start", 0)
        self.setup_config = config

    def step(self):
        self.value += 1
        return {"value": self.value, **self.config.get("extra", {})}


class Scripted(Trainable):
    """Returns the results in ``config["results"]`` one per step (the list is consumed)."""

    def step(self):
        return self.config["results"].pop(0)


def test_standalone_result_has_every_auto_filled_field(tmp_path):
    t = Counter({"start": 10}, logdir=str(tmp_path / "trial"))
    before = time.time()
    results = [t.train() for _ in range(3)]
    after = time.time()

    assert [r["value"] for r in results] == [11, 12, 13]
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert [r["iterations_since_restore"] for r in results] == [1, 2, 3]
    r = results[-1]
    assert r["done"] is False
    assert r["trial_id"] == "default" and r["trial_name"] == "default"
    assert len(r["experiment_id"]) == 32 and int(r["experiment_id"], 16) >= 0
    assert {res["experiment_id"] for res in results} == {t.experiment_id}
    assert int(before) <= r["timestamp"] <= after
    assert abs(datetime.strptime(r["date"], "%Y-%m-%d_%H-%M-%S").timestamp() - r["timestamp"]) <= 1
    assert r["pid"] == os.getpid()
    assert r["hostname"] == platform.node()
    ipaddress.ip_address(r["node_ip"])
    assert r["config"] is t.config
    assert r["timesteps_total"] is None and r["episodes_total"] is None
    assert r["timesteps_since_restore"] == 0
    assert "neg_mean_loss" not in r
    assert all(res["time_this_iter_s"] >= 0 for res in results)
    assert r["time_total_s"] == pytest.approx(sum(res["time_this_iter_s"] for res in results))
    assert r["time_since_restore"] == pytest.approx(r["time_total_s"])
    assert r["warmup_time"] > 0 and {res["warmup_time"] for res in results} == {r["warmup_time"]}
    assert t.iteration == t.training_iteration == 3
    assert t.logdir == str(tmp_path / "trial") and os.path.isdir(t.logdir)


def test_default_logdir_is_a_fresh_temp_dir():
    a, b = Counter(), Counter()
    try:
        assert os.path.isdir(a.logdir) and os.path.isdir(b.logdir) and a.logdir != b.logdir
        assert os.path.basename(a.logdir).startswith("Counter_")
        assert a.experiment_id != b.experiment_id
    finally:
        shutil.rmtree(a.logdir)
        shutil.rmtree(b.logdir)


def test_trial_identity_and_config_accessors(tmp_path):
    config = {"nested": {"lr": 0.1}}
    t = Counter(config, trial_id="abc123", trial_name="trial_abc123", logdir=str(tmp_path))
    r = t.train()
    assert (t.trial_id, t.trial_name) == ("abc123", "trial_abc123")
    assert (r["trial_id"], r["trial_name"]) == ("abc123", "trial_abc123")
    assert t.config is config and t.get_config() is config
    # setup() gets a deep copy: mutating it leaves the trial's config alone.
    t.setup_config["nested"]["lr"] = 5.0
    assert config["nested"]["lr"] == 0.1


def test_user_values_win_and_internal_counters_keep_counting(tmp_path):
    results = [
        {
            "training_iteration": 100,
            "done": True,
            "time_this_iter_s": 2.5,
            "timesteps_total": 7,
            "episodes_total": 3,
            "neg_mean_loss": 9.0,
            "mean_loss": 4.0,
        }
    ] * 2
    t = Scripted({"results": list(results)}, logdir=str(tmp_path))
    first, second = t.train(), t.train()
    assert first["training_iteration"] == second["training_iteration"] == 100
    assert first["done"] is True
    assert (first["timesteps_total"], first["episodes_total"]) == (7, 3)
    assert first["neg_mean_loss"] == 9.0
    assert (first["time_this_iter_s"], first["time_total_s"], second["time_total_s"]) == (2.5, 2.5, 5.0)
    assert second["time_since_restore"] == 5.0
    assert t.iteration == 2 and second["iterations_since_restore"] == 2


def test_timesteps_and_episodes_totals_count_increments_only(tmp_path):
    t = Scripted(
        {
            "results": [
                {"timesteps_this_iter": 10, "episodes_this_iter": 2},
                {"timesteps_this_iter": 5},
                {"timesteps_this_iter": 1, "timesteps_total": 1000},
                {},
            ]
        },
        logdir=str(tmp_path),
    )
    r1, r2, r3, r4 = (t.train() for _ in range(4))
    assert (r1["timesteps_total"], r1["episodes_total"], r1["timesteps_since_restore"]) == (10, 2, 10)
    assert (r2["timesteps_total"], r2["episodes_total"], r2["timesteps_since_restore"]) == (15, 2, 15)
    assert r3["timesteps_total"] == 1000 and r3["timesteps_since_restore"] == 16
    assert r4["timesteps_total"] == 16  # the user's total never replaced the internal one


def test_neg_mean_loss_only_for_a_truthy_mean_loss(tmp_path):
    t = Scripted({"results": [{"mean_loss": 2.0}, {"mean_loss": 0}]}, logdir=str(tmp_path))
    assert t.train()["neg_mean_loss"] == -2.0
    assert "neg_mean_loss" not in t.train()


def test_step_must_return_a_dict(tmp_path):
    t = Scripted({"results": [[("value", 1)]]}, logdir=str(tmp_path))
    with pytest.raises(TypeError, match="must return a dict"):
        t.train()


def test_duplicate_result_is_returned_untouched_and_counts_nothing(tmp_path):
    logged = []

    class Logged(Scripted):
        def log_result(self, result):
            logged.append(result)

    duplicate = {RESULT_DUPLICATE: True, "value": 1}
    t = Logged({"results": [{"value": 1}, duplicate]}, logdir=str(tmp_path))
    t.train()
    out = t.train()
    assert out is duplicate and out == {RESULT_DUPLICATE: True, "value": 1}
    assert t.iteration == 1 and len(logged) == 1


def test_step_exception_propagates(tmp_path):
    class Failing(Trainable):
        def step(self):
            raise ZeroDivisionError("bad step")

    with pytest.raises(ZeroDivisionError, match="bad step"):
        Failing(logdir=str(tmp_path)).train()


def test_logger_creator_receives_every_result_and_is_closed(tmp_path):
    class ListLogger:
        def __init__(self, config, logdir):
            self.config, self.logdir, self.results, self.calls = config, logdir, [], []

        def on_result(self, result):
            self.results.append(result)

        def flush(self):
            self.calls.append("flush")

        def close(self):
            self.calls.append("close")

    loggers = []

    def creator(config):
        loggers.append(ListLogger(config, str(tmp_path / f"logger{len(loggers)}")))
        return loggers[-1]

    t = Counter({"a": 1}, logger_creator=creator)
    assert t.logdir == str(tmp_path / "logger0") and os.path.isdir(t.logdir)
    results = [t.train(), t.train()]
    assert loggers[0].results == results and loggers[0].config == {"a": 1}
    t.stop()
    t.stop()
    assert loggers[0].calls == ["flush", "close"]


def test_train_buffered_stops_at_done_checkpoint_duplicate_and_length(tmp_path):
    t = Scripted({"results": [{}, {}, {"should_checkpoint": True}, {}, {"done": True}, {}]}, logdir=str(tmp_path))
    assert [r["training_iteration"] for r in t.train_buffered(60)] == [1, 2, 3]
    assert [r["training_iteration"] for r in t.train_buffered(60)] == [4, 5]
    assert len(t.train_buffered(0)) == 1  # always at least one result

    t = Scripted({"results": [{}] * 10}, logdir=str(tmp_path))
    assert len(t.train_buffered(60, max_buffer_length=4)) == 4

    t = Scripted({"results": [{}, {RESULT_DUPLICATE: True}, {}]}, logdir=str(tmp_path))
    assert len(t.train_buffered(60)) == 2


def test_train_buffered_returns_after_the_buffer_time(tmp_path):
    class Slow(Trainable):
        def step(self):
            time.sleep(0.02)
            return {}

    t = Slow(logdir=str(tmp_path))
    start = time.monotonic()
    results = t.train_buffered(0.1)
    assert 0.1 <= time.monotonic() - start < 1.0
    assert 2 <= len(results) <= 8


def test_legacy_method_names_are_called_with_a_deprecation_warning(tmp_path):
    calls = []

    class Legacy(Trainable):
        def _setup(self, config):
            calls.append(("setup", config))
            self.value = 0

        def _train(self):
            self.value += 1
            return {"value": self.value}

        def _save(self, checkpoint_dir):
            return {"value": self.value}

        def _restore(self, checkpoint):
            self.value = checkpoint["value"]

        def _log_result(self, result):
            calls.append(("log", result["value"]))

        def _stop(self):
            calls.append(("stop",))

    with pytest.warns(DeprecationWarning) as record:
        t = Legacy({"x": 1}, logdir=str(tmp_path / "a"))
        t.train()
        t.train()
        path = t.save()
        other = Legacy(logdir=str(tmp_path / "b"))
        other.restore(path)
        assert other.train()["value"] == 3
        other.stop()
    names = sorted({str(w.message).split(" ")[0] for w in record})
    assert names == [
        "Legacy._log_result",
        "Legacy._restore",
        "Legacy._save",
        "Legacy._setup",
        "Legacy._stop",
        "Legacy._train",
    ]
    # once per instance: t trained twice but warned once for _train
    assert sum("Legacy._train" in str(w.message) for w in record) == 2
    assert calls == [("setup", {"x": 1}), ("log", 1), ("log", 2), ("setup", {}), ("log", 3), ("stop",)]


def test_modern_names_raise_no_deprecation_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        t = Counter(logdir=str(tmp_path))
        t.train()
        t.stop()


def test_missing_overrides_raise_not_implemented(tmp_path):
    t = Trainable(logdir=str(tmp_path))
    with pytest.raises(NotImplementedError, match="step"):
        t.train()
    with pytest.raises(NotImplementedError, match="save_checkpoint"):
        t.save()
    assert t.reset_config({}) is False
    assert Trainable.default_resource_request({}) is None


def test_reset_restarts_counters_only_when_reset_config_succeeds(tmp_path):
    class Resettable(Counter):
        def reset_config(self, new_config):
            self.value = new_config.get("start", 0)
            return True

    t = Counter({"start": 0}, logdir=str(tmp_path))
    t.train()
    t.train()
    assert t.reset({"start": 5}) is False
    assert t.config == {"start": 5} and t.iteration == 2

    t = Resettable({"start": 0}, logdir=str(tmp_path))
    t.train()
    t.train()
    assert t.reset({"start": 5}) is True
    r = t.train()
    assert (r["value"], r["training_iteration"], r["iterations_since_restore"]) == (6, 1, 1)
    assert r["time_total_s"] == r["time_this_iter_s"] and r["config"] == {"start": 5}


def test_stop_calls_cleanup_once(tmp_path):
    cleaned = []

    class Cleaned(Counter):
        def cleanup(self):
            cleaned.append(self.value)

    t = Cleaned(logdir=str(tmp_path))
    t.train()
    t.stop()
    t.stop()
    assert cleaned == [1]


def test_export_model_passes_formats_and_dir(tmp_path):
    class Exporting(Counter):
        def _export_model(self, export_formats, export_dir):
            return {fmt: os.path.join(export_dir, fmt) for fmt in export_formats}

    t = Exporting(logdir=str(tmp_path))
    assert t.export_model("onnx") == {"onnx": os.path.join(str(tmp_path), "onnx")}
    assert t.export_model(["a", "b"], "/x") == {"a": "/x/a", "b": "/x/b"}
    assert Counter(logdir=str(tmp_path)).export_model("onnx") == {}


def test_train_overhead_is_below_100_microseconds(tmp_path):
    class Noop(Trainable):
        def step(self):
            return {}

    t = Noop(logdir=str(tmp_path))
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(2000):
            t.train()
        batches.append((time.perf_counter() - start) / 2000)
    assert min(batches) < 100e-6, f"train() overhead {min(batches) * 1e6:.1f} us per iteration"
