"""Benchmark of the SDK's client side: from ``tune.run`` to the Experiment created, with a
``with_parameters`` payload of 1 MB and of 200 MB.

Run: ``.venv/bin/python bench/bench_sdk.py [--sizes-mb 1 200] [--rounds 3]``. Starts the local cluster
(API server and its S3 endpoint; no operator is needed to create), then, per payload size and in
rounds that alternate the order, times:

* ours: :func:`kubetune.sdk.tuner.create_experiment`, the part of ``tune.run`` before it follows the
  Experiment: every check, pickling the trainable and the payload, uploading both, creating the
  Experiment;
* baseline: the least any client must do for the same: a boto3 client (``tune.run`` makes one per
  run too), ``cloudpickle.dumps`` of the payload, one ``put_object`` and one create call.

Prints the medians and the ratio ours / baseline, with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3  # noqa: E402
import cloudpickle  # noqa: E402
import numpy as np  # noqa: E402
from kubernetes import client  # noqa: E402

import kubetune as tune  # noqa: E402
from devcluster import Cluster, ClusterConfig  # noqa: E402
from devcluster.cluster import S3_BUCKET  # noqa: E402
from kubetune.sdk.client import Cluster as KubeCluster  # noqa: E402
from kubetune.sdk.tuner import create_experiment, storage_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-sdk"


def train(config, data=None):
    tune.report({"size": int(data.size)})


def manifest(name: str, uri: str) -> dict:
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {"trainable": {"pickleURI": uri}, "config": {"x": 1}, "storage": {"uri": f"s3://{S3_BUCKET}/b"}},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 200])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    with Cluster(ClusterConfig(nodes=1, crds=crds)) as cluster:
        os.environ.update(cluster.env())
        client.CoreV1Api(cluster.api_client()).create_namespace({"metadata": {"name": NAMESPACE}})
        kube = KubeCluster.connect(namespace=NAMESPACE)
        fields = storage_spec(f"s3://{S3_BUCKET}/bench")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.rounds} rounds per size")
        for size_mb in args.sizes_mb:
            times: dict[str, list[float]] = {"ours": [], "baseline": []}
            for n in range(args.rounds):
                payload = np.random.default_rng(n).random(size_mb * 2**20 // 8)

                def ours() -> None:
                    started = time.perf_counter()
                    create_experiment(
                        kube, tune.with_parameters(train, data=payload), f"o{size_mb}-{n}", fields, None, {"x": 1}
                    )
                    times["ours"].append(time.perf_counter() - started)

                def baseline() -> None:
                    started = time.perf_counter()
                    key = f"b/{size_mb}-{n}.pkl"
                    s3 = boto3.client("s3", endpoint_url=cluster.s3_endpoint)
                    s3.put_object(Bucket=S3_BUCKET, Key=key, Body=cloudpickle.dumps(payload))
                    kube.create(manifest(f"b{size_mb}-{n}", f"s3://{S3_BUCKET}/{key}"))
                    times["baseline"].append(time.perf_counter() - started)

                for side in (baseline, ours) if n % 2 else (ours, baseline):
                    side()
            base = statistics.median(times["baseline"])
            print(f"with_parameters payload {size_mb} MB (median of {args.rounds})")
            for key, values in times.items():
                median = statistics.median(values)
                print(f"  {key:<11} {median:7.2f} s   ratio to baseline {median / base:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
