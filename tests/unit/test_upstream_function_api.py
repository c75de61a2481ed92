"""Ray Tune's own function-API tests, ported (issue 23.5): the ones that run without a cluster.

Source: ``python/ray/tune/tests/test_function_api.py`` of Ray 2.x, the newest copy of the reference index
(it reports through ``ray.train.report``; Ray 2.60's wheel ships no tests, and its ``tune.report`` takes the
same arguments). The assertions are Ray's, unchanged; the setup is kubetune's: ``import kubetune as tune``,
``wrap_function(fn)(config, logdir=...)`` for Ray's ``wrap_function(fn)(logger_creator=..., storage=...)``,
``save()`` returning a path, and for ``with_parameters`` the upload that ``tune.run`` does (Ray puts the
objects in its object store when ``with_parameters`` is called).

Ported here: ``FunctionCheckpointingTest::testCheckpointReuse``, ``FunctionCheckpointingTest::
testFunctionRecurringSave`` (it asserts nothing in Ray; kubetune's addition checks the restored
trainable's next result), ``FunctionApiTest::testWithParameters2``. In
``tests/integration/test_upstream_function_api_on_the_cluster.py`` (through ``tune.run``):
``testWithParametersTwoRuns1``, ``testWithParametersTwoRuns2``, ``testReturnAnonymous``,
``testReturnSpecific``, ``testYieldAnonymous``, ``testYieldSpecific``.

Left out (docs/ray-tune.md, "Upstream tests: function API, ResultGrid, searchers"):
``testCheckpointError`` (a function trainable with ``checkpoint_frequency``/``checkpoint_at_end`` is
accepted, not a ``ValueError``), ``testWithParameters`` (a trial's ``str`` is its Kubernetes name,
``train-...-00000``, not ``train_...``), ``testNewResources`` (no ``ResourceChangingScheduler``: a pod's
resources are fixed; its row in the SDK table).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import kubetune as tune
from kubetune import Checkpoint, wrap_function
from kubetune.storage import open_storage

TRAINING_ITERATION = "training_iteration"


def create_trainable(train_fn, logdir):
    return wrap_function(train_fn)({}, logdir=str(logdir))


def test_checkpoint_reuse(tmp_path):
    """Ray 2.x ``test_function_api.py::FunctionCheckpointingTest::testCheckpointReuse``: repeated
    save/restore never reuses the same checkpoint dir."""

    def train(config):
        checkpoint = tune.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as checkpoint_dir:
                count = sum("checkpoint-" in path for path in os.listdir(checkpoint_dir))
                assert count == 1, os.listdir(checkpoint_dir)

        for step in range(20):
            with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
                path = os.path.join(temp_checkpoint_dir, "checkpoint-{}".format(step))
                open(path, "a").close()
                tune.report(
                    dict(test=step),
                    checkpoint=Checkpoint.from_directory(temp_checkpoint_dir),
                )

    checkpoint = None
    for _ in range(5):
        new_trainable = create_trainable(train, tmp_path)
        if checkpoint:
            new_trainable.restore(checkpoint)
        for _ in range(2):
            result = new_trainable.train()
        checkpoint = new_trainable.save()
        new_trainable.stop()
    assert result[TRAINING_ITERATION] == 10


def test_function_recurring_save(tmp_path):
    """Ray 2.x ``test_function_api.py::FunctionCheckpointingTest::testFunctionRecurringSave``: save and
    restore are commutative."""

    def train(config):
        for step in range(10):
            with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
                if step % 3 == 0:
                    path = os.path.join(temp_checkpoint_dir, "checkpoint.json")
                    with open(path, "w") as f:
                        json.dump({"step": step}, f)
                tune.report(
                    dict(test=step),
                    checkpoint=Checkpoint.from_directory(temp_checkpoint_dir),
                )

    new_trainable = create_trainable(train, tmp_path)
    new_trainable.train()
    checkpoint_obj = new_trainable.save()
    new_trainable.restore(checkpoint_obj)
    checkpoint = new_trainable.save()

    new_trainable.stop()

    new_trainable2 = create_trainable(train, tmp_path)
    new_trainable2.restore(checkpoint)
    result = new_trainable2.train()  # kubetune's addition: Ray's test asserts nothing
    new_trainable2.stop()
    # kubetune's addition, as above: the function starts again (it reads no checkpoint), the count goes on
    assert (result["test"], result[TRAINING_ITERATION]) == (0, 2)


def test_with_parameters_2(tmp_path):
    """Ray 2.x ``test_function_api.py::FunctionApiTest::testWithParameters2``: a ``with_parameters``
    trainable pickles without its objects."""

    class Data:
        def __init__(self):
            import numpy as np

            self.data = np.random.rand((2 * 1024 * 1024))

    def train(config, data=None):
        pass

    trainable = tune.with_parameters(train, data=Data())
    base_uri = f"file://{tmp_path}/sdk"  # kubetune: tune.run uploads the objects to the experiment's storage
    for parameters in trainable._kubetune_parameters:
        parameters.upload(open_storage(base_uri), base_uri)
    # ray.cloudpickle will crash for some reason
    import cloudpickle as cp

    dumped = cp.dumps(trainable)
    assert sys.getsizeof(dumped) < 100 * 1024
