"""Data, model and training epoch shared by the digits trainables (class and function API).

Called by :mod:`examples.digits.trainable` and :mod:`examples.digits.function_trainable`, and by
the tests that restore a trial's checkpoint. The data is scikit-learn's bundled copy of the UCI
"Optical Recognition of Handwritten Digits" test set (1,797 8x8 images, 10 classes; read from the
installed package, never downloaded), split once and for all into 75 % train and 25 % held out,
stratified, with a fixed seed. The model is a one-hidden-layer ``MLPClassifier`` trained with Adam;
an epoch is one pass over the training set in mini-batches, in an order drawn from
``(seed, epoch)`` alone, so that training resumed from a checkpoint continues exactly as if it had
never stopped.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass

import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

#: Digit classes 0-9, passed to ``partial_fit`` so the first mini-batch need not contain them all.
CLASSES = np.arange(10)
#: Fraction of the samples held out for ``mean_accuracy`` and ``mean_loss``.
TEST_FRACTION = 0.25
#: Seed of the train/test split; fixed so every trial is scored on the same held-out images.
SPLIT_SEED = 0
#: File a checkpoint directory keeps the pickled model in.
MODEL_FILE = "model.pkl"


@dataclass(frozen=True)
class Split:
    """The fixed train/held-out split.

    Attributes:
        x_train: ``(1347, 64)`` float pixel intensities scaled to [0, 1].
        y_train: ``(1347,)`` int labels 0-9.
        x_test: ``(450, 64)`` held-out pixels, same scaling.
        y_test: ``(450,)`` held-out labels.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_split() -> Split:
    """Load the bundled digits and return the deterministic stratified 75/25 split.

    Pixels (integers 0-16 in the data set) are divided by 16, a fixed scaling that needs no fit.
    """
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x / 16.0, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    return Split(x_train, y_train, x_test, y_test)


def build_model(config: dict) -> MLPClassifier:
    """Return an untrained classifier for a trial's config.

    Args:
        config: ``lr`` (Adam's learning rate, ``learning_rate_init``), ``alpha`` (L2 penalty),
            ``hidden_units`` (width of the hidden layer), ``batch_size`` (samples per
            mini-batch, default 32), ``seed`` (weight initialisation and batch order, default 0).

    Raises:
        KeyError: ``lr``, ``alpha`` or ``hidden_units`` is missing.
    """
    return MLPClassifier(
        hidden_layer_sizes=(int(config["hidden_units"]),),
        alpha=float(config["alpha"]),
        learning_rate_init=float(config["lr"]),
        batch_size=int(config.get("batch_size", 32)),
        solver="adam",
        shuffle=False,
        random_state=int(config.get("seed", 0)),
    )


def train_epoch(model: MLPClassifier, split: Split, seed: int, epoch: int) -> None:
    """Train ``model`` in place for one pass over the training set.

    The samples are permuted by a generator seeded with ``(seed, epoch)``, then ``partial_fit``
    walks them in mini-batches of ``model.batch_size`` (one Adam update each).

    Args:
        epoch: 0-based index of this epoch (a trainable's iteration count before the step).
    """
    order = np.random.default_rng([seed, epoch]).permutation(len(split.y_train))
    model.partial_fit(split.x_train[order], split.y_train[order], classes=CLASSES)


def evaluate(model: MLPClassifier, split: Split) -> dict:
    """Score ``model`` on the held-out set.

    Returns:
        ``{"mean_accuracy": fraction of held-out digits classified right, "mean_loss": mean
        cross-entropy (nats) of the predicted class probabilities}``.
    """
    return {
        "mean_accuracy": float(model.score(split.x_test, split.y_test)),
        "mean_loss": float(log_loss(split.y_test, model.predict_proba(split.x_test), labels=CLASSES)),
    }


def gpu_ids() -> str:
    """The GPUs this process was given, as the device plugin says: ``CUDA_VISIBLE_DEVICES`` ("" for none)."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def save_model(model: MLPClassifier, directory: str) -> str:
    """Pickle ``model`` (weights and Adam's moments) into ``directory``; return the file's path."""
    path = os.path.join(directory, MODEL_FILE)
    with open(path, "wb") as f:
        pickle.dump(model, f)
    return path


def load_model(directory: str) -> MLPClassifier:
    """Unpickle the model :func:`save_model` wrote into ``directory``.

    Raises:
        FileNotFoundError: ``directory`` holds no model.
    """
    with open(os.path.join(directory, MODEL_FILE), "rb") as f:
        return pickle.load(f)
