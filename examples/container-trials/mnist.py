"""A trial with no kubetune in it: softmax regression on scikit-learn's handwritten digits, standard library only.

It stands in for Katib's ``pytorch-mnist`` trial image: its flags (``--lr``, ``--momentum``, ``--epochs``,
``--batch-size``, ``--seed``; ``--log-path`` sends the lines to that file instead of stdout; ``--logger hypertune``)
and its log lines are that example's, so an Experiment written for Katib runs it unchanged. Each epoch logs,
through :mod:`logging` on stdout with an RFC 3339 UTC timestamp first::

    2026-11-27T16:00:00Z INFO     Train Epoch: 1 [1437/1437 (100%)]	loss=1.2345
    2026-11-27T16:00:00Z INFO     {metricName: accuracy, metricValue: 0.8750};{metricName: loss, metricValue: 1.1000}

The first line (the epoch's mean training loss) is what Katib's default ``name=value`` regex reads, one line an
epoch; the second is the held-out split's accuracy and loss in the form Katib's pytorch example prints them.
With ``--logger hypertune`` (what Katib's JSON examples pass) the lines stay on stdout, and each epoch also
appends the held-out loss, then accuracy, as the ``cloudml-hypertune`` library that example calls writes them:
one JSON object a line, the value and step as strings, the time in seconds since the epoch, to ``--log-path``
(default ``$CLOUD_ML_HP_METRIC_FILE``, else ``/tmp/hypertune/output.metrics``)::

    {"loss": "1.0999873", "global_step": "1", "timestamp": 1795881600.25, "trial": "0"}
    {"accuracy": "0.875", "global_step": "1", "timestamp": 1795881600.25, "trial": "0"}

Plain SGD with momentum (PyTorch's rule: ``v = momentum * v + grad``, ``w -= lr * v``), seeded, so a config
gives the same lines every run. It reads ``digits.csv.gz`` (beside it, or ``--data``) and exits on SIGTERM at once
(a scheduler's stop deletes the pod).

**Checkpoints**, when the Experiment gives it a checkpoint folder (``spec.checkpoint.path``, which kubetune names
in ``KUBETUNE_CHECKPOINT_DIR``): after each epoch it writes its state there (epoch, weights, velocity, the training
rows' order, the shuffling generator's state) and asks kubetune to save the folder by creating ``.kubetune-save``
holding the epoch, then waits until kubetune has committed it (the file goes) before it trains on. At its start it
goes on from the state it finds there, which kubetune restored: a retried attempt prints what an uninterrupted run
prints, and a PBT exploit goes on from the donor's state with its own ``--lr`` and ``--momentum``. Without the
variable it writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
import math
import os
import random
import signal
import sys
import time
from operator import mul
from pathlib import Path

CLASSES = 10
PIXEL_MAX = 16.0  # the digits' 8x8 images hold grey levels 0..16
#: What kubetune creates in the checkpoint folder to be asked for a checkpoint (docs/api.md).
SAVE_MARKER = ".kubetune-save"
#: Longest wait for kubetune to commit a checkpoint, in seconds.
SAVE_WAIT_S = 120.0
#: Where ``--logger hypertune`` writes without ``--log-path`` or ``$CLOUD_ML_HP_METRIC_FILE`` (cloudml-hypertune's).
HYPERTUNE_FILE = "/tmp/hypertune/output.metrics"


def load(path: Path) -> list[tuple[list[float], int]]:
    """``(pixels scaled to 0..1 with a trailing bias input 1.0, label)`` for each row of the CSV."""
    with gzip.open(path, "rt", newline="") as f:
        return [([float(v) / PIXEL_MAX for v in row[:-1]] + [1.0], int(row[-1])) for row in csv.reader(f) if row]


def probabilities(weights: list[list[float]], x: list[float]) -> list[float]:
    """Softmax of the class scores of ``x``."""
    scores = [sum(map(mul, w, x)) for w in weights]
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def train_epoch(weights, velocity, batches, lr: float, momentum: float) -> float:
    """One pass of minibatch SGD with momentum over ``batches``; returns the mean cross-entropy seen."""
    losses = 0.0
    count = 0
    for batch in batches:
        grads = [[0.0] * len(weights[0]) for _ in range(CLASSES)]
        for x, label in batch:
            p = probabilities(weights, x)
            losses -= math.log(max(p[label], 1e-12))
            for k in range(CLASSES):
                err = (p[k] - (k == label)) / len(batch)
                grads[k] = [g + err * xi for g, xi in zip(grads[k], x)]
        for k in range(CLASSES):
            velocity[k] = [momentum * v + g for v, g in zip(velocity[k], grads[k])]
            weights[k] = [w - lr * v for w, v in zip(weights[k], velocity[k])]
        count += len(batch)
    return losses / count


def evaluate(weights, rows) -> tuple[float, float]:
    """Accuracy and mean cross-entropy on ``rows``."""
    correct = 0
    loss = 0.0
    for x, label in rows:
        p = probabilities(weights, x)
        correct += max(range(CLASSES), key=p.__getitem__) == label
        loss -= math.log(max(p[label], 1e-12))
    return correct / len(rows), loss / len(rows)


def restore(folder: str | None) -> dict | None:
    """The state the checkpoint folder holds (written by :func:`save`), or None."""
    path = os.path.join(folder, "state.json") if folder else None
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def save(folder: str, state: dict) -> None:
    """Write ``state`` to the folder, ask kubetune to save it, and wait until it has."""
    path, marker = os.path.join(folder, "state.json"), os.path.join(folder, SAVE_MARKER)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
    with open(marker, "w") as f:
        f.write(str(state["epoch"]))
    deadline = time.monotonic() + SAVE_WAIT_S
    while os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)


def report_hypertune(path: str, epoch: int, metrics: dict[str, float]) -> None:
    """Append one JSON line per metric to ``path``, as ``cloudml-hypertune``'s ``report_hyperparameter_tuning_metric``
    does (module docstring)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    trial = os.environ.get("CLOUD_ML_TRIAL_ID", "0")
    with open(path, "a") as f:
        for name, value in metrics.items():
            line = {name: str(value), "global_step": str(epoch), "timestamp": time.time(), "trial": trial}
            f.write(json.dumps(line) + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Softmax regression on the digits data (Katib's mnist flags)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (default: 0.01)")
    parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum (default: 0.5)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs to train (default: 3)")
    parser.add_argument("--batch-size", type=int, default=64, help="minibatch size (default: 64)")
    parser.add_argument("--seed", type=int, default=1, help="shuffling seed (default: 1)")
    parser.add_argument(
        "--log-path",
        default="",
        help="write the log lines to this file instead of stdout (Katib's File collector); with --logger hypertune, "
        "the JSON lines",
    )
    parser.add_argument(
        "--logger",
        choices=["standard", "hypertune"],
        default="standard",
        help="hypertune: also write each epoch's held-out loss and accuracy as JSON lines (default: standard)",
    )
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).with_name("digits.csv.gz"), help="the digits CSV (gzip)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # As PID 1 of its container a process that does not handle SIGTERM ignores it, and a stopped trial would
    # wait out its grace period for SIGKILL: exit as a shell does on SIGTERM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    logging.Formatter.converter = time.gmtime  # the Z of the timestamp is true
    logging.basicConfig(
        format="%(asctime)s %(levelname)-8s %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%SZ",
        level=logging.INFO,
        **({"filename": args.log_path} if args.log_path and args.logger == "standard" else {"stream": sys.stdout}),
    )
    hypertune = args.log_path or os.environ.get("CLOUD_ML_HP_METRIC_FILE") or HYPERTUNE_FILE
    rng = random.Random(args.seed)
    rows = load(args.data)
    rng.shuffle(rows)
    split = len(rows) * 4 // 5
    order, held_out = list(range(split)), rows[split:]  # the training rows, in the order the last epoch took them
    weights = [[0.0] * len(rows[0][0]) for _ in range(CLASSES)]
    velocity = [[0.0] * len(rows[0][0]) for _ in range(CLASSES)]
    folder = os.environ.get("KUBETUNE_CHECKPOINT_DIR")
    start, state = 1, restore(folder)
    if state is not None:  # go on where the checkpoint is
        start, weights, velocity, order = state["epoch"] + 1, state["weights"], state["velocity"], state["order"]
        rng.setstate((state["rng"][0], tuple(state["rng"][1]), state["rng"][2]))
        logging.info("restored the state after epoch %d", state["epoch"])
    for epoch in range(start, args.epochs + 1):
        rng.shuffle(order)
        train = [rows[i] for i in order]
        batches = [train[i : i + args.batch_size] for i in range(0, len(train), args.batch_size)]
        loss = train_epoch(weights, velocity, batches, args.lr, args.momentum)
        logging.info("Train Epoch: %d [%d/%d (100%%)]\tloss=%.4f", epoch, len(train), len(train), loss)
        accuracy, test_loss = evaluate(weights, held_out)
        logging.info(
            "{metricName: accuracy, metricValue: %.4f};{metricName: loss, metricValue: %.4f}\n", accuracy, test_loss
        )
        if args.logger == "hypertune":
            report_hypertune(hypertune, epoch, {"loss": test_loss, "accuracy": accuracy})
        if folder:
            state = {"epoch": epoch, "weights": weights, "velocity": velocity, "rng": rng.getstate(), "order": order}
            save(folder, state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
