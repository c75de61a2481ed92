"""Session fixtures of the real-node tests (``pytest -m realnode``): kubetune as users run it.

One cluster whose only node is a real kubelet with containerd (``ClusterConfig.real_node``: images
built from this repository's Dockerfile, Service networking, CoreDNS, two fake GPUs from a device
plugin), and the Helm chart installed on it with those images and no ``collector.url``: the operator
runs as the chart's Deployment and trial pods report through its Service. Trial namespaces enforce
the ``restricted`` Pod Security Standard. ``make test`` runs these after the other tests, in a
second pytest run, so that only one cluster runs at a time.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from devcluster import Cluster, ClusterConfig, install
from devcluster.cluster import S3_BUCKET
from devcluster.install import CHART, RELEASE, RESTRICTED
from devcluster.operator import OPERATOR_NAMESPACE as SYSTEM
from devcluster.testkit import wait_for
from tests.integration.support import Helm, s3_client

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items):
    for item in items:
        if "/realnode/" in str(item.fspath):
            item.add_marker(pytest.mark.realnode)


@pytest.fixture(scope="session")
def node_cluster():
    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    with Cluster(ClusterConfig(real_node=True, gpus_per_node=2, crds=crds)) as c:
        yield c


@pytest.fixture(scope="session")
def api(node_cluster):
    return node_cluster.api_client()


@pytest.fixture(scope="session")
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def custom(api):
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="session")
def s3(node_cluster):
    return s3_client(node_cluster.env())


@pytest.fixture(scope="session")
def helm(node_cluster, tmp_path_factory):
    return Helm(node_cluster, tmp_path_factory.mktemp("helm"))


def chart_values(cluster: Cluster, operator_image: str) -> dict:
    """:func:`devcluster.install.chart_values` of the real node (the images built here, the cluster's S3)
    with ``operator_image``, this suite's storage folder, faster status writes, a shorter grace period and Katib's
    API served."""
    values = install.chart_values(cluster)
    repo, tag = operator_image.rsplit(":", 1)
    values["image"].update(repository=repo, tag=tag)
    values["trials"]["terminationGracePeriodSeconds"] = 20
    values["storage"]["uri"] = f"s3://{S3_BUCKET}/realnode"
    values["statusWriteIntervalSeconds"] = 0.5
    values["katib"] = {"enabled": True}  # Katib's API, served: test_katib_on_the_real_node.py
    return values


@pytest.fixture(scope="session")
def values_file(node_cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("values") / "realnode.yaml"
    path.write_text(yaml.safe_dump(chart_values(node_cluster, node_cluster.node.image("operator"))))
    return path


@pytest.fixture(scope="session")
def release(node_cluster, core, helm, values_file):
    """The chart installed as a user would (``helm install --wait``) in a namespace that enforces the
    ``restricted`` Pod Security Standard, the operator's pod Ready."""
    core.create_namespace({"metadata": {"name": SYSTEM, "labels": RESTRICTED}})
    helm.run(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        SYSTEM,
        "-f",
        str(values_file),
        "--wait",
        "--timeout",
        "180s",
    )
    yield RELEASE


@pytest.fixture
def team(core, node_cluster, release):
    """A namespace enforcing ``restricted`` with the S3 credentials Secret trials read."""
    name = f"team-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": RESTRICTED}})
    env = node_cluster.env()
    core.create_namespaced_secret(
        name,
        {
            "metadata": {"name": "s3-creds"},
            "stringData": {
                "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
                "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
            },
        },
    )
    yield name
    core.delete_namespace(name)


def experiment_status(custom, namespace: str, name: str) -> dict:
    return (
        custom.get_namespaced_custom_object("kubetune.io", "v1alpha1", namespace, "experiments", name).get("status")
        or {}
    )


def wait_finished(custom, namespace: str, name: str, timeout: float) -> dict:
    """Wait for the Experiment to end (Succeeded or Failed) and return its status."""
    return wait_for(
        lambda: (s := experiment_status(custom, namespace, name)).get("phase") in ("Succeeded", "Failed") and s,
        timeout=timeout,
        interval=1,
        what=f"Experiment {namespace}/{name} to finish",
    )


@pytest.fixture
def sdk_env(node_cluster, monkeypatch):
    """The environment ``tune.run`` reads the cluster and its S3 from."""
    for key, value in node_cluster.env().items():
        monkeypatch.setenv(key, value)
