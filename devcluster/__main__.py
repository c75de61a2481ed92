"""Command line of the local cluster: ``python -m devcluster build|images|up|down|status|logs``.

``up`` starts a detached cluster in ``$KUBETUNE_DEVCLUSTER_DIR`` (default
``~/.cache/kubetune/devcluster``), installs kubetune on it with the chart
(:mod:`devcluster.install`) and prints the shell exports to reach both;
``down`` stops it by the PIDs in its state file. ``build --kueue`` and ``up --kueue`` add Kueue
(:mod:`devcluster.kueue`).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path

from . import build, images, install, kueue, nodebuild
from .cluster import Cluster, ClusterConfig, default_state_dir


def _attach(workdir: Path) -> Cluster | None:
    try:
        return Cluster.attach(workdir)
    except FileNotFoundError:
        return None


def cmd_up(args) -> int:
    workdir = Path(args.dir)
    existing = _attach(workdir)
    if existing and any(existing.running().values()):
        print(f"a cluster is already running in {workdir}; run `python -m devcluster down` first", file=sys.stderr)
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    cfg = ClusterConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        node_cpu=args.cpu,
        node_memory=args.memory,
        crds=args.crd or [],
        detach=True,
        real_node=args.real_node,
    )
    cluster = Cluster(cfg, workdir)
    try:
        cluster.start()
        if args.kueue:
            kueue.Kueue(cluster).start()  # stopped with the cluster (`down`): its PID is in the state file
        started = time.monotonic()
        exports = install.install(cluster)
    except BaseException:
        cluster.stop()
        raise
    took = f"up in {cluster.state['startSeconds']} s, kubetune installed in {time.monotonic() - started:.1f} s"
    print(f"# devcluster is {took}; paste these into your shell, or eval them:", file=sys.stderr)
    for key, value in {**cluster.env(), **exports}.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def cmd_down(args) -> int:
    cluster = _attach(Path(args.dir))
    if cluster is None:
        print("no cluster state found; nothing to stop", file=sys.stderr)
        return 0
    cluster.stop()
    print(f"stopped the cluster in {args.dir}", file=sys.stderr)
    return 0


def cmd_status(args) -> int:
    cluster = _attach(Path(args.dir))
    if cluster is None:
        print("no cluster")
        return 1
    alive = cluster.running()
    for name, ok in alive.items():
        print(f"{name:20s} {'running' if ok else 'stopped'}  pid {cluster.state['pids'][name]}")
    for name, port in cluster.state["ports"].items():
        print(f"{name + ' port':20s} {port}")
    return 0 if alive and all(alive.values()) else 1


def cmd_logs(args) -> int:
    pod_dir = Path(args.dir) / "pods" / f"{args.namespace}_{args.pod}"
    logs = sorted(pod_dir.glob("*.log")) if args.container is None else [pod_dir / f"{args.container}.log"]
    if not logs or not all(p.exists() for p in logs):
        print(f"no logs for pod {args.namespace}/{args.pod}", file=sys.stderr)
        return 1
    for path in logs:
        if len(logs) > 1:
            print(f"==> {path.stem} <==")
        sys.stdout.write(path.read_text(errors="replace"))
    return 0


def cmd_build(args) -> int:
    code = build.main([])
    if args.node:
        for name, path in nodebuild.ensure_node_binaries().items():
            print(f"{name}\t{path}")
    if args.kueue:
        print(f"kueue\t{kueue.kueue_binary()}")
    return code


def cmd_images(args) -> int:
    return images.main()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(default_state_dir()), help="cluster state directory")
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="build or reuse the control-plane binaries")
    build_cmd.add_argument("--node", action="store_true", help="also the real node's (kubelet, containerd, CoreDNS...)")
    build_cmd.add_argument("--kueue", action="store_true", help=f"also Kueue's manager ({kueue.KUEUE_VERSION})")
    build_cmd.set_defaults(func=cmd_build)
    sub.add_parser("images", help="build or reuse the container images for the real node").set_defaults(func=cmd_images)
    up = sub.add_parser("up", help="start a cluster, install kubetune on it and print the shell exports")
    up.add_argument("--nodes", type=int, default=1)
    up.add_argument("--gpus-per-node", type=int, default=4)
    up.add_argument("--cpu", default="32")
    up.add_argument("--memory", default="128Gi")
    up.add_argument("--crd", action="append", help="CRD manifest to install before the controllers start")
    up.add_argument(
        "--real-node",
        action="store_true",
        help="run pods in containers on a real kubelet with containerd (root; --gpus-per-node fake GPUs)",
    )
    up.add_argument(
        "--kueue", action="store_true", help="also run Kueue with its pod integration (root; see devcluster/kueue.py)"
    )
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop the cluster").set_defaults(func=cmd_down)
    sub.add_parser("status", help="say what runs").set_defaults(func=cmd_status)
    logs = sub.add_parser("logs", help="print a pod's container logs")
    logs.add_argument("pod")
    logs.add_argument("-n", "--namespace", default="default")
    logs.add_argument("-c", "--container")
    logs.set_defaults(func=cmd_logs)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
