"""Session fixtures for integration tests: one real local cluster for the whole run.

The cluster has two nodes: ``devcluster-node-0`` with 4 GPUs and
``devcluster-node-1`` with 1 GPU, the project's CRDs installed before the
controllers start, and moto's S3 server. Each test gets its own namespace.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kubernetes import client

from devcluster import Cluster, ClusterConfig

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster():
    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    with Cluster(ClusterConfig(node_gpus=[4, 1], crds=crds)) as c:
        yield c


@pytest.fixture(scope="session")
def api(cluster):
    return cluster.api_client()


@pytest.fixture(scope="session")
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture
def namespace(core):
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
