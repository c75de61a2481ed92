"""Ray's Keras callbacks (``kubetune.integration.keras``'s ``TuneReportCheckpointCallback`` and deprecated
``TuneReportCallback``, ``kubetune.integrations.keras``'s ``ReportCheckpointCallback``; issue 33) fit a real Keras 3
model on JAX (``KERAS_BACKEND=jax``, set here: kubetune does not choose the backend) inside a function trainable, as
in a trial pod but without one: each hook call is one result whose metrics are Keras's own ``logs`` of that call, the
checkpoints come at Ray's calls and hold the model of that moment (its weights compared with those Keras had then),
a trainable restored from one goes on to the straight run's model, and Ray's argument checks raise."""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import keras  # noqa: E402 - once its backend is set
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest_callbacks import checkpoint_of, run  # noqa: E402

import kubetune  # noqa: E402
from kubetune import Checkpoint, wrap_function  # noqa: E402
from kubetune.integration import keras as tune_keras  # noqa: E402
from kubetune.integrations.keras import ReportCheckpointCallback  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 4)).astype("float32")
Y = (X @ np.array([1.0, -2.0, 0.5, 0.0], dtype="float32") > 0).astype("float32")
TRAIN, VALID = slice(0, 48), slice(48, None)
BATCH = 16  # 3 training batches an epoch
STEPS = 48 // BATCH

#: Keras 3.15's variables warn under numpy 2 when the tests read their values (``get_weights``); not kubetune's.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning")

#: The callbacks under test, by the name a config gives (the config stays data, which a checkpoint's metadata pickles).
CALLBACKS = {
    "TuneReportCheckpointCallback": tune_keras.TuneReportCheckpointCallback,
    "TuneReportCallback": tune_keras.TuneReportCallback,
    "ReportCheckpointCallback": ReportCheckpointCallback,
}

#: What Keras itself saw in each run, appended by the trainables below: its logs and weights per hook call.
SEEN: list[dict[str, list]] = []


class Seen(keras.callbacks.Callback):
    """Keeps Keras's own ``logs`` of each epoch and the model's weights at each epoch's end. It leaves the batch hooks
    alone, so Keras dispatches them asynchronously unless the callback under test takes one."""

    def __init__(self):
        super().__init__()
        self.seen: dict[str, list] = {"epoch_end": [], "batch_end": [], "weights": []}
        SEEN.append(self.seen)

    def on_epoch_end(self, epoch, logs=None):
        self.seen["epoch_end"].append(dict(logs))
        self.seen["weights"].append([np.array(w) for w in self.model.get_weights()])


class SeenBatches(Seen):
    """:class:`Seen`, and Keras's own ``logs`` of each training batch."""

    def on_train_batch_end(self, batch, logs=None):
        self.seen["batch_end"].append(dict(logs))


def new_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1, activation="sigmoid")]
    )
    model.compile(keras.optimizers.Adam(0.05), "binary_crossentropy", metrics=["accuracy"])
    return model


def load(checkpoint: Checkpoint, filename: str = tune_keras.MODEL_FILENAME) -> keras.Model:
    with checkpoint.as_directory() as directory:
        return keras.saving.load_model(f"{directory}/{filename}")


def train_keras(config):
    """Fit to ``config["epochs"]`` epochs in all, from the restored checkpoint's model (and its optimizer's step
    count) when there is one, with the callback ``config["callback"]`` names, given ``config["kwargs"]``, and
    :class:`Seen` (:class:`SeenBatches` with ``config["batches"]``)."""
    checkpoint = kubetune.get_checkpoint()
    model = load(checkpoint) if checkpoint else new_model()
    model.fit(
        X[TRAIN],
        Y[TRAIN],
        batch_size=BATCH,
        epochs=config["epochs"],
        initial_epoch=int(model.optimizer.iterations) // STEPS,
        validation_data=(X[VALID], Y[VALID]),
        shuffle=False,
        verbose=0,
        callbacks=[
            CALLBACKS[config["callback"]](**config.get("kwargs", {})),
            (SeenBatches if config.get("batches") else Seen)(),
        ],
    )


def assert_same_weights(model: keras.Model, weights: list[np.ndarray]) -> None:
    assert len(model.get_weights()) == len(weights)
    for got, expected in zip(model.get_weights(), weights):
        np.testing.assert_array_equal(got, expected)


@pytest.fixture(autouse=True)
def _fresh_seen():
    SEEN.clear()


def test_each_hook_call_reports_keras_logs_and_every_frequency_th_carries_that_moments_model(tmp_path):
    # each epoch's end, every second one with the model; then the end of training, without
    kwargs = {"frequency": [2, 0], "on": ["epoch_end", "train_end"]}
    config = {"epochs": 4, "callback": "TuneReportCheckpointCallback", "kwargs": kwargs}
    results, saved = run(wrap_function(train_keras)(config, logdir=str(tmp_path)))
    epochs = SEEN[0]["epoch_end"]
    assert len(epochs) == 4 and set(epochs[0]) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4, 5]
    for result, logs in zip(results, [*epochs, epochs[-1]]):  # train_end's logs are the last epoch's
        assert {k: result[k] for k in logs} == logs
    assert sorted(saved) == [2, 4]
    for iteration, path in saved.items():
        assert_same_weights(load(checkpoint_of(path)), SEEN[0]["weights"][iteration - 1])


def test_a_restored_trial_goes_on_from_its_checkpoints_model_to_the_straight_runs(tmp_path):
    config = {
        "epochs": 4,
        "callback": "TuneReportCheckpointCallback",
        "kwargs": {"metrics": "val_loss", "frequency": 2},
    }
    straight, saved = run(wrap_function(train_keras)(config, logdir=str(tmp_path / "straight")))
    resumed = wrap_function(train_keras)(config, logdir=str(tmp_path / "resumed"))
    resumed.restore(saved[2])
    results, resumed_saved = run(resumed)
    assert [r["training_iteration"] for r in results] == [3, 4]
    assert [r["val_loss"] for r in results] == pytest.approx([r["val_loss"] for r in straight[2:]], rel=1e-5)
    assert "loss" not in results[0]  # metrics="val_loss" reports that key only
    straight_model, resumed_model = load(checkpoint_of(saved[4])), load(checkpoint_of(resumed_saved[4]))
    for got, expected in zip(resumed_model.get_weights(), straight_model.get_weights()):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:TuneReportCallback is deprecated:DeprecationWarning")
def test_batch_end_reports_each_training_batch_and_the_deprecated_callback_saves_nothing(tmp_path):
    with pytest.warns(DeprecationWarning, match="ReportCheckpointCallback"):
        tune_keras.TuneReportCallback({"batch_loss": "loss"}, on="batch_end")
    deprecated = {"callback": "TuneReportCallback", "kwargs": {"metrics": {"batch_loss": "loss"}, "on": "batch_end"}}
    results, _ = run(wrap_function(train_keras)({"epochs": 2, "batches": True, **deprecated}, logdir=str(tmp_path)))
    batches = SEEN[0]["batch_end"]
    assert len(batches) == 2 * STEPS
    assert [r["batch_loss"] for r in results] == [logs["loss"] for logs in batches]
    assert "accuracy" not in results[0] and not any(r.get("should_checkpoint") for r in results)


@pytest.mark.parametrize("callback", ["ReportCheckpointCallback", "TuneReportCheckpointCallback"])
def test_ray2_arguments_report_on_report_metrics_on_and_checkpoint_on_checkpoint_on(tmp_path, callback):
    # Ray 2.x's ReportCheckpointCallback, and the arguments Ray 2.7+ gave TuneReportCheckpointCallback
    kwargs = {"checkpoint_on": "train_end", "metrics": ["val_loss"]}
    config = {"epochs": 2, "callback": callback, "kwargs": kwargs}
    results, saved = run(wrap_function(train_keras)(config, logdir=str(tmp_path)))
    epochs = SEEN[0]["epoch_end"]
    # each epoch's end (report_metrics_on's default), then the end of training with the model
    assert [(r["training_iteration"], r.get("should_checkpoint", False)) for r in results] == [
        (1, False),
        (2, False),
        (3, True),
    ]
    assert [r["val_loss"] for r in results] == [logs["val_loss"] for logs in [*epochs, epochs[-1]]]
    assert_same_weights(load(checkpoint_of(saved[3])), SEEN[0]["weights"][-1])


def test_a_metric_missing_from_the_logs_raises_key_error_naming_it_and_those_there_are(tmp_path):
    missing = {"callback": "TuneReportCheckpointCallback", "kwargs": {"metrics": {"auc": "val_auc"}}}
    with pytest.raises(KeyError, match=r"val_auc.*val_loss"):
        run(wrap_function(train_keras)({"epochs": 1, **missing}, logdir=str(tmp_path)))


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: tune_keras.TuneReportCheckpointCallback(on="epoch_finish"), ValueError, "epoch_finish"),
        (lambda: ReportCheckpointCallback(checkpoint_on="batch_end"), ValueError, "batch_end"),
        (lambda: ReportCheckpointCallback(report_metrics_on=["epoch_end", "fit_end"]), ValueError, "fit_end"),
        (lambda: tune_keras.TuneReportCheckpointCallback(frequency=[1, 2]), ValueError, "as many hooks"),
        (
            lambda: tune_keras.TuneReportCheckpointCallback(frequency=[1], on=["epoch_end", "train_end"]),
            ValueError,
            "as many hooks",
        ),
        (lambda: tune_keras.TuneReportCheckpointCallback(frequency=-1), ValueError, "frequency"),
        (lambda: tune_keras.TuneReportCheckpointCallback(filename="checkpoint"), ValueError, r"\.keras"),
        (lambda: tune_keras.TuneReportCheckpointCallback(metrics=3), TypeError, "metrics"),
        (
            lambda: tune_keras.TuneReportCheckpointCallback(on="train_end", checkpoint_on="train_end"),
            TypeError,
            "not both",
        ),
    ],
)
def test_invalid_arguments_raise_when_the_callback_is_created(make, error, match):
    with pytest.raises(error, match=match):
        make()
