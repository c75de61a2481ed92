"""Ray's path ``ray.air.integrations.keras`` (Ray 2.x): :class:`ReportCheckpointCallback`, the Keras callback that
reports the hooks of ``model.fit`` and saves the model as a checkpoint
(``from kubetune.integrations.keras import ReportCheckpointCallback``).

``from kubetune.integrations.keras import ReportCheckpointCallback`` is
``from ray.air.integrations.keras import ReportCheckpointCallback`` under kubetune's import rule (``ray.air.X`` is
``kubetune.X``). The user's function trainable passes it to ``model.fit(..., callbacks=[...])``; it runs in the trial
pod and reports through ``kubetune.report``, as the callbacks of :mod:`kubetune.integration.keras`, whose
:class:`~kubetune.integration.keras.KerasReporter` it extends. Signature, defaults and semantics are Ray 2.x's
(``ray/air/integrations/keras.py``, which Ray 2.7+ moved to ``ray/train/tensorflow/keras.py``); differences in
``docs/ray-tune.md`` ("Integrations").
"""

from __future__ import annotations

from kubetune.integration.keras import MODEL_FILENAME, KerasReporter, ray2_schedule

__all__ = ["ReportCheckpointCallback"]


class ReportCheckpointCallback(KerasReporter):
    """Reports the ``logs`` of chosen Keras hooks and saves the model as a checkpoint with those of ``checkpoint_on``.

    Each call of a hook of ``report_metrics_on`` or ``checkpoint_on`` is one ``kubetune.report`` (one
    ``training_iteration``); a call of a hook of ``checkpoint_on`` carries the model as a checkpoint, the directory
    holding ``model.keras`` (``keras.saving.load_model`` reads it), saved on the gang's rank 0 only. A hook of
    ``checkpoint_on`` reports even when it is not in ``report_metrics_on`` (Ray's rule).

    Args:
        checkpoint_on: a Keras hook (``Callback.on_<hook>`` less ``on_``: ``"epoch_end"``, ``"train_batch_end"``,
            ``"train_end"``, ...) or a list of them (``[]``: no checkpoints); default ``"epoch_end"``.
        report_metrics_on: the hooks that report, as ``checkpoint_on``; default ``"epoch_end"``.
        metrics: a Keras log key (``"val_loss"``) or a list of them, reported under the same names, or
            ``{reported name: Keras log key}``; None (default) reports the whole ``logs``.

    Raises:
        ValueError: a hook that is not one of Keras's (``batch_begin``/``batch_end``, Ray 1.x's aliases, are not
            taken either: Ray 2.x's rule).
        TypeError: ``metrics`` is not None, a str, a list or a dict.
        KeyError: (in training) a key of ``metrics`` is not among the hook's ``logs``.
    """

    def __init__(
        self,
        checkpoint_on: str | list[str] = "epoch_end",
        report_metrics_on: str | list[str] = "epoch_end",
        metrics: str | list[str] | dict[str, str] | None = None,
    ):
        super().__init__(metrics, ray2_schedule(checkpoint_on, report_metrics_on), MODEL_FILENAME)
