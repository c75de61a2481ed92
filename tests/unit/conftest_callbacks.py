"""Helpers for the tests of the trial-side callbacks of training libraries (imported explicitly by
``test_integrations_boosting.py`` and ``test_integrations_keras.py``): train a function trainable to its end as the
runtime does, saving with each result that asks for a checkpoint, and open such a checkpoint."""

from __future__ import annotations

from kubetune import Checkpoint
from kubetune.checkpoint_layout import find_checkpoint_dir
from kubetune.runtime.trainable import RESULT_DUPLICATE


def run(trainable) -> tuple[list[dict], dict[int, str]]:
    """Train until the function returns; return its results (without the final duplicate) and, per iteration
    whose result carries a checkpoint, the path ``save()`` gave then."""
    results, saved = [], {}
    while not (result := trainable.train()).get(RESULT_DUPLICATE):
        results.append(result)
        if result.get("should_checkpoint"):
            saved[result["training_iteration"]] = trainable.save()
        assert len(results) < 50
    trainable.stop()
    return results, saved


def checkpoint_of(path: str) -> Checkpoint:
    """The checkpoint directory of a path ``save()`` gave."""
    return Checkpoint(find_checkpoint_dir(path))
