"""The digits classifier as a class trainable: ``examples.digits.trainable:DigitsTrainable``.

Run by kubetune's in-pod runtime for every trial of ``experiment.yaml`` (the repository root is on
the trial's ``PYTHONPATH``), and by the unit and end-to-end tests. Written against the Ray Tune
class API only: change ``import kubetune`` to ``from ray import tune`` and it runs there too.
"""

from __future__ import annotations

import kubetune
from examples.digits import model as digits


class DigitsTrainable(kubetune.Trainable):
    """Trains a one-hidden-layer MLP on the digits, one epoch per ``step()``.

    Config keys: see :func:`examples.digits.model.build_model` (``lr``, ``alpha``,
    ``hidden_units``, ``batch_size``, ``seed``).

    Each result holds ``mean_accuracy`` and ``mean_loss`` on the fixed held-out split and
    ``gpu_ids``, the ``CUDA_VISIBLE_DEVICES`` the trial's pod was given. A checkpoint is the
    pickled model, so restoring it reproduces the reported metrics exactly and training continues
    as if uninterrupted.
    """

    def setup(self, config: dict) -> None:
        self.split = digits.load_split()
        self.model = digits.build_model(config)
        self.seed = int(config.get("seed", 0))

    def step(self) -> dict:
        digits.train_epoch(self.model, self.split, self.seed, epoch=self.iteration)
        return {**digits.evaluate(self.model, self.split), "gpu_ids": digits.gpu_ids()}

    def evaluate(self) -> dict:
        """Score the current model on the held-out split without training (``mean_accuracy``, ``mean_loss``)."""
        return digits.evaluate(self.model, self.split)

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        digits.save_model(self.model, checkpoint_dir)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        self.model = digits.load_model(checkpoint_dir)
