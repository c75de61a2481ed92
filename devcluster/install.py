"""Installs kubetune on a running local cluster as a user would, for ``python -m devcluster up``.

``helm install`` of this checkout's chart (``helm/kubetune``: the CRDs, the operator's Deployment,
which the process kubelet runs from this checkout and the real node from the images built from it,
with its ServiceAccount's token; its RBAC and the collector's key), then, in the kubeconfig
context's namespace (``default``), the Secret trial pods read their storage credentials from, and
the SDK's default storage as shell exports. Afterwards ``tune.run``, the ``kubetune`` command and
``kubectl apply -f examples/digits/experiment.yaml`` work unchanged. Called by
:func:`devcluster.__main__.cmd_up`; ``tests/integration/test_devcluster_up.py`` runs that command.

The process kubelet has no Service network, so the chart's ``collector.url`` points trial pods at
the operator's port on loopback (as ``tests/integration/test_helm.py`` does); on the real node the
chart runs the images built from this checkout, as ``tests/realnode`` installs it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from kubernetes import client

from . import build, procs
from .cluster import S3_BUCKET, S3_REGION
from .operator import OPERATOR_NAMESPACE

CHART = Path(__file__).resolve().parent.parent / "helm" / "kubetune"
RELEASE = "kubetune"
#: The kubeconfig context's namespace: where ``tune.run``, ``kubetune`` and ``kubectl apply`` go by default.
NAMESPACE = "default"
#: The Secret with the trial pods' storage credentials (the name ``examples/digits/experiment.yaml`` uses).
CREDENTIALS_SECRET = "s3-creds"
#: Labels of a namespace that enforces the ``restricted`` Pod Security Standard.
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
#: Default storage of the SDK and of the operator (Experiments without ``spec.storage``).
STORAGE_URI = f"s3://{S3_BUCKET}/experiments"


def chart_values(cluster) -> dict:
    """Chart values for ``cluster``: its S3 as the default storage; on the process kubelet, free host ports
    for the collector and the liveness probe (its pods share the host's network) and a loopback collector
    URL; on the real node, the images built here (``examples`` for trials), trial pods reporting through
    the chart's Service."""
    values: dict = {
        "storage": {"uri": STORAGE_URI, "endpoint": cluster.s3_endpoint, "region": S3_REGION},
        "statusWriteIntervalSeconds": 1,
    }
    if cluster.node is not None:
        operator, trials = (cluster.node.image(name).rsplit(":", 1) for name in ("operator", "examples"))
        values["image"] = {"repository": operator[0], "tag": operator[1], "pullPolicy": "Never"}
        values["trials"] = {"image": {"repository": trials[0], "tag": trials[1]}}
    else:
        port = procs.free_port()
        values["collector"] = {"port": port, "url": f"http://{cluster.host}:{port}"}
        values["probePort"] = procs.free_port()
    return values


def install(cluster, timeout_s: int = 180) -> dict[str, str]:
    """Install kubetune on ``cluster`` and return the exports the SDK reads its default storage from.

    Args:
        cluster: a started :class:`devcluster.Cluster` with S3 (process kubelet or real node).
        timeout_s: longest ``helm install --wait`` waits for the operator's pod to be ready.

    Returns:
        ``{"KUBETUNE_STORAGE_URI": ..., "KUBETUNE_STORAGE_CREDENTIALS_SECRET": ...}``.

    Raises:
        RuntimeError: ``helm install`` failed (with its output).
    """
    helm = build.ensure_binaries(("helm",))["helm"]
    values = cluster.workdir / "kubetune-values.yaml"
    values.write_text(yaml.safe_dump(chart_values(cluster)))
    core = client.CoreV1Api(cluster.api_client())
    # the operator's namespace enforces the "restricted" Pod Security Standard, which the chart's pod meets
    core.create_namespace({"metadata": {"name": OPERATOR_NAMESPACE, "labels": RESTRICTED}})
    argv = [str(helm), "--kubeconfig", str(cluster.kubeconfig), "install", RELEASE, str(CHART)]
    argv += ["-n", OPERATOR_NAMESPACE, "-f", str(values), "--wait", "--timeout", f"{timeout_s}s"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"helm install of {CHART} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    env = cluster.env()
    core.create_namespaced_secret(
        NAMESPACE,
        {
            "metadata": {"name": CREDENTIALS_SECRET},
            "stringData": {
                "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
                "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
                # boto3 reads it: manifests without spec.storage.endpoint (examples/digits) reach this S3
                "AWS_ENDPOINT_URL_S3": env["AWS_ENDPOINT_URL_S3"],
            },
        },
    )
    return {"KUBETUNE_STORAGE_URI": STORAGE_URI, "KUBETUNE_STORAGE_CREDENTIALS_SECRET": CREDENTIALS_SECRET}
