"""Session fixtures for integration tests: one real local cluster for the whole run.

The cluster has two nodes: ``devcluster-node-0`` with 4 GPUs and
``devcluster-node-1`` with 1 GPU, the project's CRDs installed before the
controllers start, and moto's S3 server. Each test gets its own namespace.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from devcluster import Cluster, ClusterConfig, procs

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_NAMESPACE = "kubetune-system"


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


class OperatorProcess:
    """The real operator (``python -m kubetune_operator``) as a child process of the test run."""

    def __init__(self, cluster, workdir: Path):
        self.cluster = cluster
        self.port = procs.free_port()
        self.log = workdir / "operator.log"
        self.env = {**os.environ, **cluster.env(),
                    "KUBETUNE_OPERATOR_COLLECTOR_BIND_HOST": "127.0.0.1",
                    "KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT": str(self.port),
                    "KUBETUNE_OPERATOR_COLLECTOR_KEY_SECRET_NAMESPACE": OPERATOR_NAMESPACE,
                    "KUBETUNE_OPERATOR_STATUS_WRITE_INTERVAL_S": "0.5",
                    "KUBETUNE_OPERATOR_TRIALS_TERMINATION_GRACE_PERIOD_S": "20"}
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = procs.spawn([sys.executable, "-m", "kubetune_operator"], self.log, env=self.env)
        procs.wait_until(lambda: procs.http_ok(f"{self.url}/healthz"), timeout=60, what="operator",
                         proc=self.proc, log=self.log)

    def kill(self) -> None:
        """SIGKILL, as a crashed or evicted operator."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            procs.stop_pid(self.proc.pid, timeout=15)


@pytest.fixture(scope="session")
def operator(cluster, core, tmp_path_factory):
    core.create_namespace({"metadata": {"name": OPERATOR_NAMESPACE}})
    op = OperatorProcess(cluster, tmp_path_factory.mktemp("operator"))
    op.start()
    yield op
    op.stop()


@pytest.fixture
def storage_secret(cluster, core, namespace):
    """A Secret with the S3 credentials for trial pods, as a user would create it."""
    env = cluster.env()
    core.create_namespaced_secret(namespace, {"metadata": {"name": "s3-creds"}, "stringData": {
        "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"]}})
    return "s3-creds"
