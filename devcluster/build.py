"""Builds (or finds) the control-plane binaries: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager, kubectl and helm.

Called by ``python -m devcluster build``, by :mod:`devcluster.cluster` before
it starts processes, and by ``.ci/run``. Nothing is downloaded from release
buckets: every binary is compiled from its Go module through the module proxy,
in throwaway build modules under the cache directory, and the results are
cached by version in ``$KUBETUNE_CACHE`` (default ``~/.cache/kubetune``), so
a warm cache returns at once. ``KUBEBUILDER_ASSETS`` (the envtest convention)
overrides the cache for any binary it contains.

Why throwaway modules: ``k8s.io/kubernetes`` requires its staging modules at
``v0.0.0`` with ``replace => ./staging/...`` directives that Go ignores in a
dependency, so the build module repeats each replace pinned to the matching
``v0.X.Y`` release, generated from that release's own ``go.mod``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.22.0"

KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
ALL_BINARIES = ("etcd",) + KUBE_COMMANDS + ("helm",)


def cache_root() -> Path:
    """Return the cache directory (``$KUBETUNE_CACHE`` or ``~/.cache/kubetune``)."""
    return Path(os.environ.get("KUBETUNE_CACHE", Path.home() / ".cache" / "kubetune"))


def bin_dir() -> Path:
    """Return the versioned folder the built binaries live in."""
    return cache_root() / "bin" / f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_helm-{HELM_VERSION}"


def binary_path(name: str) -> Path:
    """Return the path of one binary, preferring ``$KUBEBUILDER_ASSETS/<name>``."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and (Path(assets) / name).is_file():
        return Path(assets) / name
    return bin_dir() / name


def missing_binaries(names=ALL_BINARIES) -> list[str]:
    """Return the names among ``names`` that are neither cached nor in the assets folder."""
    return [n for n in names if not binary_path(n).is_file()]


def _log(msg: str) -> None:
    print(f"[devcluster build {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _go_env() -> dict:
    env = dict(os.environ)
    env.update(GOFLAGS="-mod=mod", GOTOOLCHAIN="local", CGO_ENABLED="0", GOWORK="off")
    return env


def _run_go(args: list[str], cwd: Path, label: str) -> str:
    """Run a go command, echoing a heartbeat every 30 s so a cold build shows it is alive."""
    started = time.monotonic()
    _log(f"{label}: go {' '.join(args[:3])}{' ...' if len(args) > 3 else ''}")
    proc = subprocess.Popen(
        ["go", *args], cwd=cwd, env=_go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    last_beat = started
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    while True:
        chunk = proc.stdout.readline()
        if chunk:
            lines.append(chunk)
            continue
        if proc.poll() is not None:
            rest = proc.stdout.read() or ""
            lines.append(rest)
            break
        now = time.monotonic()
        if now - last_beat >= 30:
            _log(f"{label}: still building ({now - started:.0f} s)")
            last_beat = now
        time.sleep(0.5)
    out = "".join(lines)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed (go {' '.join(args)}):\n{out[-4000:]}")
    _log(f"{label}: done in {time.monotonic() - started:.0f} s")
    return out


@contextlib.contextmanager
def _building_with_go(what: str, out: Path, announce: str, done: str) -> Iterator[None]:
    """Around building missing binaries into ``out``: check for the Go toolchain, create ``out``, log
    ``announce``, and after the block ``done`` with the seconds it took.

    Used by :func:`ensure_binaries`, :mod:`devcluster.nodebuild` and :mod:`devcluster.kueue`.

    Args:
        what: what is built, as the error names it ("the control plane").
        out: the folder the binaries are built into.
        announce: the log line before the build.
        done: the log line after it, before " in N s".

    Raises:
        FileNotFoundError: the ``go`` toolchain is not on PATH.
    """
    if shutil.which("go") is None:
        raise FileNotFoundError(f"building {what} needs the Go toolchain on PATH")
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _log(announce)
    yield
    _log(f"{done} in {time.monotonic() - started:.0f} s")


def _write_module(workdir: Path, module: str, requires: dict[str, str], replaces: dict[str, str]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"module {module}", "", "go 1.26", ""]
    lines += [f"require {path} {ver}" for path, ver in sorted(requires.items())]
    lines.append("")
    lines += [f"replace {path} => {path} {ver}" for path, ver in sorted(replaces.items())]
    (workdir / "go.mod").write_text("\n".join(lines) + "\n")


def _staging_replaces(kube_version: str, workdir: Path) -> dict[str, str]:
    """Map every staging module of ``k8s.io/kubernetes@kube_version`` to its ``v0.X.Y`` tag."""
    info = json.loads(
        _run_go(
            ["mod", "download", "-json", f"k8s.io/kubernetes@{kube_version}"], workdir, "download k8s.io/kubernetes"
        )
    )
    gomod = Path(info["GoMod"]).read_text()
    staging_version = "v0" + kube_version[2:]  # v1.36.3 -> v0.36.3
    return {m: staging_version for m in re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", gomod, re.M)}


def _version_ldflags(version: str) -> str:
    major, minor = version[1:].split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    flags = [
        f"-X '{pkg}.{k}={v}'"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for k, v in values.items()
    ]
    return "-s -w " + " ".join(flags)


def _build_kubernetes(out: Path, names: list[str]) -> None:
    workdir = cache_root() / "build" / f"kubernetes-{KUBERNETES_VERSION}"
    _write_module(workdir, "kubetune.local/build/kubernetes", {}, {})
    replaces = _staging_replaces(KUBERNETES_VERSION, workdir)
    _write_module(workdir, "kubetune.local/build/kubernetes", {"k8s.io/kubernetes": KUBERNETES_VERSION}, replaces)
    _log(f"kubernetes {KUBERNETES_VERSION}: {len(replaces)} staging modules pinned to v0{KUBERNETES_VERSION[2:]}")
    for name in names:
        _run_go(
            [
                "build",
                "-trimpath",
                "-tags",
                "selinux,notest,grpcnotrace",
                "-ldflags",
                _version_ldflags(KUBERNETES_VERSION),
                "-o",
                str(out / name),
                f"k8s.io/kubernetes/cmd/{name}",
            ],
            workdir,
            name,
        )


def _build_etcd(out: Path) -> None:
    workdir = cache_root() / "build" / f"etcd-{ETCD_VERSION}"
    _write_module(workdir, "kubetune.local/build/etcd", {"go.etcd.io/etcd/server/v3": ETCD_VERSION}, {})
    sha = "-X 'go.etcd.io/etcd/api/v3/version.GitSHA=kubetune'"
    _run_go(
        ["build", "-trimpath", "-ldflags", f"-s -w {sha}", "-o", str(out / "etcd"), "go.etcd.io/etcd/server/v3"],
        workdir,
        "etcd",
    )


def _build_helm(out: Path) -> None:
    workdir = cache_root() / "build" / f"helm-{HELM_VERSION}"
    _write_module(workdir, "kubetune.local/build/helm", {"helm.sh/helm/v3": HELM_VERSION}, {})
    flags = (
        f"-s -w -X 'helm.sh/helm/v3/internal/version.version={HELM_VERSION}' "
        f"-X 'helm.sh/helm/v3/internal/version.gitTreeState=clean'"
    )
    _run_go(
        ["build", "-trimpath", "-ldflags", flags, "-o", str(out / "helm"), "helm.sh/helm/v3/cmd/helm"], workdir, "helm"
    )


def ensure_binaries(names=ALL_BINARIES) -> dict[str, Path]:
    """Build whatever of ``names`` is missing and return ``{name: path}``.

    Raises:
        RuntimeError: a go command failed (its output tail is in the message).
        FileNotFoundError: the ``go`` toolchain is not on PATH.
    """
    missing = missing_binaries(names)
    if missing:
        out = bin_dir()
        announce = (
            f"building {', '.join(missing)} into {out} "
            "(a cold build takes about 10 minutes on 2 cores; later runs reuse the cache)"
        )
        with _building_with_go("the control plane", out, announce, "all built"):
            if "etcd" in missing:
                _build_etcd(out)
            kube = [n for n in missing if n in KUBE_COMMANDS]
            if kube:
                _build_kubernetes(out, kube)
            if "helm" in missing:
                _build_helm(out)
    return {n: binary_path(n) for n in names}


def main(argv: list[str] | None = None) -> int:
    """Build every binary; print where they are."""
    paths = ensure_binaries()
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
