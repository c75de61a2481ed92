"""Ray's path ``ray.tune.integration.lightgbm``: LightGBM callbacks that turn each boosting round into a kubetune
result (``from kubetune.integration.lightgbm import TuneReportCheckpointCallback``).

The user's function trainable passes them to ``lightgbm.train(..., callbacks=[...])``; they run in the trial pod and
report through ``kubetune.report`` (:mod:`kubetune.integration.rounds` holds the rules). Signatures, defaults and
semantics are Ray 2.x's (``ray/tune/integration/lightgbm.py`` and the ``RayReportCallback`` it extends); the Ray 1.x
``TuneReportCallback`` still reports, with a ``DeprecationWarning`` (``docs/ray-tune.md``, "Integrations").
"""

from __future__ import annotations

from typing import Any, Callable

from lightgbm import Booster
from lightgbm.callback import CallbackEnv

from kubetune.checkpoint_layout import Checkpoint
from kubetune.integration.rounds import RoundReporter, flatten_evals, report_only_callback

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]


def round_evals(env: CallbackEnv) -> dict[str, dict[str, Any]]:
    """The round's evaluation results ``{dataset: {metric: value}}`` from LightGBM's ``env.evaluation_result_list``.

    A ``lightgbm.cv`` entry (one with a standard deviation) gives ``"<metric>-mean"`` and ``"<metric>-stdv"``, as
    LightGBM's ``record_evaluation`` names them; a ``lightgbm.train`` entry gives ``"<metric>"``.
    """
    evals: dict[str, dict[str, Any]] = {}
    for entry in env.evaluation_result_list or []:
        data, metric, value = entry[0], entry[1], entry[2]
        std = entry[4] if len(entry) > 4 else None
        if std is None:
            evals.setdefault(data, {})[metric] = value
        else:
            evals.setdefault(data, {}).update({f"{metric}-mean": value, f"{metric}-stdv": std})
    return evals


class TuneReportCheckpointCallback:
    """Reports every boosting round's evaluation results and saves the booster as a checkpoint.

    Each round is one ``kubetune.report``, so one ``training_iteration``: its keys are ``"<valid name>-<metric>"``
    (``"eval-binary_logloss"`` for ``valid_names=["eval"]``; LightGBM's default names are ``valid_0``, ...), each
    the round's value in ``record_evaluation``. The round carries a checkpoint when ``frequency`` divides its
    number from 1, and, with ``checkpoint_at_end``, when it is the last of ``num_boost_round`` (a run that early
    stopping ends sooner has no end checkpoint): Ray's rule.

    Args:
        metrics: a LightGBM key (``"eval-binary_logloss"``) or a list of them, reported under the same names, or
            ``{reported name: LightGBM key}``; None (default) reports every key.
        filename: the booster's file in the checkpoint directory (``model.txt``, LightGBM's text format).
        frequency: checkpoint every this many rounds; 0 (default) never before the end.
        checkpoint_at_end: save the booster with the last round (default True).
        results_postprocessing_fn: ``fn(metrics) -> metrics`` applied to each round's selected metrics.

    Raises:
        KeyError: (in training) a key of ``metrics`` is not among the round's evaluation results.
    """

    CHECKPOINT_NAME = "model.txt"

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ):
        self._rounds = RoundReporter(metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn)

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Booster:
        """Load the booster a checkpoint of this callback holds.

        Args:
            checkpoint: a checkpoint it reported (``tune.get_checkpoint()``, a ``Result``'s ``checkpoint``).
            filename: the ``filename`` the callback was given.

        Raises:
            lightgbm.basic.LightGBMError: no such model file there.
        """
        with checkpoint.as_directory() as directory:
            return Booster(model_file=f"{directory}/{filename}")

    def __call__(self, env: CallbackEnv) -> None:
        """Report round ``env.iteration`` (from 0), with the booster when it is due."""
        result = self._rounds.select(flatten_evals(round_evals(env)))
        last = env.iteration == env.end_iteration - 1
        if self._rounds.checkpoints_round(env.iteration) or (last and self._rounds.checkpoint_at_end):
            self._rounds.report(result, env.model.save_model)
        else:
            self._rounds.report(result)


#: Ray 1.x's deprecated callback: reports every round, saves nothing, warns.
TuneReportCallback = report_only_callback(TuneReportCheckpointCallback, "lightgbm")
