"""Helpers shared by the integration tests (imported as ``tests.integration.support``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import boto3

from devcluster import Cluster, build


def s3_client(env: dict):
    """A plain boto3 client on the S3 endpoint of ``env``: a cluster's ``env()``, or what
    ``python -m devcluster up`` exports."""
    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL_S3"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )


def trial_prefix(s3, bucket, root, namespace, experiment, trial):
    """The key prefix of ``trial``'s folder, ``<root>/<namespace>/<experiment>/<uid[:8]>/<trial>``, for the one
    incarnation of the Experiment that wrote a ``result.json`` for it (AssertionError if not exactly one)."""
    found = {
        obj["Key"].rsplit("/", 1)[0]
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{root}/{namespace}/{experiment}/"
        )
        for obj in page.get("Contents", [])
        if obj["Key"].endswith(f"/{trial}/result.json")
    }
    assert len(found) == 1, found
    return found.pop()


class Helm:
    """The built helm binary against one cluster, with its own cache and config folders."""

    def __init__(self, cluster: Cluster, home: Path):
        self.cluster = cluster
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(build.binary_path("helm")), "--kubeconfig", str(self.cluster.kubeconfig), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc
