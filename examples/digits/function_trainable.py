"""The digits classifier as a function trainable: ``examples.digits.function_trainable:train_digits``.

Run by kubetune's in-pod runtime for the trials of ``experiment-function.yaml`` and by the tests.
Uses the modern function API (Ray 2's ``train.report(metrics, checkpoint=...)`` and
``train.get_checkpoint()``): every epoch reports its metrics with a checkpoint of the model, and a
retried or resumed trial picks up at the epoch after its latest checkpoint.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile

import kubetune
from examples.digits import model as digits

#: File a checkpoint keeps the number of epochs trained in, next to the model.
EPOCH_FILE = "epoch.json"


def train_digits(config: dict) -> None:
    """Train the MLP of :mod:`examples.digits.model` one epoch per report, until the trial is stopped.

    Args:
        config: as :func:`examples.digits.model.build_model` takes it.

    Reports ``mean_accuracy``, ``mean_loss`` and ``gpu_ids`` after every epoch, each with a
    checkpoint holding the model and the epoch count.
    """
    split = digits.load_split()
    seed = int(config.get("seed", 0))
    checkpoint = kubetune.get_checkpoint()
    if checkpoint is None:
        model, start = digits.build_model(config), 0
    else:
        with checkpoint.as_directory() as directory:
            model = digits.load_model(directory)
            with open(os.path.join(directory, EPOCH_FILE)) as f:
                start = json.load(f)["epochs"]
    for epoch in itertools.count(start):
        digits.train_epoch(model, split, seed, epoch)
        with tempfile.TemporaryDirectory() as directory:
            digits.save_model(model, directory)
            with open(os.path.join(directory, EPOCH_FILE), "w") as f:
                json.dump({"epochs": epoch + 1}, f)
            kubetune.report(
                {**digits.evaluate(model, split), "gpu_ids": digits.gpu_ids()},
                checkpoint=kubetune.Checkpoint.from_directory(directory),
            )
