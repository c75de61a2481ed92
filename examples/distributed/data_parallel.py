"""Data-parallel training across a trial's gang of pods: ``examples.distributed.data_parallel:train``.

A softmax regression (one dense layer in JAX) on the digits split of :mod:`examples.digits.model`, trained
with mini-batch SGD. Every rank of the trial's gang (``spec.resourcesPerTrial.workers``) runs this function:
each computes the gradient of its own slice of every global mini-batch, the slices' gradients are summed
across the pods with JAX's collectives over gloo (``jax.distributed`` from the gang's rendezvous variables,
``multihost_utils.process_allgather``), and every rank applies the same averaged update. The sum of the
slices' gradients is the whole mini-batch's, so 1, 2 or 4 pods train the same model as one pod does (in
float64, to the last bits): the gang changes where the arithmetic runs, not its result. Rank 0's
``tune.report`` counts (the others' are dropped); every rank restores the checkpoint of the attempt, so a
retried gang resumes at the epoch after it.

Run by the trial pods of ``experiment.yaml`` and of ``tests/realnode/test_distributed.py``, in the examples
image (``jax`` and ``jaxlib`` from PyPI, CPU).
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np

import kubetune
from examples.digits.model import load_split

#: File a checkpoint keeps the weights and the number of epochs trained in.
STATE_FILE = "state.npz"


def _collectives(size: int):
    """Start JAX's distributed runtime for a gang of ``size`` pods (its coordinator on rank 0) and return
    the function that sums an array across the pods; a one-pod trial needs none."""
    if size == 1:
        return lambda array: array
    import jax
    from jax.experimental import multihost_utils

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        initialization_timeout=300,
    )
    return lambda array: np.asarray(multihost_utils.process_allgather(array)).sum(axis=0)


def train(config: dict) -> None:
    """Train until the trial is stopped, one report (with a checkpoint) per epoch.

    Args:
        config: ``lr`` (SGD step), ``batch_size`` (global mini-batch, default 64), ``epochs`` (default 30),
            ``seed`` (batch order, default 0).

    Reports ``mean_accuracy`` and ``mean_loss`` on the held-out images, and ``world_size``.
    """
    import jax
    import jax.numpy as jnp

    # float64: the slices' gradients summed across pods differ from one pod's sum only in the last bits, so
    # that no held-out prediction (and no scheduler decision on the accuracy) turns on the number of pods
    jax.config.update("jax_enable_x64", True)
    context = kubetune.get_context()
    rank, size = context.get_world_rank(), context.get_world_size()
    allreduce = _collectives(size)
    split = load_split()
    batch, seed = int(config.get("batch_size", 64)), int(config.get("seed", 0))
    weights, bias, start = np.zeros((64, 10)), np.zeros(10), 0
    checkpoint = kubetune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            state = np.load(os.path.join(directory, STATE_FILE))
            weights, bias, start = state["weights"], state["bias"], int(state["epochs"])

    def loss(params, x, y, n):
        logits = x @ params[0] + params[1]
        return -jnp.sum(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y]) / n

    grad = jax.jit(jax.grad(loss), static_argnums=3)
    x_train, y_train = split.x_train, split.y_train
    for epoch in range(start, int(config.get("epochs", 30))):
        order = np.random.default_rng((seed, epoch)).permutation(len(y_train))
        for first in range(0, len(order), batch):
            rows = order[first : first + batch]
            mine = rows[rank::size]  # this pod's slice of the global mini-batch
            local = grad((weights, bias), x_train[mine], y_train[mine], len(rows))
            total = allreduce(np.concatenate([np.ravel(local[0]), local[1]]))
            weights = weights - config["lr"] * total[:640].reshape(64, 10)
            bias = bias - config["lr"] * total[640:]
        logits = split.x_test @ weights + bias
        log_probs = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        metrics = {
            "mean_accuracy": float(np.mean(np.argmax(logits, axis=1) == split.y_test)),
            "mean_loss": float(-np.mean(log_probs[np.arange(len(split.y_test)), split.y_test])),
            "world_size": size,
        }
        with tempfile.TemporaryDirectory() as directory:
            np.savez(os.path.join(directory, STATE_FILE), weights=weights, bias=bias, epochs=epoch + 1)
            with open(os.path.join(directory, "metrics.json"), "w") as f:
                json.dump(metrics, f)
            kubetune.report(metrics, checkpoint=kubetune.Checkpoint.from_directory(directory))
