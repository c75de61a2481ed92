"""kubetune.sdk.analysis: Ray's ExperimentAnalysis and ResultGrid over trial directories written by the real
writers (ResultLog, commit_checkpoint, error.txt as the runtime writes it), on file:// and moto's S3."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest_storage import aws_env, moto_endpoint, new_bucket  # noqa: F401 - fixtures

from kubetune import Checkpoint
from kubetune.checkpoint_store import COMMIT_MARKER, checkpoint_uri, commit_checkpoint
from kubetune.runtime.results import ResultLog
from kubetune.sdk.analysis import ExperimentAnalysis, ResultGrid, StoredCheckpoint, TrialRecord
from kubetune.storage import file_uri_path, join_uri, open_storage

UID = "0a1b2c3d"


@pytest.fixture(params=["file", "s3"])
def root(request, tmp_path, aws_env):  # noqa: F811 - fixture
    """``(storage root URI, storage_endpoint)`` for each scheme."""
    if request.param == "file":
        return f"file://{tmp_path / 'store'}", None
    endpoint = request.getfixturevalue("moto_endpoint")
    return f"s3://{new_bucket(endpoint)}/kubetune", endpoint


@pytest.fixture
def file_root(tmp_path):
    return f"file://{tmp_path / 'store'}"


def write_trial(
    exp_uri: str,
    name: str,
    metrics: list[dict],
    *,
    config: dict | None = None,
    endpoint: str | None = None,
    error: str | None = None,
    checkpoints: tuple[int, ...] = (),
    workdir: Path,
) -> str:
    """Write one trial as the runtime does: params.json, result.json/progress.csv through ResultLog (Ray's
    auto-filled fields included), committed checkpoints, error.txt. Returns the trial dir URI."""
    config = {"lr": 0.1} if config is None else config
    trial_uri = join_uri(exp_uri, name)
    storage = open_storage(trial_uri, endpoint)
    storage.put_bytes(join_uri(trial_uri, "params.json"), json.dumps(config).encode())
    log = ResultLog(storage, trial_uri, workdir / name / "results")
    for i, result in enumerate(metrics, 1):
        log.append(
            {
                **result,
                "training_iteration": i,
                "done": i == len(metrics),
                "trial_id": name,
                "config": config,
                "time_total_s": 0.5 * i,
            }
        )
        if i in checkpoints:
            log.sync()  # the runtime syncs the log before each commit
            local = workdir / name / f"checkpoint_{i:06d}"
            local.mkdir(parents=True, exist_ok=True)
            (local / "state.txt").write_text(f"{name} at {i}")
            commit_checkpoint(storage, local, checkpoint_uri(trial_uri, i), {"iteration": i, "path": "state.txt"})
    log.sync()
    log.close()
    if error is not None:
        storage.put_bytes(join_uri(trial_uri, "error.txt"), f"Failure in attempt 0 of trial {name}:\n{error}".encode())
    return trial_uri


def series(values: list[float], key: str = "score") -> list[dict]:
    return [{key: v, "loss": -v} for v in values]


# Each trial wins exactly one scope in mode "max" (12 results each); "loss" is -score, so in mode "min"
# the same trial wins on loss.
SCOPE_WINNERS = {
    "all": [120] + [0] * 11,  # max 120; avg 10
    "avg": [100, 100] + [0] * 10,  # avg 16.7
    "last-10-avg": [0, 0] + [15] * 5 + [0] * 5,  # last 10: 7.5
    "last-5-avg": [0] * 7 + [8] * 4 + [0],  # last 5: 6.4
    "last": [0] * 11 + [5],  # last 5
}


@pytest.fixture
def scopes_exp(root, tmp_path):
    base, endpoint = root
    exp = join_uri(base, "team", "scopes", UID)
    for index, values in enumerate(SCOPE_WINNERS.values()):
        write_trial(
            exp,
            f"scopes-{index:05d}",
            series(values),
            config={"lr": index / 10},
            endpoint=endpoint,
            workdir=tmp_path / "w",
        )
    return join_uri(base, "team", "scopes"), endpoint


@pytest.mark.parametrize("scope", list(SCOPE_WINNERS))
def test_best_trial_by_every_scope_and_mode(scopes_exp, scope):
    path, endpoint = scopes_exp
    analysis = ExperimentAnalysis(path, storage_endpoint=endpoint)
    winner = f"scopes-{list(SCOPE_WINNERS).index(scope):05d}"
    assert analysis.get_best_trial("score", "max", scope=scope).trial_id == winner
    assert analysis.get_best_trial("loss", "min", scope=scope).trial_id == winner
    # Every trial reported score 0 somewhere, and four end at 0: ties go to the first trial.
    if scope in ("all", "last"):
        assert analysis.get_best_trial("score", "min", scope=scope).trial_id == "scopes-00000"
        assert analysis.get_best_trial("loss", "max", scope=scope).trial_id == "scopes-00000"


@pytest.mark.parametrize("n", [5, 10])
def test_average_windows_are_exactly_5_and_10(file_root, tmp_path, n):
    """A wins over the last n results only; B over the last n-1 and the last n+1."""
    exp = join_uri(file_root, "team", f"win{n}", UID)
    write_trial(exp, "win-00000", series([0] * (19 - n) + [-1000] + [10] * n), workdir=tmp_path)
    write_trial(exp, "win-00001", series([0] * (20 - n) + [-100] + [11] * (n - 1)), workdir=tmp_path)
    analysis = ExperimentAnalysis(exp)
    assert analysis.get_best_trial("score", "max", scope=f"last-{n}-avg").trial_id == "win-00000"
    assert analysis.get_best_trial("loss", "min", scope=f"last-{n}-avg").trial_id == "win-00000"
    assert analysis.get_best_trial("score", "max", scope="last").trial_id == "win-00001"


def test_loading_and_ray_members(scopes_exp):
    path, endpoint = scopes_exp
    analysis = ExperimentAnalysis(path, "score", "max", storage_endpoint=endpoint)
    assert analysis.experiment_path == join_uri(path, UID)
    assert [t.trial_id for t in analysis.trials] == [f"scopes-{i:05d}" for i in range(5)]
    trial = analysis.trials[4]
    assert isinstance(trial, TrialRecord)
    assert trial.path == trial.logdir == join_uri(path, UID, "scopes-00004")
    assert trial.config == {"lr": 0.4} and trial.status == "TERMINATED" and trial.error is None
    assert trial.last_result["training_iteration"] == 12 and trial.last_result["done"] is True
    assert analysis.results["scopes-00004"]["score"] == 5
    assert analysis.best_trial is trial and analysis.best_config == {"lr": 0.4}
    assert analysis.best_logdir == trial.path
    assert analysis.best_result["score"] == 5
    assert analysis.get_best_config("score", "max", "all") == {"lr": 0.0}
    assert analysis.get_best_logdir("loss", "min", "avg") == analysis.trials[1].path
    assert (
        analysis.get_all_configs()
        == analysis.configs
        == {t.path: {"lr": i / 10} for i, t in enumerate(analysis.trials)}
    )
    assert analysis.get_all_configs(prefix=True)[trial.path] == {"config/lr": 0.4}
    best_df = analysis.best_result_df
    assert list(best_df.index) == ["scopes-00004"] and best_df.index.name == "trial_id"
    assert best_df.loc["scopes-00004", "score"] == 5 and best_df.loc["scopes-00004", "config/lr"] == 0.4
    assert list(analysis.best_dataframe["score"]) == SCOPE_WINNERS["last"]


def test_bad_arguments_give_rays_errors(scopes_exp):
    path, endpoint = scopes_exp
    analysis = ExperimentAnalysis(path, storage_endpoint=endpoint)
    with pytest.raises(ValueError, match=r"scope median not in \[\"all\", \"last\""):
        analysis.get_best_trial("score", "max", scope="median")
    with pytest.raises(ValueError, match=r"If set, `mode` has to be one of \[min, max\]"):
        analysis.get_best_trial("score", "maximum")
    with pytest.raises(ValueError, match="No `metric` has been passed and `default_metric` has not been set"):
        analysis.get_best_trial(mode="max")
    with pytest.raises(ValueError, match="No `mode` has been passed and `default_mode` has not been set"):
        analysis.get_best_trial("score")
    for prop in (
        "best_trial",
        "best_config",
        "best_logdir",
        "best_checkpoint",
        "best_dataframe",
        "best_result",
        "best_result_df",
    ):
        with pytest.raises(ValueError, match=f"To fetch the `{prop}`, pass a `metric` and `mode`"):
            getattr(analysis, prop)
    with pytest.raises(ValueError, match="you'll also have to pass a `metric`"):
        analysis.dataframe(mode="max")
    with pytest.raises(ValueError, match=r"`mode` has to be one of \[min, max\]"):
        analysis.dataframe("score", "best")
    with pytest.raises(ValueError, match="`default_mode` has to be None or one of"):
        ExperimentAnalysis(path, "score", "maximize", storage_endpoint=endpoint)
    grid = ResultGrid(analysis)
    with pytest.raises(ValueError, match="No metric is provided"):
        grid.get_best_result(mode="max")
    with pytest.raises(ValueError, match="No mode is provided"):
        grid.get_best_result("score")


def test_nan_and_inf_are_filtered(file_root, tmp_path):
    exp = join_uri(file_root, "team", "nan", UID)
    write_trial(exp, "nan-00000", series([50, math.nan]), workdir=tmp_path)
    write_trial(exp, "nan-00001", series([1, math.inf]), workdir=tmp_path)
    write_trial(exp, "nan-00002", series([3, 3]), workdir=tmp_path)
    analysis = ExperimentAnalysis(join_uri(file_root, "team", "nan"))
    assert math.isnan(analysis.trials[0].last_result["score"])  # Python's json wrote NaN and read it back
    assert analysis.get_best_trial("score", "max").trial_id == "nan-00002"
    assert analysis.get_best_trial("score", "min").trial_id == "nan-00002"
    # Unfiltered, Ray keeps the first trial's NaN: no comparison with NaN is true.
    assert analysis.get_best_trial("score", "max", filter_nan_and_inf=False).trial_id == "nan-00000"
    # "all": the NaN is ignored within the trial (max 50); the infinite max is filtered out.
    assert analysis.get_best_trial("score", "max", scope="all").trial_id == "nan-00000"
    # avg of [1, inf] is inf, of [50, NaN] NaN: both filtered.
    assert analysis.get_best_trial("score", "max", scope="avg").trial_id == "nan-00002"
    frame = analysis.dataframe("score", "max").set_index("trial_id")
    assert frame.loc["nan-00000", "score"] == 50 and frame.loc["nan-00000", "training_iteration"] == 1
    assert frame.loc["nan-00001", "score"] == math.inf

    only_nan = join_uri(file_root, "team", "allnan", UID)
    write_trial(only_nan, "allnan-00000", series([math.nan, math.nan]), workdir=tmp_path)
    write_trial(only_nan, "allnan-00001", series([math.nan]), workdir=tmp_path)
    grid = ResultGrid(ExperimentAnalysis(only_nan, "score", "max"))
    with pytest.raises(RuntimeError, match="all values reported for this metric are NaN"):
        grid.get_best_result()
    assert math.isnan(grid.get_best_result(filter_nan_and_inf=False).metrics["score"])
    assert ExperimentAnalysis(only_nan).dataframe("score", "max").empty  # no numeric value: left out
    assert ExperimentAnalysis(only_nan).get_best_trial("missing", "max") is None


def test_dataframes_flatten_nested_keys_and_config(root, tmp_path):
    base, endpoint = root
    exp = join_uri(base, "team", "frames", UID)
    config = {"lr": 0.01, "model": {"layers": 3}}
    for index, scale in enumerate((1, 2)):
        metrics = [{"acc": scale * v, "a": {"b": scale * 10 * v}} for v in (0.2, 0.9, 0.5)]
        write_trial(
            exp, f"frames-{index:05d}", metrics, config={**config, "seed": index}, endpoint=endpoint, workdir=tmp_path
        )
    analysis = ExperimentAnalysis(exp, storage_endpoint=endpoint)
    last = analysis.dataframe()
    assert {"config/lr", "config/model/layers", "config/seed", "a/b", "acc", "logdir", "trial_id"} <= set(last)
    assert "config" not in last and "a" not in last
    assert list(last["acc"]) == [0.5, 1.0] and list(last["a/b"]) == [5.0, 10.0]
    assert list(last["config/seed"]) == [0, 1] and list(last["config/model/layers"]) == [3, 3]
    assert list(last["logdir"]) == [t.path for t in analysis.trials]
    best = analysis.dataframe("a/b", "max")  # nested metric, best row of each trial
    assert list(best["training_iteration"]) == [2, 2] and list(best["acc"]) == [0.9, 1.8]
    worst = analysis.dataframe("acc", "min")
    assert list(worst["training_iteration"]) == [1, 1]
    assert list(analysis.dataframe("acc").training_iteration) == [3, 3]  # metric without mode: last result

    frames = analysis.trial_dataframes
    assert list(frames) == [t.path for t in analysis.trials]
    first = frames[analysis.trials[0].path]
    assert list(first["acc"]) == [0.2, 0.9, 0.5] and list(first["a/b"]) == [2.0, 9.0, 5.0]
    assert list(first["training_iteration"]) == [1, 2, 3] and list(first["config/model/layers"]) == [3, 3, 3]

    results = analysis.results_df
    assert results.index.name == "trial_id" and list(results.index) == ["frames-00000", "frames-00001"]
    assert results.loc["frames-00001", "config/seed"] == 1 and results.loc["frames-00001", "a/b"] == 10.0
    assert analysis.get_best_trial("a/b", "max", scope="avg").trial_id == "frames-00001"

    grid = ResultGrid(analysis)
    assert grid.get_dataframe("acc", "max")["acc"].tolist() == [0.9, 1.8]
    assert grid[1].metrics_dataframe["acc"].tolist() == [0.4, 1.8, 1.0]


def test_best_checkpoint_by_the_result_of_its_iteration(root, tmp_path):
    base, endpoint = root
    exp = join_uri(base, "team", "ckpt", UID)
    trial_uri = write_trial(
        exp, "ckpt-00000", series([1, 5, 2, 9, 3, 7]), endpoint=endpoint, checkpoints=(2, 4, 6), workdir=tmp_path / "a"
    )
    storage = open_storage(trial_uri, endpoint)
    # A second commit of iteration 6 (the runtime's forced checkpoint at the end) replaces it...
    again = tmp_path / "again" / "checkpoint_000006"
    again.mkdir(parents=True)
    (again / "state.txt").write_text("ckpt-00000 at 6, again")
    newer = commit_checkpoint(storage, again, checkpoint_uri(trial_uri, 6), {"iteration": 6})
    assert newer.endswith("checkpoint_000006.1")
    # ...and an upload cut before its marker does not exist.
    storage.put_bytes(join_uri(trial_uri, "checkpoint_000005", "state.txt"), b"cut")

    analysis = ExperimentAnalysis(join_uri(base, "team", "ckpt"), storage_endpoint=endpoint)
    assert analysis.get_trial_checkpoints_paths("ckpt-00000", "score") == [
        (checkpoint_uri(trial_uri, 2), 5),
        (checkpoint_uri(trial_uri, 4), 9),
        (newer, 7),
    ]
    assert [v for _, v in analysis.get_trial_checkpoints_paths(trial_uri)] == [2, 4, 6]  # training_iteration

    best = analysis.get_best_checkpoint(analysis.trials[0], "score", "max")
    assert isinstance(best, Checkpoint) and best.uri == checkpoint_uri(trial_uri, 4)
    assert Path(best.path, "state.txt").read_text() == "ckpt-00000 at 4"
    assert not Path(best.path, COMMIT_MARKER).exists()
    assert Path(best.to_directory(tmp_path / "copy"), "state.txt").read_text() == "ckpt-00000 at 4"
    worst = analysis.get_best_checkpoint(trial_uri, "score", "min")
    assert Path(worst.path, "state.txt").read_text() == "ckpt-00000 at 2"
    latest = analysis.get_best_checkpoint("ckpt-00000", mode="max")  # no metric: training_iteration
    assert Path(latest.path, "state.txt").read_text() == "ckpt-00000 at 6, again"
    assert analysis.get_best_checkpoint("ckpt-00000", "missing", "max") is None
    with pytest.raises(ValueError, match="No `mode` has been passed"):
        analysis.get_best_checkpoint("ckpt-00000", "score")
    with pytest.raises(ValueError, match="no trial named"):
        analysis.get_best_checkpoint("ckpt-99999", "score", "max")

    defaults = ExperimentAnalysis(join_uri(base, "team", "ckpt"), "loss", "min", storage_endpoint=endpoint)
    assert defaults.best_checkpoint.uri == checkpoint_uri(trial_uri, 4)

    result = ResultGrid(analysis)[0]
    assert isinstance(result.checkpoint, StoredCheckpoint) and result.checkpoint.uri == newer
    assert result.checkpoint._path is None  # listed, not downloaded yet
    with result.checkpoint.as_directory() as directory:
        assert Path(directory, "state.txt").read_text() == "ckpt-00000 at 6, again"
    assert [(c.uri, m["score"]) for c, m in result.best_checkpoints] == [
        (checkpoint_uri(trial_uri, 2), 5),
        (checkpoint_uri(trial_uri, 4), 9),
        (newer, 7),
    ]


def test_failed_trials_and_result_grid(root, tmp_path):
    base, endpoint = root
    exp = join_uri(base, "team", "errs", UID)
    write_trial(exp, "errs-00000", series([1, 2]), endpoint=endpoint, workdir=tmp_path)
    write_trial(
        exp, "errs-00001", series([4]), endpoint=endpoint, error="ValueError: boom at iteration 2", workdir=tmp_path
    )
    write_trial(exp, "errs-00002", series([3, 3, 3]), endpoint=endpoint, workdir=tmp_path)
    analysis = ExperimentAnalysis(join_uri(base, "team", "errs"), "score", "max", storage_endpoint=endpoint)
    failed = analysis.trials[1]
    assert failed.status == "ERROR" and "ValueError: boom at iteration 2" in failed.error
    assert [t.status for t in analysis.trials] == ["TERMINATED", "ERROR", "TERMINATED"]

    grid = ResultGrid(analysis)
    assert len(grid) == 3 and grid.num_errors == 1 and grid.num_terminated == 2
    assert grid.experiment_path == join_uri(base, "team", "errs", UID)
    assert [type(e) for e in grid.errors] == [RuntimeError] and "boom at iteration 2" in str(grid.errors[0])
    results = list(grid)
    assert [r.error is None for r in results] == [True, False, True]
    assert "boom" in str(grid[1].error) and grid[-1].path == analysis.trials[2].path
    best = grid.get_best_result()  # the failed trial's 4 is its last value: it takes part, as in Ray
    assert best.path == failed.path and best.metrics["score"] == 4 and best.config == {"lr": 0.1}
    assert grid.get_best_result("score", "min").metrics["trial_id"] == "errs-00000"
    assert best.checkpoint is None and best.best_checkpoints == []

    # The SDK's view wins: errs-00001's error.txt was left by an attempt before a successful retry, and
    # errs-00003 failed before writing anything.
    told = ExperimentAnalysis(
        join_uri(base, "team", "errs"),
        storage_endpoint=endpoint,
        trial_errors={"errs-00002": "OOMKilled", "errs-00003": "ImagePullBackOff"},
    )
    assert [(t.trial_id, t.error) for t in told.trials] == [
        ("errs-00000", None),
        ("errs-00001", None),
        ("errs-00002", "OOMKilled"),
        ("errs-00003", "ImagePullBackOff"),
    ]
    ghost = told.trials[3]
    assert ghost.config == {} and ghost.last_result == {} and ghost.path == join_uri(exp, "errs-00003")
    assert ResultGrid(told).num_errors == 2
    assert len(told.dataframe()) == 3  # a trial without results has no row


def test_trial_without_results_reads_params_json(file_root, tmp_path):
    exp = join_uri(file_root, "team", "early", UID)
    write_trial(exp, "early-00000", [], config={"lr": 0.5, "units": [8, 16]}, workdir=tmp_path, error="setup() failed")
    analysis = ExperimentAnalysis(exp)
    trial = analysis.trials[0]
    assert trial.config == {"lr": 0.5, "units": [8, 16]} and trial.last_result == {}
    assert trial.status == "ERROR" and analysis.results == {"early-00000": {}}
    assert analysis.dataframe().empty and analysis.get_best_trial("score", "max") is None
    assert list(analysis.results_df.index) == ["early-00000"]


def test_experiment_path_resolution(file_root, tmp_path):
    exp = join_uri(file_root, "team", "twice")
    old = write_trial(join_uri(exp, "11111111"), "twice-00000", series([1]), workdir=tmp_path / "o")
    new = write_trial(join_uri(exp, "00000000"), "twice-00000", series([2]), workdir=tmp_path / "n")
    stale = time.time() - 3600
    for path in Path(old[len("file://") :]).rglob("*"):
        os.utime(path, (stale, stale))
    # Two runs of the Experiment under its name: the one written last is read, whatever the names' order.
    analysis = ExperimentAnalysis(exp)
    assert analysis.experiment_path == join_uri(exp, "00000000")
    assert analysis.trials[0].path == new and analysis.results["twice-00000"]["score"] == 2
    # A uid folder is read as given, also with a trailing slash, and a local path as its file:// URI.
    assert ExperimentAnalysis(join_uri(exp, "11111111") + "/").results["twice-00000"]["score"] == 1
    local = ExperimentAnalysis(str(tmp_path / "store" / "team" / "twice"))
    assert local.experiment_path == join_uri(exp, "00000000") and local.trials[0].path == new

    with pytest.raises(FileNotFoundError, match="no objects under"):
        ExperimentAnalysis(join_uri(file_root, "team", "nothing"))
    open_storage(file_root).put_bytes(join_uri(file_root, "team", "junk", "notes.txt"), b"x")
    with pytest.raises(ValueError, match="holds no trial directory"):
        ExperimentAnalysis(join_uri(file_root, "team", "junk"))
    with pytest.raises(ValueError, match="unsupported storage URI scheme"):
        ExperimentAnalysis("gs://bucket/team/exp")


def test_single_uid_folder_on_s3_and_its_newest_choice(moto_endpoint, aws_env, tmp_path):  # noqa: F811
    base = f"s3://{new_bucket(moto_endpoint)}/kubetune"
    exp = join_uri(base, "team", "s3exp")
    write_trial(join_uri(exp, "ffffffff"), "s3exp-00000", series([1]), endpoint=moto_endpoint, workdir=tmp_path)
    assert ExperimentAnalysis(exp, storage_endpoint=moto_endpoint).experiment_path == join_uri(exp, "ffffffff")
    time.sleep(1.1)  # S3's LastModified has a resolution of one second
    write_trial(join_uri(exp, "00000000"), "s3exp-00000", series([2]), endpoint=moto_endpoint, workdir=tmp_path)
    analysis = ExperimentAnalysis(exp, storage_endpoint=moto_endpoint)
    assert analysis.experiment_path == join_uri(exp, "00000000") and analysis.results["s3exp-00000"]["score"] == 2


def test_module_does_not_import_pandas():
    """The trial pod has no pandas: importing (and loading without frames) must not need it."""
    code = "import sys, kubetune.analysis; assert 'pandas' not in sys.modules, 'pandas imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_multi_objective_experiment_has_no_single_best_but_a_pareto_front(file_root, tmp_path):
    exp = join_uri(file_root, "team", "moo", UID)
    for i, (loss, latency) in enumerate([(1.0, 5.0), (2.0, 2.0), (3.0, 3.0), (5.0, 1.0), (math.nan, 0.1), (2.0, 2.0)]):
        write_trial(exp, f"moo-{i:05d}", [{"loss": loss, "latency": latency}], workdir=tmp_path)
    write_trial(exp, "moo-00006", [{"loss": 0.0, "latency": 0.0}], error="boom", workdir=tmp_path)
    analysis = ExperimentAnalysis(exp, ["loss", "latency"], ["min", "min"])
    assert analysis.objectives == (("loss", "latency"), ("min", "min"))
    assert analysis.default_metric is None and analysis.default_mode is None
    # non-dominated, ties kept, NaN and failed trials left out
    assert [t.trial_id for t in analysis.pareto_front] == ["moo-00000", "moo-00001", "moo-00003", "moo-00005"]
    grid = ResultGrid(analysis)
    assert [r.metrics["loss"] for r in grid.pareto_front] == [1.0, 2.0, 5.0, 2.0]
    message = r"several objectives \(metric=\['loss', 'latency'\], mode=\['min', 'min'\]\): pass `metric` and `mode`"
    with pytest.raises(ValueError, match=message):
        grid.get_best_result()
    with pytest.raises(ValueError, match=message):
        analysis.get_best_trial()
    with pytest.raises(ValueError, match=message):
        analysis.best_config  # noqa: B018 - the property raises
    assert grid.get_best_result("latency", "min").metrics["latency"] == 0.0  # one objective, any trial, as in Ray
    with pytest.raises(ValueError, match="one objective"):
        ExperimentAnalysis(exp, "loss", "min").pareto_front  # noqa: B018 - the property raises
    with pytest.raises(ValueError, match="mode must give one of max/min per metric"):
        ExperimentAnalysis(exp, ["loss", "latency"], ["min"])


def test_a_single_trial_is_the_best_result_whatever_the_metric_and_repr_hides_auto_filled_keys(file_root, tmp_path):
    # issue 23: Ray's ResultGrid returns the only trial without asking for a metric, and Result's repr
    # shows what the trainable reported, not the fields every result gets
    exp = join_uri(file_root, "team", "single", UID)
    write_trial(exp, "single-00000", series([math.nan, 2.0]), workdir=tmp_path)
    grid = ResultGrid(ExperimentAnalysis(exp))
    best = grid.get_best_result()
    assert best.metrics["score"] == 2.0 and grid.get_best_result("missing", "min").metrics["score"] == 2.0
    text = repr(best)
    assert text.startswith("Result(\n  metrics={") and "'score': 2.0" in text and "'loss': -2.0" in text
    for hidden in ("training_iteration", "time_total_s", "date", "pid", "hostname", "config", "trial_id"):
        assert f"'{hidden}'" not in text, hidden
    assert f"path={best.path!r}" in text and "error" not in text


def test_a_trial_has_a_checkpoint_once_one_is_committed(file_root, tmp_path):
    # Ray's Trial.has_checkpoint(), which Ray's PBT end-to-end tests assert on tune.run's trials
    exp = join_uri(file_root, "team", "has", UID)
    write_trial(exp, "has-00000", series([1, 2]), checkpoints=(2,), workdir=tmp_path / "a")
    write_trial(exp, "has-00001", series([1, 2]), workdir=tmp_path / "b")
    with_one, without = ExperimentAnalysis(exp).trials
    assert with_one.has_checkpoint() and not without.has_checkpoint()


def test_last_checkpoint_and_evaluated_params(file_root, tmp_path):
    # issue 23: Ray 2.x's get_last_checkpoint (highest iteration; without a trial, the trial that ran
    # longest) and Trial.evaluated_params (the searched values, keyed by path)
    exp = join_uri(file_root, "team", "last", UID)
    config = {"lr": 0.1, "net": {"width": 64, "act": "relu"}, "epochs": 3}
    write_trial(exp, "last-00000", series([1, 9, 2]), config=config, checkpoints=(1, 3), workdir=tmp_path / "a")
    write_trial(exp, "last-00001", series([5, 6]), config=config, checkpoints=(1, 2), workdir=tmp_path / "b")
    space = {"lr": {"loguniform": [1e-4, 1]}, "net": {"width": {"grid_search": [64, 128]}, "act": "relu"}, "epochs": 3}
    analysis = ExperimentAnalysis(exp, param_space=space)
    assert analysis.get_last_checkpoint().uri.endswith("last-00000/checkpoint_000003")
    assert analysis.get_last_checkpoint("last-00001").uri.endswith("last-00001/checkpoint_000002")
    assert analysis.get_last_checkpoint(metric="score", mode="max").uri.endswith("last-00001/checkpoint_000002")
    assert analysis.trials[0].evaluated_params == {"lr": 0.1, "net/width": 64}
    assert ExperimentAnalysis(exp).trials[0].evaluated_params == {
        "lr": 0.1,
        "net/width": 64,
        "net/act": "relu",
        "epochs": 3,
    }


def test_a_reread_takes_the_trials_listed_as_before_from_the_previous_reading(file_root, tmp_path):
    """reread() (previous=self) reads again only the trials whose objects' stamps changed: a file rewritten with the
    same size and modification time (which a listing cannot tell apart) is taken from the previous reading; a trial
    written again, a new trial and a new error are read."""
    exp = join_uri(file_root, "team", "live", UID)
    for i in range(3):
        write_trial(exp, f"live-{i:05d}", [{"score": i}], workdir=tmp_path / "a")
    first = ExperimentAnalysis(exp, "score", "max")
    assert first.dataframe()["score"].tolist() == [0, 1, 2]  # results parsed: kept as rows
    hidden = Path(file_uri_path(join_uri(exp, "live-00000", "result.json")))
    stat = hidden.stat()
    hidden.write_bytes(hidden.read_bytes().replace(b'"score": 0', b'"score": 7'))
    os.utime(hidden, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    write_trial(exp, "live-00001", [{"score": 1}, {"score": 5}], workdir=tmp_path / "b")
    write_trial(exp, "live-00003", [{"score": 3}], workdir=tmp_path / "a")
    Path(file_uri_path(join_uri(exp, "live-00002", "error.txt"))).write_text("OOMKilled")
    again = first.reread()
    assert {t.trial_id: t.last_result["score"] for t in again.trials} == {
        "live-00000": 0,  # as first read
        "live-00001": 5,
        "live-00002": 2,
        "live-00003": 3,
    }
    assert [t.error for t in again.trials] == [None, None, "OOMKilled", None]
    assert again.metric_history("live-00001", "score") == [(1, 1), (2, 5)]
    assert again.metric_history("live-00000", "score") == [(1, 0)]
    assert first.metric_history("live-00000", "score") == [(1, 0)]  # the previous reading is left as it was
    fresh = ExperimentAnalysis(exp, "score", "max")
    assert fresh.metric_history("live-00000", "score") == [(1, 7)]  # what is stored now, read afresh
