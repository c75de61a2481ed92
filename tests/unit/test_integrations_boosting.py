"""Ray's XGBoost and LightGBM callbacks (``kubetune.integration.xgboost``, ``kubetune.integration.lightgbm``; issue
33) train real boosters on scikit-learn's bundled breast cancer data inside a function trainable, as in a trial pod
but without one: each round is one result whose metrics are the library's own ``evals_result`` values, the
checkpoints come at Ray's rounds and hold the booster of that round, and a trainable restored from one goes on to
the booster a straight run gives."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb
from conftest_callbacks import checkpoint_of, run
from sklearn.datasets import load_breast_cancer

import kubetune
from kubetune import wrap_function
from kubetune.env import RANK
from kubetune.integration import lightgbm as tune_lgb
from kubetune.integration import xgboost as tune_xgb

X, Y = load_breast_cancer(return_X_y=True)
TRAIN, VALID = slice(0, 400), slice(400, None)
XGB_PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "nthread": 1, "max_depth": 3}
LGB_PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "num_threads": 1, "verbose": -1}

#: Each training run's ``evals_result``, appended by the trainables below when their ``xgboost.train`` returns.
EVALS: list[dict] = []


def callback(module, config):
    """The callback ``config`` names (``"class"``, default ``TuneReportCheckpointCallback``) with its ``"kwargs"``:
    the config stays data, which a checkpoint's metadata pickles."""
    return getattr(module, config.get("class", "TuneReportCheckpointCallback"))(**config.get("kwargs", {}))


def train_xgboost(config):
    """Boost to ``config["rounds"]`` rounds in all, from the restored checkpoint's booster when there is one."""
    checkpoint = kubetune.get_checkpoint()
    booster = tune_xgb.TuneReportCheckpointCallback.get_model(checkpoint) if checkpoint else None
    dtrain, dvalid = xgb.DMatrix(X[TRAIN], Y[TRAIN]), xgb.DMatrix(X[VALID], Y[VALID])
    evals_result: dict = {}
    xgb.train(
        XGB_PARAMS,
        dtrain,
        num_boost_round=config["rounds"] - (booster.num_boosted_rounds() if booster else 0),
        evals=[(dtrain, "train"), (dvalid, "eval")],
        evals_result=evals_result,
        xgb_model=booster,
        callbacks=[callback(tune_xgb, config)],
        verbose_eval=False,
    )
    EVALS.append(evals_result)


def train_lightgbm(config):
    checkpoint = kubetune.get_checkpoint()
    booster = tune_lgb.TuneReportCheckpointCallback.get_model(checkpoint) if checkpoint else None
    dtrain = lgb.Dataset(X[TRAIN], Y[TRAIN])
    dvalid = lgb.Dataset(X[VALID], Y[VALID], reference=dtrain)
    evals_result: dict = {}
    lgb.train(
        LGB_PARAMS,
        dtrain,
        num_boost_round=config["rounds"] - (booster.current_iteration() if booster else 0),
        valid_sets=[dtrain, dvalid],
        valid_names=["train", "eval"],
        init_model=booster,
        callbacks=[callback(tune_lgb, config), lgb.record_evaluation(evals_result)],
    )
    EVALS.append(evals_result)


@pytest.fixture(autouse=True)
def _fresh_evals():
    EVALS.clear()


def per_round(evals_result: dict) -> list[dict]:
    """``{"eval": {"logloss": [r0, r1]}}`` → ``[{"eval-logloss": r0}, {"eval-logloss": r1}]``."""
    flat = {f"{d}-{m}": values for d, metrics in evals_result.items() for m, values in metrics.items()}
    return [{k: values[i] for k, values in flat.items()} for i in range(len(next(iter(flat.values()))))]


def test_xgboost_reports_each_rounds_evals_result_and_checkpoints_at_rays_rounds(tmp_path):
    callback = {"kwargs": dict(frequency=2)}
    results, saved = run(wrap_function(train_xgboost)({"rounds": 5, **callback}, logdir=str(tmp_path)))
    rounds = per_round(EVALS[0])
    assert len(rounds) == 5 and set(rounds[0]) == {"train-logloss", "train-error", "eval-logloss", "eval-error"}
    # rounds 1-5, then Ray's end-of-training report: the last round's metrics again, with the final booster
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4, 5, 6]
    for result, expected in zip(results, [*rounds, rounds[-1]]):
        assert {k: result[k] for k in expected} == expected
    assert [r["training_iteration"] for r in results if r.get("should_checkpoint")] == [2, 4, 6]
    # each checkpoint holds the booster of its round: rounds 2 and 4 (epochs 1 and 3), then all 5
    boosters = {i: tune_xgb.TuneReportCheckpointCallback.get_model(checkpoint_of(p)) for i, p in saved.items()}
    assert {i: b.num_boosted_rounds() for i, b in boosters.items()} == {2: 2, 4: 4, 6: 5}


def test_xgboost_skips_the_end_checkpoint_when_the_last_round_had_one_and_can_leave_it_out(tmp_path):
    every = {"kwargs": dict(frequency=5)}
    results, _ = run(wrap_function(train_xgboost)({"rounds": 5, **every}, logdir=str(tmp_path / "a")))
    assert [(r["training_iteration"], r.get("should_checkpoint", False)) for r in results] == [
        (1, False),
        (2, False),
        (3, False),
        (4, False),
        (5, True),
    ]
    never = {"kwargs": dict(checkpoint_at_end=False)}
    results, _ = run(wrap_function(train_xgboost)({"rounds": 3, **never}, logdir=str(tmp_path / "b")))
    assert len(results) == 3 and not any(r.get("should_checkpoint") for r in results)


def test_a_restored_xgboost_trial_goes_on_from_its_checkpoints_booster_to_the_straight_runs_model(tmp_path):
    callback = {"kwargs": dict(frequency=2, checkpoint_at_end=False)}
    config = {"rounds": 6, **callback}
    straight, saved = run(wrap_function(train_xgboost)(config, logdir=str(tmp_path / "straight")))
    resumed = wrap_function(train_xgboost)(config, logdir=str(tmp_path / "resumed"))
    resumed.restore(saved[4])
    results, resumed_saved = run(resumed)
    assert [r["training_iteration"] for r in results] == [5, 6]
    assert [{k: r[k] for k in ("eval-logloss", "eval-error")} for r in results] == [
        {k: r[k] for k in ("eval-logloss", "eval-error")} for r in straight[4:]
    ]
    dvalid = xgb.DMatrix(X[VALID])
    straight_model = tune_xgb.TuneReportCheckpointCallback.get_model(checkpoint_of(saved[6]))
    resumed_model = tune_xgb.TuneReportCheckpointCallback.get_model(checkpoint_of(resumed_saved[6]))
    assert resumed_model.num_boosted_rounds() == 6
    np.testing.assert_array_equal(resumed_model.predict(dvalid), straight_model.predict(dvalid))


def test_metrics_pick_and_rename_keys_and_the_postprocessing_fn_has_the_last_word(tmp_path):
    callback = {
        "kwargs": {
            "metrics": {"loss": "eval-logloss", "err": "eval-error"},
            "checkpoint_at_end": False,
            "results_postprocessing_fn": lambda m: {**m, "accuracy": 1 - m["err"]},
        }
    }

    results, _ = run(wrap_function(train_xgboost)({"rounds": 2, **callback}, logdir=str(tmp_path / "a")))
    rounds = per_round(EVALS[0])
    for result, expected in zip(results, rounds):
        assert (result["loss"], result["err"], result["accuracy"]) == (
            expected["eval-logloss"],
            expected["eval-error"],
            1 - expected["eval-error"],
        )
        assert not set(expected) & set(result)  # the library's own keys are not reported

    one = {"kwargs": {"metrics": "eval-logloss", "checkpoint_at_end": False}}
    results, _ = run(wrap_function(train_xgboost)({"rounds": 2, **one}, logdir=str(tmp_path / "b")))
    assert [r["eval-logloss"] for r in results] == EVALS[1]["eval"]["logloss"] and "eval-error" not in results[0]

    missing = {"kwargs": {"metrics": ["eval-auc"]}}
    with pytest.raises(KeyError, match="eval-auc"):
        run(wrap_function(train_xgboost)({"rounds": 2, **missing}, logdir=str(tmp_path / "c")))


def test_xgboost_cv_rounds_reach_the_postprocessing_fn_as_mean_and_std_pairs(tmp_path):
    def train_cv(config):
        dtrain = xgb.DMatrix(X, Y)
        callback = tune_xgb.TuneReportCheckpointCallback(
            metrics=["test-logloss"],
            checkpoint_at_end=False,
            results_postprocessing_fn=lambda m: {"test-logloss-mean": m["test-logloss"][0]},
        )
        EVALS.append(xgb.cv(XGB_PARAMS, dtrain, num_boost_round=3, nfold=3, seed=0, callbacks=[callback]))

    results, _ = run(wrap_function(train_cv)({}, logdir=str(tmp_path)))
    assert [r["test-logloss-mean"] for r in results] == list(EVALS[0]["test-logloss-mean"])


def test_the_deprecated_tune_report_callback_still_reports_every_round_and_saves_nothing(tmp_path):
    with pytest.warns(DeprecationWarning, match="TuneReportCheckpointCallback"):
        tune_xgb.TuneReportCallback({"loss": "eval-logloss"})
    with pytest.warns(DeprecationWarning, match="TuneReportCheckpointCallback"):
        tune_lgb.TuneReportCallback({"loss": "eval-binary_logloss"})

    deprecated = {"class": "TuneReportCallback", "kwargs": {"metrics": {"loss": "eval-logloss"}}}
    with pytest.warns(DeprecationWarning):
        results, _ = run(wrap_function(train_xgboost)({"rounds": 3, **deprecated}, logdir=str(tmp_path)))
    assert [r["loss"] for r in results] == EVALS[0]["eval"]["logloss"]
    assert not any(r.get("should_checkpoint") for r in results)


def test_lightgbm_reports_each_rounds_record_evaluation_and_checkpoints_at_rays_rounds(tmp_path):
    callback = {"kwargs": dict(frequency=2)}
    results, saved = run(wrap_function(train_lightgbm)({"rounds": 5, **callback}, logdir=str(tmp_path)))
    rounds = per_round(EVALS[0])
    assert set(rounds[0]) == {"train-binary_logloss", "train-binary_error", "eval-binary_logloss", "eval-binary_error"}
    # LightGBM's last round is the end: no extra report (Ray's rule), the checkpoint comes with round 5
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4, 5]
    for result, expected in zip(results, rounds):
        assert {k: result[k] for k in expected} == expected
    assert sorted(saved) == [2, 4, 5]
    boosters = {i: tune_lgb.TuneReportCheckpointCallback.get_model(checkpoint_of(p)) for i, p in saved.items()}
    assert {i: b.current_iteration() for i, b in boosters.items()} == {2: 2, 4: 4, 5: 5}


def test_a_restored_lightgbm_trial_goes_on_from_its_checkpoints_booster_to_the_straight_runs_model(tmp_path):
    callback = {"kwargs": dict(frequency=2, checkpoint_at_end=False)}
    config = {"rounds": 6, **callback}
    straight, saved = run(wrap_function(train_lightgbm)(config, logdir=str(tmp_path / "straight")))
    resumed = wrap_function(train_lightgbm)(config, logdir=str(tmp_path / "resumed"))
    resumed.restore(saved[4])
    results, resumed_saved = run(resumed)
    assert [r["training_iteration"] for r in results] == [5, 6]
    assert [r["eval-binary_logloss"] for r in results] == pytest.approx(
        [r["eval-binary_logloss"] for r in straight[4:]], rel=1e-12
    )
    straight_model = tune_lgb.TuneReportCheckpointCallback.get_model(checkpoint_of(saved[6]))
    resumed_model = tune_lgb.TuneReportCheckpointCallback.get_model(checkpoint_of(resumed_saved[6]))
    np.testing.assert_allclose(resumed_model.predict(X[VALID]), straight_model.predict(X[VALID]), rtol=1e-12)


def test_lightgbm_cv_rounds_are_named_as_record_evaluation_names_them(tmp_path):
    def train_cv(config):
        recorded: dict = {}
        callback = tune_lgb.TuneReportCheckpointCallback(checkpoint_at_end=False)
        lgb.cv(
            LGB_PARAMS,
            lgb.Dataset(X, Y),
            num_boost_round=3,
            nfold=3,
            seed=0,
            callbacks=[callback, lgb.record_evaluation(recorded)],
        )
        EVALS.append(recorded)

    results, _ = run(wrap_function(train_cv)({}, logdir=str(tmp_path)))
    rounds = per_round(EVALS[0])
    assert "valid-binary_logloss-mean" in rounds[0] and "valid-binary_logloss-stdv" in rounds[0]
    for result, expected in zip(results, rounds, strict=True):
        assert {k: result[k] for k in expected} == expected


def test_only_the_gangs_rank_0_writes_the_booster(tmp_path, monkeypatch):
    monkeypatch.setenv(RANK, "1")
    callback = {"kwargs": dict(frequency=1)}
    results, _ = run(wrap_function(train_lightgbm)({"rounds": 2, **callback}, logdir=str(tmp_path)))
    assert [r["training_iteration"] for r in results] == [1, 2]
    assert not any(r.get("should_checkpoint") for r in results)
