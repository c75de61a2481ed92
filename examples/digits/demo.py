"""The ``make demo`` runner: the digits experiment on a local cluster, shown live.

Run from the repository root as ``python -m examples.digits.demo`` (``make demo`` does). It builds
or reuses the control-plane binaries, starts a one-node cluster with 4 GPUs and an S3 endpoint
(:class:`devcluster.Cluster`), starts the kubetune operator as a local process, creates a
namespace with the ``s3-creds`` Secret, sets the environment a user gets from
``eval $(python -m devcluster up)``, and runs ``tune_digits.py``, a Ray Tune script with
``import kubetune as tune``: Ray's status table updates in place while the trials run (a progress
line every few seconds and the table at the end when stdout is not a terminal), then the best
config and the best checkpoint's accuracy reproduced here from storage. With ``--experiment FILE``
it applies a manifest instead (the ``kubectl apply`` path). With ``--real-node`` (as root, after ``make
node``) the cluster's node is the real kubelet with containerd and kubetune is installed as users install
it (:func:`devcluster.install.install`: ``helm install`` of the chart, the operator in its image, trials in
the ``examples`` image reporting through the chart's Service), in namespace ``default``. At the end it
lists what the trials wrote to storage and tears everything down, also on Ctrl-C. Exit status: 0 when the experiment
succeeded, 1 when trials failed, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import boto3
import yaml
from kubernetes import client
from rich.console import Console

from devcluster import Cluster, ClusterConfig, build, install
from devcluster.cluster import S3_BUCKET
from devcluster.operator import OperatorProcess
from examples.digits.tune_digits import report, tune_digits
from kubetune.checkpoint_store import COMMIT_MARKER
from kubetune.sdk.client import Cluster as KubeCluster
from kubetune.sdk.client import follow
from kubetune.sdk.progress import StatusTable, format_duration, searched_keys
from kubetune.sdk.tuner import TuneError

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NAMESPACE = "kubetune-demo"
SECRET = "s3-creds"
STORAGE_URI = f"s3://{S3_BUCKET}/experiments"
#: Result keys the table shows after the experiment's metric, with their column titles.
METRIC_COLUMNS = {"mean_loss": "mean_loss", "gpu_ids": "GPU"}


def load_experiment(path: Path, endpoint: str | None) -> dict:
    """Read an Experiment manifest and point its storage at ``endpoint`` (the local S3), if given."""
    body = yaml.safe_load(path.read_text())
    if endpoint:
        body["spec"]["storage"]["endpoint"] = endpoint
    return body


def apply_manifest(
    cluster: Cluster, path: Path, console: Console, namespace: str = NAMESPACE
) -> tuple[dict, list[dict]]:
    """The YAML path: apply the manifest at ``path`` as ``kubectl apply`` would and follow it to its end."""
    body = load_experiment(path, cluster.s3_endpoint)
    spec = body["spec"]
    kube = KubeCluster.connect(namespace=namespace)
    kube.create(body)
    console.print(
        f"Applied {path.name} as {namespace}/{body['metadata']['name']}: {spec.get('numSamples', 1)} "
        f"samples of {', '.join(searched_keys(spec.get('config') or {})) or 'a fixed config'}\n"
    )
    with StatusTable(metric_columns=METRIC_COLUMNS, console=console) as table:
        return follow(kube, body["metadata"]["name"], table.update, poll_interval_s=0.5)


def print_storage(console: Console, s3, bucket: str, prefix: str) -> None:
    """List what is stored under ``s3://bucket/prefix/``, one line per folder (a trial, a checkpoint, the
    SDK's uploads), with the number of results of each ``result.json`` and whether a checkpoint is committed."""
    folders: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            folder, _, name = obj["Key"][len(prefix) + 1 :].rpartition("/")
            folders[folder].append((name, obj["Size"]))
    console.print(f"\n[bold]Storage: s3://{bucket}/{prefix}/[/bold]")
    for folder in sorted(folders):
        entries = folders[folder]
        names = ", ".join(sorted(name for name, _ in entries if not name.startswith(".")))
        note = ""
        if folder.rsplit("/", 1)[-1].startswith("checkpoint_"):
            note = " (committed)" if any(name == COMMIT_MARKER for name, _ in entries) else " (uncommitted)"
        elif any(name == "result.json" for name, _ in entries):
            body = s3.get_object(Bucket=bucket, Key=f"{prefix}/{folder}/result.json")["Body"].read()
            note = f" ({sum(1 for line in body.splitlines() if line.strip())} results)"
        total = sum(size for _, size in entries)
        console.print(f"  {folder + '/':<36} {total:>9,} B  {names}{note}", highlight=False)


def _operator_pod_log(cluster: Cluster) -> str:
    """The chart's operator pod's log, as ``kubectl logs`` gives it."""
    from devcluster.operator import OPERATOR_NAMESPACE

    return cluster.kubectl("logs", "-n", OPERATOR_NAMESPACE, f"deployment/{install.RELEASE}-operator").stdout


def _interrupt_once(signum, frame) -> None:
    """First Ctrl-C (or SIGTERM) unwinds into the teardown; further ones are ignored so it completes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run(experiment_path: Path | None, console: Console, real_node: bool = False) -> int:
    """Start the cluster and operator, run the experiment, print the outcome, tear down.

    Returns:
        0 when the experiment succeeded, 1 otherwise.
    """
    started = time.monotonic()
    console.print("[bold]kubetune demo[/bold]: building or reusing the control-plane binaries")
    build.ensure_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"))
    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    with ExitStack() as stack:
        node = "a real node (kubelet, containerd, CoreDNS) with 2 GPUs" if real_node else "1 node with 4 GPUs"
        console.print(
            f"Starting the local cluster: {node}, kube-apiserver, scheduler, controller-manager, "
            f"{'' if real_node else 'process kubelet, '}S3 (moto)"
        )
        config = ClusterConfig(nodes=1, gpus_per_node=2 if real_node else 4, crds=crds, real_node=real_node)
        cluster = stack.enter_context(Cluster(config))
        console.print(f"  up in {cluster.state['startSeconds']} s; API {cluster.api_url}, S3 {cluster.s3_endpoint}")
        env = cluster.env()
        os.environ.update(env)  # what `eval $(python -m devcluster up)` gives a user's shell
        if real_node:
            namespace, operator_log = install.NAMESPACE, lambda: _operator_pod_log(cluster)
            os.environ.update(install.install(cluster))
            console.print("kubetune installed with helm install (the operator in its image)")
        else:
            namespace = NAMESPACE
            operator = OperatorProcess(
                cluster, cluster.workdir / "logs" / "operator.log", KUBETUNE_OPERATOR_STATUS_WRITE_INTERVAL_S="1"
            )
            stack.callback(operator.stop)
            operator.start()
            operator_log = lambda: operator.log.read_text(errors="replace")  # noqa: E731
            console.print(f"Operator running (collector {operator.url})")
            core = client.CoreV1Api(cluster.api_client())
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            core.create_namespaced_secret(
                NAMESPACE,
                {
                    "metadata": {"name": SECRET},
                    "stringData": {
                        "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
                        "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
                    },
                },
            )
        if experiment_path is None:
            console.print(f"Running examples/digits/tune_digits.py: tune.run(DigitsTrainable, ...) in {namespace}\n")
            try:
                analysis = tune_digits(namespace, {"uri": STORAGE_URI, "credentialsSecret": SECRET})
                report(analysis)
                ok = True
            except TuneError as exc:
                console.print(f"[red]{exc}[/red]")
                ok = False
            name = "digits"
        else:
            experiment, _ = apply_manifest(cluster, experiment_path, console, namespace)
            name, ok = experiment["metadata"]["name"], experiment["status"]["phase"] == "Succeeded"
        s3 = boto3.client(
            "s3",
            endpoint_url=cluster.s3_endpoint,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        )
        bucket, _, root = STORAGE_URI.removeprefix("s3://").partition("/")
        print_storage(console, s3, bucket, f"{root}/{namespace}/{name}")
        if not ok:
            console.print("\n[bold]Operator log (last lines):[/bold]")
            tail = operator_log().splitlines()[-20:]
            console.print("\n".join(tail), highlight=False, markup=False)
        console.print("\nTearing down the cluster")
    console.print(f"Done in {format_duration(time.monotonic() - started)}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m examples.digits.demo [--experiment FILE] [--real-node]``."""
    parser = argparse.ArgumentParser(prog="python -m examples.digits.demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--experiment",
        type=Path,
        help="apply this Experiment manifest instead of running tune_digits.py, e.g. "
        "examples/digits/experiment.yaml (the YAML path)",
    )
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="run on a real kubelet with containerd, kubetune installed with its chart (as root, after make node)",
    )
    args = parser.parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs: no wrapping at 80 columns
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    try:
        return run(args.experiment.resolve() if args.experiment else None, console, args.real_node)
    except KeyboardInterrupt:
        console.print("\nInterrupted; the cluster and operator were stopped.")
        return 130


if __name__ == "__main__":
    sys.exit(main())
