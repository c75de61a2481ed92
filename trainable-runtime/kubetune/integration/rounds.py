"""What the callbacks of :mod:`kubetune.integration` share: which metrics of a round are reported under which names,
which rounds carry a checkpoint, and the report itself (``kubetune.report`` with the model saved into a checkpoint
directory). The boosting callbacks (:mod:`kubetune.integration.xgboost`, :mod:`kubetune.integration.lightgbm`) use
:class:`RoundReporter`; the Keras ones (:mod:`kubetune.integration.keras`, :mod:`kubetune.integrations.keras`) use
:func:`select_metrics` and :func:`report_with_model` on the logs of a Keras hook.

The rules are those of Ray 2.x's ``RayReportCallback`` (``ray/train/xgboost/_xgboost_utils.py``,
``ray/train/lightgbm/_lightgbm_utils.py``), which Ray's ``ray.tune.integration`` callbacks extend: a round's
evaluation results ``{dataset: {metric: value}}`` are flattened to ``"<dataset>-<metric>"`` keys, ``metrics``
picks and renames them (Ray's Keras callbacks pick from Keras's ``logs`` by the same rule),
``results_postprocessing_fn`` has the last word, and a round ``i`` (from 0) carries a checkpoint when ``frequency``
divides ``i + 1``. Only the gang's rank 0 writes the model (Ray Train's rule); every rank reports, and the runtime
keeps rank 0's results only.
"""

from __future__ import annotations

import tempfile
import warnings
from typing import Any, Callable

from kubetune.checkpoint_layout import Checkpoint
from kubetune.runtime.context import get_context
from kubetune.runtime.session import report


def select_metrics(
    metrics: str | list[str] | dict[str, str] | None, values: dict[str, Any], source: str
) -> dict[str, Any]:
    """The result to report from a library's ``values`` (a round's flattened evaluation results, a Keras ``logs``).

    Args:
        metrics: a key of ``values`` or a list of them, reported under the same names, or ``{reported name: key}``;
            None or empty: every key, under its own name.
        values: what the library gives, by its key.
        source: what ``values`` are, for the error (``"this round's evaluation results"``).

    Raises:
        KeyError: a key of ``metrics`` is not among ``values`` (the message lists those there are).
    """
    if not metrics:
        return dict(values)
    names = {metrics: metrics} if isinstance(metrics, str) else metrics
    if not isinstance(names, dict):
        names = {key: key for key in names}
    missing = [key for key in names.values() if key not in values]
    if missing:
        raise KeyError(f"metric(s) {missing} not among {source} {sorted(values)}")
    return {name: values[key] for name, key in names.items()}


def report_with_model(result: dict[str, Any], filename: str, save: Callable[[str], None]) -> None:
    """``kubetune.report(result)`` with a checkpoint of the model that ``save`` writes, on the gang's rank 0 only.

    Args:
        result: the metrics to report.
        filename: the model's file name in the checkpoint directory.
        save: ``save(path)`` writes the model to ``path`` (a file named ``filename`` in a temporary directory that
            ``report`` copies before it returns); not called on the other ranks, which report ``result`` alone.
    """
    if get_context().get_world_rank() != 0:
        report(result)
        return
    with tempfile.TemporaryDirectory(prefix="model_checkpoint_") as directory:
        save(f"{directory}/{filename}")
        report(result, checkpoint=Checkpoint(directory))


def flatten_evals(evals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"eval": {"logloss": 0.3}}`` → ``{"eval-logloss": 0.3}``, the keys a boosting callback reports.

    Args:
        evals: per evaluation dataset (its name in ``evals``/``valid_names``), per metric, one value.

    Returns:
        One entry per (dataset, metric), in the libraries' order, keyed ``"<dataset>-<metric>"``.
    """
    return {f"{data}-{metric}": value for data, values in evals.items() for metric, value in values.items()}


class RoundReporter:
    """Reports boosting rounds with Ray's metric selection and checkpoint schedule.

    Args:
        metrics: a library key or a list of them (reported under the same names), or ``{name: library key}``;
            None reports every key.
        filename: the model's file name in each checkpoint directory.
        frequency: checkpoint every ``frequency`` rounds (round ``i``, counted from 0, when ``(i + 1) %
            frequency == 0``); 0: never during training.
        checkpoint_at_end: save a checkpoint when training ends (the libraries' callbacks decide when that is).
        results_postprocessing_fn: ``fn(metrics dict) -> metrics dict`` applied last (Ray's hook, e.g. to average
            ``xgboost.cv`` folds).
    """

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None,
        filename: str,
        frequency: int,
        checkpoint_at_end: bool,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None,
    ):
        self.metrics = metrics
        self.filename = filename
        self.frequency = frequency
        self.checkpoint_at_end = checkpoint_at_end
        self.results_postprocessing_fn = results_postprocessing_fn

    def select(self, flat: dict[str, Any]) -> dict[str, Any]:
        """The result to report from a round's flattened evaluation results (:func:`flatten_evals`).

        Raises:
            KeyError: a key of ``metrics`` is not among the round's (the message lists those there are).
        """
        selected = select_metrics(self.metrics, flat, "this round's evaluation results")
        if self.results_postprocessing_fn:
            selected = self.results_postprocessing_fn(selected)
        return selected

    def checkpoints_round(self, iteration: int) -> bool:
        """Whether round ``iteration`` (from 0) carries a checkpoint by ``frequency``."""
        return self.frequency != 0 and (iteration + 1) % self.frequency == 0

    def report(self, result: dict[str, Any], save: Callable[[str], None] | None = None) -> None:
        """``kubetune.report(result)``, with a checkpoint when ``save`` is given.

        Args:
            result: the metrics of the round.
            save: ``save(path)`` writes the model to ``path`` (a file named :attr:`filename` in a temporary
                directory that ``report`` copies before it returns); called on rank 0 only.
        """
        if save is None:
            report(result)
        else:
            report_with_model(result, self.filename, save)


def report_only_callback(checkpointing: type, library: str) -> type:
    """Ray 1.x's ``TuneReportCallback`` of ``library`` (``"xgboost"``, ``"lightgbm"``): ``checkpointing`` (that
    library's ``TuneReportCheckpointCallback``) with ``frequency=0, checkpoint_at_end=False``, reporting every
    round's metrics and saving nothing. Ray 2.x raises ``DeprecationWarning`` when one is created; kubetune keeps
    Ray 1.x's behaviour and warns."""
    replacement = f"kubetune.integration.{library}.TuneReportCheckpointCallback(frequency=0, checkpoint_at_end=False)"

    class TuneReportCallback(checkpointing):
        """Ray 1.x's callback that reports every round's metrics and saves nothing; deprecated in Ray 2.x.

        Args:
            metrics: as ``TuneReportCheckpointCallback``'s.
            results_postprocessing_fn: as ``TuneReportCheckpointCallback``'s.
        """

        def __init__(
            self,
            metrics: str | list[str] | dict[str, str] | None = None,
            results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        ):
            warnings.warn(
                f"TuneReportCallback is deprecated (Ray 2.x): use {replacement}", DeprecationWarning, stacklevel=2
            )
            super().__init__(
                metrics, frequency=0, checkpoint_at_end=False, results_postprocessing_fn=results_postprocessing_fn
            )

    TuneReportCallback.__module__ = f"kubetune.integration.{library}"
    return TuneReportCallback
