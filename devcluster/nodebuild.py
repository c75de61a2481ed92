"""Builds (or finds) the real node's binaries: kubelet, kube-proxy, containerd with its runc shim and
``ctr``, CoreDNS, the fake-GPU device plugin and the pause program.

Called by ``python -m devcluster build --node``, by :mod:`devcluster.realnode` before it starts the
node, and so by ``make test`` and ``.ci/run``. As for the control plane (:mod:`devcluster.build`),
everything is compiled here from Go modules through the module proxy (``CGO_ENABLED=0``) in
throwaway build modules, and cached by version under ``$KUBETUNE_CACHE/bin``; the pause program
is Kubernetes' own ``build/pause/linux/pause.c`` compiled statically with the system's C compiler.
runc and the CNI plugins come from Debian's packages (``runc``, ``containernetworking-plugins``).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

from .build import (
    KUBERNETES_VERSION,
    _build_kubernetes,
    _building_with_go,
    _run_go,
    _staging_replaces,
    _write_module,
    cache_root,
)

CONTAINERD_VERSION = "v2.4.2"
COREDNS_VERSION = "v1.15.0"

CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
NODE_BINARIES = ("kubelet", "kube-proxy", *CONTAINERD_COMMANDS, "coredns", "deviceplugin", "pause")
#: Host programs the node needs from Debian's packages: (program, package).
HOST_PROGRAMS = (
    ("runc", "runc"),
    ("iptables", "iptables"),
    ("conntrack", "conntrack"),
    ("ip", "iproute2"),
    ("mount", "mount"),
    ("gcc", "gcc"),
)
CNI_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")

_GO_SOURCES = Path(__file__).resolve().parent / "go"


def node_bin_dir() -> Path:
    """Return the folder the node's binaries live in, named by the versions and by a hash of the Go
    sources in ``devcluster/go`` (so a changed device plugin is rebuilt)."""
    sources = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(_GO_SOURCES.rglob("*.go")))).hexdigest()[:8]
    name = f"node-k8s-{KUBERNETES_VERSION}_containerd-{CONTAINERD_VERSION}_coredns-{COREDNS_VERSION}_go-{sources}"
    return cache_root() / "bin" / name


def cni_bin_dir() -> Path | None:
    """Return the folder holding Debian's CNI plugins, or None when a plugin is missing."""
    for folder in CNI_DIRS:
        if all((Path(folder) / p).is_file() for p in CNI_PLUGINS):
            return Path(folder)
    return None


def missing_host_programs() -> list[str]:
    """Return ``program (package)`` for each host program or CNI plugin the node needs and lacks."""
    missing = [f"{prog} ({pkg})" for prog, pkg in HOST_PROGRAMS if shutil.which(prog) is None]
    if cni_bin_dir() is None:
        missing.append("CNI plugins bridge, host-local, loopback, portmap (containernetworking-plugins)")
    return missing


def _build_containerd(out: Path, names: list[str]) -> None:
    workdir = cache_root() / "build" / f"containerd-{CONTAINERD_VERSION}"
    _write_module(
        workdir, "kubetune.local/build/containerd", {"github.com/containerd/containerd/v2": CONTAINERD_VERSION}, {}
    )
    pkg = "github.com/containerd/containerd/v2"
    ldflags = f"-s -w -X '{pkg}/version.Version={CONTAINERD_VERSION}' -X '{pkg}/version.Revision=kubetune'"
    for name in names:
        tags = "urfave_cli_no_docs,no_btrfs,no_devmapper,no_zfs" + (
            ",no_grpc" if name.endswith("-shim-runc-v2") else ""
        )
        _run_go(
            ["build", "-trimpath", "-tags", tags, "-ldflags", ldflags, "-o", str(out / name), f"{pkg}/cmd/{name}"],
            workdir,
            name,
        )


def _build_coredns(out: Path) -> None:
    workdir = cache_root() / "build" / f"coredns-{COREDNS_VERSION}"
    _write_module(workdir, "kubetune.local/build/coredns", {"github.com/coredns/coredns": COREDNS_VERSION}, {})
    shutil.copy(_GO_SOURCES / "coredns" / "main.go", workdir / "main.go")
    _run_go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "coredns"), "."], workdir, "coredns")


def _build_deviceplugin(out: Path) -> None:
    workdir = cache_root() / "build" / f"deviceplugin-{KUBERNETES_VERSION}"
    _write_module(workdir, "kubetune.local/build/deviceplugin", {}, {})
    replaces = _staging_replaces(KUBERNETES_VERSION, workdir)
    _write_module(workdir, "kubetune.local/build/deviceplugin", {"k8s.io/kubernetes": KUBERNETES_VERSION}, replaces)
    shutil.copy(_GO_SOURCES / "deviceplugin" / "main.go", workdir / "main.go")
    _run_go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "deviceplugin"), "."], workdir, "deviceplugin")


def _build_pause(out: Path) -> None:
    """Compile Kubernetes' pause program (the pod sandbox's process) from the module's own source."""
    workdir = cache_root() / "build" / f"kubernetes-{KUBERNETES_VERSION}"
    info = _run_go(["list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"], workdir, "locate k8s.io/kubernetes")
    source = Path(info.strip().splitlines()[-1]) / "build" / "pause" / "linux" / "pause.c"
    subprocess.run(
        ["gcc", "-Os", "-static", "-DVERSION=kubetune", "-o", str(out / "pause"), str(source)],
        check=True,
        capture_output=True,
        text=True,
    )


def missing_node_binaries() -> list[str]:
    """Return the node binaries not yet in :func:`node_bin_dir`."""
    return [n for n in NODE_BINARIES if not (node_bin_dir() / n).is_file()]


def ensure_node_binaries() -> dict[str, Path]:
    """Build whatever node binary is missing and return ``{name: path}``.

    Raises:
        RuntimeError: a go or gcc command failed (with its output tail), or a host program is missing
            (naming its Debian package).
        FileNotFoundError: the ``go`` toolchain is not on PATH.
    """
    lacking = missing_host_programs()
    if lacking:
        raise RuntimeError("the real node needs these host programs: " + ", ".join(lacking))
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / "node-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # `make node` builds images beside the binaries: one builder at a time
        _build_missing()
    return {n: node_bin_dir() / n for n in NODE_BINARIES}


def _build_missing() -> None:
    missing = missing_node_binaries()
    if missing:
        out = node_bin_dir()
        announce = f"building the real node's {', '.join(missing)} into {out}"
        with _building_with_go("the real node", out, announce, "node built"):
            kube = [n for n in missing if n in ("kubelet", "kube-proxy")]
            if kube or "pause" in missing:
                _build_kubernetes(out, kube)
            containerd = [n for n in missing if n in CONTAINERD_COMMANDS]
            if containerd:
                _build_containerd(out, containerd)
            if "coredns" in missing:
                _build_coredns(out)
            if "deviceplugin" in missing:
                _build_deviceplugin(out)
            if "pause" in missing:
                _build_pause(out)
