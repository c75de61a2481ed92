"""Ray's XGBoost callback through the operator (issue 33): a Ray Tune script's function trainable boosts with
``kubetune.integration.xgboost.TuneReportCheckpointCallback`` in its trial pods; each trial's results are its rounds'
``evals_result`` values and its last checkpoint holds the final booster. ``tests/unit/test_integrations_boosting.py``
checks the callbacks' rules without a cluster."""

from __future__ import annotations

import numpy as np
import xgboost as xgb
from sklearn.datasets import load_breast_cancer

import kubetune as tune
from kubetune.integration.xgboost import TuneReportCheckpointCallback
from tests.integration.upstream_setup import on_cluster  # noqa: F401 - fixture

ROUNDS = 4
PARAMS = {"objective": "binary:logistic", "eval_metric": "logloss", "nthread": 1}


def data():
    """Scikit-learn's bundled breast cancer data, split 400 / 169: ``(train, valid)`` DMatrices."""
    x, y = load_breast_cancer(return_X_y=True)
    return xgb.DMatrix(x[:400], y[:400]), xgb.DMatrix(x[400:], y[400:])


def train_breast_cancer(config):
    dtrain, dvalid = data()
    xgb.train(
        {**PARAMS, "max_depth": config["max_depth"]},
        dtrain,
        num_boost_round=ROUNDS,
        evals=[(dvalid, "eval")],
        callbacks=[TuneReportCheckpointCallback(metrics={"loss": "eval-logloss"}, frequency=2)],
        verbose_eval=False,
    )


def test_an_xgboost_trainable_reports_its_rounds_and_checkpoints_its_booster_through_the_operator(on_cluster):  # noqa: F811 - fixture
    analysis = tune.run(
        train_breast_cancer,
        config={"max_depth": tune.grid_search([2, 3])},
        metric="loss",
        mode="min",
        name="xgboost-callback",
        **on_cluster.run,
    )
    assert len(analysis.trials) == 2
    for trial in analysis.trials:
        expected: dict = {}
        dtrain, dvalid = data()
        local = xgb.train(
            {**PARAMS, "max_depth": trial.config["max_depth"]},
            dtrain,
            num_boost_round=ROUNDS,
            evals=[(dvalid, "eval")],
            evals_result=expected,
            verbose_eval=False,
        )
        # one result per round (the last round's checkpoint is the end's: no extra report), the library's values
        assert analysis.metric_history(trial, "loss") == list(enumerate(expected["eval"]["logloss"], start=1))
        booster = TuneReportCheckpointCallback.get_model(analysis.get_last_checkpoint(trial))
        assert booster.num_boosted_rounds() == ROUNDS
        np.testing.assert_array_equal(booster.predict(dvalid), local.predict(dvalid))
