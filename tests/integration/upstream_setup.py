"""The setup Ray's ported tests need to run through ``tune.run`` and ``Tuner.fit`` on the local cluster (imported
explicitly by the ``test_upstream_*_on_the_cluster`` modules, which port Ray's tests; issue 23.5).

Ray's tests call ``ray.init()`` and ``tune.run(trainable, ...)``; kubetune's ``tune.run`` and ``Tuner`` also take
the Kubernetes namespace and the storage the trials write to. :func:`on_cluster` gives a test the user's shell
(kubeconfig and S3 credentials, as after ``eval $(python -m devcluster up)``) and those arguments.
"""

from __future__ import annotations

import pytest

from devcluster.cluster import S3_BUCKET


class ClusterArgs:
    """kubetune's arguments beyond Ray's, for one test's namespace.

    Attributes:
        tuner: keyword arguments of ``Tuner(...)``: ``namespace``, ``storage``, ``poll_interval_s``.
        run: those of ``tune.run(...)``: the same and ``verbose=0``.
    """

    def __init__(self, namespace: str, secret: str):
        storage = {"uri": f"s3://{S3_BUCKET}/upstream", "credentialsSecret": secret}
        self.tuner = {"namespace": namespace, "storage": storage, "poll_interval_s": 0.5}
        self.run = {**self.tuner, "verbose": 0}


@pytest.fixture
def on_cluster(cluster, operator, namespace, storage_secret, monkeypatch) -> ClusterArgs:
    """The user's shell and kubetune's arguments for a ported test (Ray's ``ray.init()``)."""
    for key, value in cluster.env().items():
        monkeypatch.setenv(key, value)
    return ClusterArgs(namespace, storage_secret)
