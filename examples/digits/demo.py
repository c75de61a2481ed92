"""The ``make demo`` runner: the digits experiment on a local cluster, shown live.

Run from the repository root as ``python -m examples.digits.demo`` (``make demo`` does). It builds
or reuses the control-plane binaries, starts a one-node cluster with 4 GPUs and an S3 endpoint
(:class:`devcluster.Cluster`), starts the kubetune operator as a local process, creates a
namespace with the ``s3-creds`` Secret, applies ``experiment.yaml`` with the local S3 endpoint
filled in, and shows the trials in a table that updates in place (like Ray Tune's status table;
one progress line every few seconds instead when stdout is not a terminal). At the end it prints
the best trial, the counts per phase and what the trials wrote to storage, then tears everything
down, also on Ctrl-C. Exit status: 0 when the experiment succeeded, 1 when it failed or timed out,
130 when interrupted.
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import boto3
import yaml
from kubernetes import client
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from devcluster import Cluster, ClusterConfig, build
from devcluster.operator import OperatorProcess
from kubetune.checkpoints import COMMIT_MARKER
from kubetune.search import DOMAIN_NAMES

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
GROUP, VERSION = "kubetune.io", "v1alpha1"
NAMESPACE = "kubetune-demo"
SECRET = "s3-creds"
PHASES = ("Pending", "Running", "Paused", "Succeeded", "Failed")
FINAL_PHASES = ("Succeeded", "Failed")
PHASE_STYLES = {"Pending": "yellow", "Running": "cyan", "Paused": "magenta", "Succeeded": "green", "Failed": "red"}
#: Result keys shown next to the experiment's metric when the trials report them.
EXTRA_METRICS = ("mean_loss",)
#: Seconds between two progress lines when stdout is not a terminal.
LINE_INTERVAL_S = 5.0


def load_experiment(path: Path, endpoint: str | None) -> dict:
    """Read an Experiment manifest and point its storage at ``endpoint`` (the local S3), if given."""
    body = yaml.safe_load(path.read_text())
    if endpoint:
        body["spec"]["storage"]["endpoint"] = endpoint
    return body


def searched_keys(space: dict, prefix: str = "") -> list[str]:
    """Keys of ``space`` (a ``spec.config``) that are search domains, nested ones as ``a/b``."""
    keys = []
    for key, value in space.items():
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in DOMAIN_NAMES:
            keys.append(prefix + key)
        elif isinstance(value, dict):
            keys.extend(searched_keys(value, f"{prefix}{key}/"))
    return keys


def lookup(config: dict, key: str):
    """``config[a][b]`` for ``key`` ``"a/b"``; None when missing."""
    value = config
    for part in key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def fmt(value) -> str:
    """A cell: floats with 4 significant digits, missing values blank."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fmt_seconds(value) -> str:
    """Seconds with two decimals, missing values blank."""
    return "" if value is None else f"{value:.2f}"


def fmt_duration(seconds: float) -> str:
    """``H:MM:SS``."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Snapshot:
    """The Experiment and its Trials as read at one moment.

    Attributes:
        experiment: the Experiment object (dict).
        trials: its Trials, ordered by name.

    Raises:
        kubernetes.client.ApiException: reading failed (404: no such Experiment).
    """

    def __init__(self, custom: client.CustomObjectsApi, namespace: str, name: str):
        self.experiment = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "experiments", name)
        items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trials")["items"]
        self.trials = sorted((t for t in items if t["spec"].get("experiment") == name),
                             key=lambda t: t["metadata"]["name"])

    @property
    def status(self) -> dict:
        return self.experiment.get("status") or {}

    @property
    def phase(self) -> str:
        return self.status.get("phase") or "Pending"

    def counts(self) -> dict[str, int]:
        """Trials per phase, in :data:`PHASES` order (from the Trials themselves)."""
        seen = collections.Counter((t.get("status") or {}).get("phase") or "Pending" for t in self.trials)
        return {phase: seen[phase] for phase in PHASES}

    def headline(self, elapsed: float) -> str:
        """One line: phase, trials per phase, elapsed time and the best trial so far."""
        spec, best = self.experiment["spec"], self.status.get("bestTrial") or {}
        counts = ", ".join(f"{n} {phase.lower()}" for phase, n in self.counts().items() if n)
        line = (f"Experiment {self.experiment['metadata']['name']}: {self.phase} | "
                f"{len(self.trials)} trials{': ' + counts if counts else ''} | elapsed {fmt_duration(elapsed)}")
        if "metricValue" in best:
            line += f" | best {spec.get('metric')} {best['metricValue']:.4f} ({best.get('name')})"
        return line


def status_table(snap: Snapshot, keys: list[str], elapsed: float) -> Group:
    """The live view: the headline over one row per trial (Ray Tune's status table).

    Args:
        keys: config keys to show, as :func:`searched_keys` returns them.
    """
    spec = snap.experiment["spec"]
    metric = spec.get("metric")
    metrics = [m for m in (metric, *EXTRA_METRICS) if m]
    table = Table(show_edge=False, header_style="bold")
    for column in ("Trial", "Phase", "GPU", *keys):
        table.add_column(column)
    for column in ("Iter", "Time (s)", *metrics):
        table.add_column(column, justify="right")
    for trial in snap.trials:
        status = trial.get("status") or {}
        last = status.get("lastResult") or {}
        phase = status.get("phase") or "Pending"
        config = trial["spec"].get("config") or {}
        table.add_row(trial["metadata"]["name"], Text(phase, style=PHASE_STYLES.get(phase, "")),
                      fmt(last.get("gpu_ids")), *(fmt(lookup(config, k)) for k in keys), fmt(status.get("iteration")),
                      fmt_seconds(last.get("time_total_s")), *(fmt(last.get(m)) for m in metrics))
    return Group(Text(snap.headline(elapsed), style="bold"), table)


def watch(custom: client.CustomObjectsApi, namespace: str, name: str, keys: list[str], console: Console,
          timeout_s: float) -> Snapshot:
    """Show progress until the Experiment is Succeeded or Failed; return the final snapshot.

    Args:
        keys: config keys the table shows.

    Raises:
        TimeoutError: it did not finish within ``timeout_s`` seconds.
    """
    started = time.monotonic()
    last_line = 0.0
    with ExitStack() as stack:
        live = None
        if console.is_terminal:
            live = stack.enter_context(Live(console=console, refresh_per_second=4, transient=False))
        while True:
            snap = Snapshot(custom, namespace, name)
            elapsed = time.monotonic() - started
            if live is not None:
                live.update(status_table(snap, keys, elapsed))
            elif snap.phase in FINAL_PHASES:
                console.print(status_table(snap, keys, elapsed))
            elif elapsed - last_line >= LINE_INTERVAL_S:
                console.print(snap.headline(elapsed), highlight=False)
                last_line = elapsed
            if snap.phase in FINAL_PHASES:
                return snap
            if elapsed > timeout_s:
                raise TimeoutError(f"experiment {name} did not finish within {timeout_s:.0f} s")
            time.sleep(0.5)


def print_outcome(console: Console, snap: Snapshot) -> None:
    """The best trial (name, config, metric, checkpoint), the counts and any failed trial's message."""
    spec, status = snap.experiment["spec"], snap.status
    best = status.get("bestTrial") or {}
    console.print(f"\n[bold]Experiment {snap.experiment['metadata']['name']}: {snap.phase}[/bold]")
    console.print("Trials per phase: " + ", ".join(f"{phase} {n}" for phase, n in snap.counts().items()),
                  highlight=False)
    if best:
        console.print(f"Best trial:  {best.get('name')} (iteration {best.get('iteration')})", highlight=False)
        console.print(f"  config:    {best.get('config')}", highlight=False)
        console.print(f"  {spec.get('metric')}: {best.get('metricValue')}", highlight=False)
        console.print(f"  checkpoint: {best.get('checkpoint')}", highlight=False)
    for trial in snap.trials:
        trial_status = trial.get("status") or {}
        if trial_status.get("phase") == "Failed":
            console.print(f"[red]{trial['metadata']['name']} failed:[/red] {trial_status.get('message', '')}",
                          highlight=False)
    for cond in status.get("conditions") or []:
        if cond["type"] == "Failed" and cond["status"] == "True":
            console.print(f"[red]Experiment failed ({cond['reason']}):[/red] {cond['message']}", highlight=False)


def print_storage(console: Console, s3, bucket: str, prefix: str) -> None:
    """List what the trials wrote under ``s3://bucket/prefix/``, grouped per trial and checkpoint."""
    files: dict[str, dict[str, list[tuple[str, int]]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            trial, _, rest = obj["Key"][len(prefix) + 1:].partition("/")
            group, _, name = rest.rpartition("/")
            files[trial][group].append((name, obj["Size"]))
    console.print(f"\n[bold]Storage: s3://{bucket}/{prefix}/[/bold]")
    for trial in sorted(files):
        console.print(f"  {trial}/", highlight=False)
        for group in sorted(files[trial]):
            entries = files[trial][group]
            if not group:
                for name, size in sorted(entries):
                    note = ""
                    if name == "result.json":
                        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/{trial}/{name}")["Body"].read()
                        note = f", {sum(1 for line in body.splitlines() if line.strip())} results"
                    console.print(f"    {name:<24} {size:>9,} B{note}", highlight=False)
            else:
                total = sum(size for _, size in entries)
                names = ", ".join(sorted(name for name, _ in entries if not name.startswith(".")))
                committed = "committed" if any(name == COMMIT_MARKER for name, _ in entries) else "uncommitted"
                console.print(f"    {group + '/':<24} {total:>9,} B  {names} ({committed})", highlight=False)


def _interrupt_once(signum, frame) -> None:
    """First Ctrl-C (or SIGTERM) unwinds into the teardown; further ones are ignored so it completes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run(experiment_path: Path, timeout_s: float, console: Console) -> int:
    """Start the cluster and operator, run the experiment, print the outcome, tear down.

    Returns:
        0 when the experiment succeeded, 1 otherwise.
    """
    started = time.monotonic()
    console.print("[bold]kubetune demo[/bold]: building or reusing the control-plane binaries")
    build.ensure_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"))
    crds = sorted(str(p) for p in (ROOT / "crds").glob("*.yaml"))
    with ExitStack() as stack:
        console.print("Starting the local cluster: 1 node with 4 GPUs, kube-apiserver, scheduler, "
                      "controller-manager, process kubelet, S3 (moto)")
        cluster = stack.enter_context(Cluster(ClusterConfig(nodes=1, gpus_per_node=4, crds=crds)))
        console.print(f"  up in {cluster.state['startSeconds']} s; API {cluster.api_url}, S3 {cluster.s3_endpoint}")
        operator = OperatorProcess(cluster, cluster.workdir / "logs" / "operator.log",
                                   KUBETUNE_OPERATOR_STATUS_WRITE_INTERVAL_S="1")
        stack.callback(operator.stop)
        operator.start()
        console.print(f"Operator running (collector {operator.url})")
        api = cluster.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        env = cluster.env()
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": SECRET}, "stringData": {
            "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"]}})
        body = load_experiment(experiment_path, cluster.s3_endpoint)
        name, spec = body["metadata"]["name"], body["spec"]
        keys = searched_keys(spec.get("config") or {})
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "experiments", body)
        console.print(f"Applied {experiment_path.name} as {NAMESPACE}/{name}: {spec.get('numSamples', 1)} samples, "
                      f"{spec.get('maxConcurrentTrials', 'the default number')} at a time, "
                      f"{(spec.get('resourcesPerTrial') or {}).get('gpu', 0)} GPU each\n")
        try:
            snap = watch(custom, NAMESPACE, name, keys, console, timeout_s)
        except TimeoutError as exc:
            console.print(f"[red]{exc}[/red]")
            return 1
        print_outcome(console, snap)
        s3 = boto3.client("s3", endpoint_url=cluster.s3_endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env["AWS_DEFAULT_REGION"])
        if spec["storage"]["uri"].startswith("s3://"):
            bucket, _, root = spec["storage"]["uri"].removeprefix("s3://").partition("/")
            print_storage(console, s3, bucket, "/".join(p for p in (root.strip("/"), NAMESPACE, name) if p))
        if snap.phase != "Succeeded":
            console.print("\n[bold]Operator log (last lines):[/bold]")
            tail = operator.log.read_text(errors="replace").splitlines()[-20:]
            console.print("\n".join(tail), highlight=False, markup=False)
        console.print("\nTearing down the cluster")
    console.print(f"Done in {fmt_duration(time.monotonic() - started)}")
    return 0 if snap.phase == "Succeeded" else 1


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m examples.digits.demo [--experiment FILE] [--timeout SECONDS]``."""
    parser = argparse.ArgumentParser(prog="python -m examples.digits.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", type=Path, default=HERE / "experiment.yaml",
                        help="Experiment manifest to run (default: examples/digits/experiment.yaml)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for the experiment")
    args = parser.parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs: no wrapping at 80 columns
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    try:
        return run(args.experiment.resolve(), args.timeout, console)
    except KeyboardInterrupt:
        console.print("\nInterrupted; the cluster and operator were stopped.")
        return 130


if __name__ == "__main__":
    sys.exit(main())
