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
from devcluster.operator import OperatorProcess
from tests.integration.support import s3_client

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


@pytest.fixture(scope="session")
def custom(api):
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="session")
def s3(cluster):
    """A plain boto3 client on the cluster's S3 endpoint, to look at what trials wrote."""
    return s3_client(cluster.env())


@pytest.fixture
def namespace(core):
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def operator(cluster, tmp_path_factory):
    """The real operator for the whole run (status written every 0.5 s, 20 s trial grace period)."""
    op = OperatorProcess(
        cluster,
        tmp_path_factory.mktemp("operator") / "operator.log",
        KUBETUNE_OPERATOR_STATUS_WRITE_INTERVAL_S="0.5",
        KUBETUNE_OPERATOR_TRIALS_TERMINATION_GRACE_PERIOD_S="20",
        KUBETUNE_OPERATOR_KATIB_ENABLED="true",  # Katib's API, served (test_katib_api.py installs its CRDs)
    )
    op.start()
    yield op
    op.stop()


@pytest.fixture
def storage_secret(cluster, core, namespace):
    """A Secret with the S3 credentials for trial pods, as a user would create it."""
    env = cluster.env()
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "s3-creds"},
            "stringData": {
                "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
                "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
            },
        },
    )
    return "s3-creds"
