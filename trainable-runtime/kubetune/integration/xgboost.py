"""Ray's path ``ray.tune.integration.xgboost``: XGBoost callbacks that turn each boosting round into a kubetune result
(``from kubetune.integration.xgboost import TuneReportCheckpointCallback``).

The user's function trainable passes them to ``xgboost.train(..., callbacks=[...])``; they run in the trial pod and
report through ``kubetune.report`` (:mod:`kubetune.integration.rounds` holds the rules). Signatures, defaults and
semantics are Ray 2.x's (``ray/tune/integration/xgboost.py`` and the ``RayReportCallback`` it extends); the Ray 1.x
``TuneReportCallback`` still reports, with a ``DeprecationWarning`` (``docs/ray-tune.md``, "Integrations").
"""

from __future__ import annotations

from typing import Any, Callable

from xgboost import Booster
from xgboost.callback import TrainingCallback

from kubetune.checkpoint_layout import Checkpoint
from kubetune.integration.rounds import RoundReporter, flatten_evals, report_only_callback

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]


class TuneReportCheckpointCallback(TrainingCallback):
    """Reports every boosting round's evaluation results and saves the booster as a checkpoint.

    Each round is one ``kubetune.report``, so one ``training_iteration``: its keys are ``"<eval name>-<metric>"``
    (``"eval-logloss"`` for ``evals=[(dvalid, "eval")]``), each the round's value of ``evals_result``. With a
    checkpoint on round ``i`` (from 0) when ``frequency`` divides ``i + 1``, and, with ``checkpoint_at_end``, one
    more report when training ends (the last round's metrics again, as its own ``training_iteration``) holding the
    final booster, unless the last round already had a checkpoint: Ray's rule.

    Args:
        metrics: an XGBoost key (``"eval-logloss"``) or a list of them, reported under the same names, or
            ``{reported name: XGBoost key}``; None (default) reports every key.
        filename: the booster's file in the checkpoint directory (``model.ubj``: XGBoost's binary JSON, as its
            suffix tells ``Booster.save_model``).
        frequency: checkpoint every this many rounds; 0 (default) never during training.
        checkpoint_at_end: save the final booster when training ends (default True).
        results_postprocessing_fn: ``fn(metrics) -> metrics`` applied to each round's selected metrics (for
            ``xgboost.cv``, whose values are ``(mean, std)`` pairs).

    Raises:
        KeyError: (in training) a key of ``metrics`` is not among the round's evaluation results.
    """

    CHECKPOINT_NAME = "model.ubj"

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ):
        super().__init__()
        self._rounds = RoundReporter(metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn)
        self._last_evals: dict[str, dict[str, Any]] = {}
        self._last_checkpoint_round: int | None = None

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Booster:
        """Load the booster a checkpoint of this callback holds.

        Args:
            checkpoint: a checkpoint it reported (``tune.get_checkpoint()``, a ``Result``'s ``checkpoint``).
            filename: the ``filename`` the callback was given.

        Raises:
            xgboost.core.XGBoostError: no such model file there.
        """
        booster = Booster()
        with checkpoint.as_directory() as directory:
            booster.load_model(f"{directory}/{filename}")
        return booster

    def after_iteration(self, model: Booster, epoch: int, evals_log: dict[str, dict[str, list]]) -> bool:
        """Report round ``epoch`` (from 0) from XGBoost's ``evals_log`` (every round's values so far).

        Returns:
            False: the callback never stops training.
        """
        self._last_evals = {
            data: {m: values[-1] for m, values in metrics.items()} for data, metrics in evals_log.items()
        }
        result = self._rounds.select(flatten_evals(self._last_evals))
        if self._rounds.checkpoints_round(epoch):
            self._last_checkpoint_round = epoch
            self._rounds.report(result, model.save_model)
        else:
            self._rounds.report(result)
        return False

    def after_training(self, model: Booster) -> Booster:
        """With ``checkpoint_at_end``, report the final booster, unless its last round was just saved."""
        if self._rounds.checkpoint_at_end and self._last_checkpoint_round != model.num_boosted_rounds() - 1:
            result = self._rounds.select(flatten_evals(self._last_evals)) if self._last_evals else {}
            self._rounds.report(result, model.save_model)
        return model


#: Ray 1.x's deprecated callback: reports every round, saves nothing, warns.
TuneReportCallback = report_only_callback(TuneReportCheckpointCallback, "xgboost")
