"""Builds kubetune's container images without a registry and loads them into the real node's
containerd.

Called by :mod:`devcluster.realnode` when it starts (and by ``python -m devcluster images``).
The chain, each step a real tool from Debian's packages:

1. a Python base image: ``mmdebstrap --variant=minbase`` makes a Debian bookworm root filesystem
   with ``python3`` (3.11, the minor version of the client that cloudpickles trainables) from the
   host's own apt sources, imported by ``buildah`` as ``kubetune.local/debian-python:bookworm``;
2. the Dockerfile's ``operator``, ``runtime`` and ``examples`` targets, built by ``buildah bud`` with
   ``--build-arg PYTHON_IMAGE=`` that base (users with a registry keep the Dockerfile's default), and the
   trial images without kubetune (``examples/container-trials/Containerfile``: ``trial-python``, Debian's
   python3 with scikit-learn's digits data copied in from this environment, and ``trial-shell``, busybox
   from scratch) with ``--build-arg DEBIAN_IMAGE=`` that base;
3. the pause program (:mod:`devcluster.nodebuild`) as the sandbox image;
4. each image saved as a docker archive and imported with ``ctr -n k8s.io images import``.

Images are tagged by the content hash of what they are built from (the build context the
``.dockerignore`` lets through, the Dockerfile, the base), and their archives are cached under
``$KUBETUNE_CACHE/images``, so an unchanged tree rebuilds nothing
(``KUBETUNE_DEVCLUSTER_IMAGES=latest`` reuses the newest archive of each target even when the tree
changed: a shortcut while iterating on tests, never used by ``make test``). Build timings go to
``$KUBETUNE_CACHE/images/builds.jsonl``.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .build import _log, cache_root

ROOT = Path(__file__).resolve().parent.parent
DEBIAN_SUITE = "bookworm"
#: Debian packages of the Python base image (minbase adds dpkg, apt and the essential set).
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "passwd", "tzdata")
#: The Dockerfile's targets built for the real node, in build order.
TARGETS = ("runtime", "operator", "examples")
#: Targets of the container trials' Containerfile (images with no kubetune in them), in build order.
TRIAL_TARGETS = ("trial-python", "trial-shell")
TRIALS_DIR = ROOT / "examples" / "container-trials"
#: Files outside the target folders that every image depends on.
_CONTEXT_ROOTS = ("Dockerfile", ".dockerignore", "docker", "trainable-runtime", "operator", "examples")


@dataclass(frozen=True)
class Image:
    """One image: its reference (``docker.io/kubetune/<name>:<tag>``) and its cached archive."""

    name: str
    ref: str
    archive: Path


def images_dir() -> Path:
    """Where image archives and buildah's storage live (``$KUBETUNE_CACHE/images``)."""
    return cache_root() / "images"


def _buildah_argv(*args: str) -> list[str]:
    """buildah with kubetune's own image storage (overlay: layers are shared, not copied as vfs does)."""
    storage = images_dir() / "buildah-overlay"
    argv = ["buildah", "--root", str(storage / "root"), "--runroot", str(storage / "run")]
    return [*argv, "--storage-driver", "overlay", *args]


def _buildah(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return _run(_buildah_argv(*args), **kwargs)


def _run(argv: list[str], *, cwd: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} {' '.join(argv[1:4])} ... failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def missing_tools() -> list[str]:
    """Return ``tool (Debian package)`` for each image tool this host lacks."""
    return [f"{t} ({t})" for t in ("buildah", "mmdebstrap") if shutil.which(t) is None]


def _apt_sources() -> list[str]:
    """The host's apt source files, given to mmdebstrap as its mirrors (no mirror is named here)."""
    files = sorted(glob.glob("/etc/apt/sources.list.d/*.sources")) + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    if Path("/etc/apt/sources.list").is_file() and Path("/etc/apt/sources.list").stat().st_size:
        files.insert(0, "/etc/apt/sources.list")
    if not files:
        raise RuntimeError("no apt sources on this host for mmdebstrap (/etc/apt/sources.list[.d])")
    return files


def _ca_args() -> list[str]:
    """Build arguments giving pip the host's CA bundle (``$PIP_CERT``, else ``$SSL_CERT_FILE``), bound
    into the build and named by the Dockerfile's ``PIP_CERT`` argument; none when the host sets neither."""
    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if not bundle or not Path(bundle).is_file():
        return []
    inside = "/run/kubetune-build-ca.crt"
    return ["--volume", f"{Path(bundle).resolve()}:{inside}:ro", "--build-arg", f"PIP_CERT={inside}"]


def _context_files(roots=_CONTEXT_ROOTS) -> list[Path]:
    """Every file under ``roots`` (tracked or untracked, not ignored by git), sorted."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *roots],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(ROOT / f for f in out if (ROOT / f).is_file())


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def _record(step: str, seconds: float, **extra) -> None:
    with open(images_dir() / "builds.jsonl", "a") as log:
        log.write(json.dumps({"step": step, "seconds": round(seconds, 1), "at": time.time(), **extra}) + "\n")


def _has_image(ref: str) -> bool:
    return subprocess.run(_buildah_argv("inspect", "--type", "image", ref), capture_output=True).returncode == 0


def _base_image() -> str:
    """Build (once) the Debian Python base and return its buildah reference."""
    tag = _digest([DEBIAN_SUITE.encode(), " ".join(BASE_PACKAGES).encode()])
    ref = f"kubetune.local/debian-python:{DEBIAN_SUITE}-{tag}"
    if _has_image(ref):
        return ref
    started = time.monotonic()
    _log(f"base image: mmdebstrap {DEBIAN_SUITE} with {', '.join(BASE_PACKAGES)}")
    with tempfile.TemporaryDirectory(prefix="kubetune-base-", dir=images_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        _run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--include=" + ",".join(BASE_PACKAGES),
                # the image needs no apt lists or docs; keep it small
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/var/cache/apt/*",
                DEBIAN_SUITE,
                str(rootfs),
                *_apt_sources(),
            ]
        )
        (Path(tmp) / "Containerfile").write_text('FROM scratch\nADD rootfs.tar /\nENV LANG=C.UTF-8\nCMD ["python3"]\n')
        _buildah("bud", "--isolation", "chroot", "--layers=false", "-t", ref, str(tmp))
    _record("base", time.monotonic() - started, ref=ref)
    return ref


def _save(ref: str, name: str, archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    _buildah("push", ref, f"docker-archive:{partial}:{ref}")
    partial.rename(archive)


def _build(target: str, digest_parts: list[bytes], bud_args: list[str]) -> Image:
    """The image of ``target`` tagged by the digest of ``digest_parts``: its cached archive, else built with
    ``buildah bud --target`` and ``bud_args`` (options, then the context) and saved."""
    cached = sorted(images_dir().glob(f"{target}-*.tar"), key=lambda p: p.stat().st_mtime)
    if os.environ.get("KUBETUNE_DEVCLUSTER_IMAGES") == "latest" and cached:
        # a developer's shortcut: the newest image even if the tree changed since
        tag = cached[-1].stem.rsplit("-", 1)[1]
        _log(f"image {target}: reusing {cached[-1].name} (KUBETUNE_DEVCLUSTER_IMAGES=latest)")
        return Image(target, f"docker.io/kubetune/{target}:{tag}", cached[-1])
    tag = _digest(digest_parts)
    ref = f"docker.io/kubetune/{target}:{tag}"
    archive = images_dir() / f"{target}-{tag}.tar"
    if not archive.is_file():
        started = time.monotonic()
        _log(f"image {target}: buildah bud --target {target}")
        _buildah("bud", "--isolation", "chroot", "--target", target, "-t", ref, *bud_args, timeout=3600)
        _save(ref, target, archive)
        _record(target, time.monotonic() - started, ref=ref, bytes=archive.stat().st_size)
    _prune(target, keep=archive)
    return Image(target, ref, archive)


def digits_data() -> Path:
    """scikit-learn's copy of the UCI handwritten digits (``digits.csv.gz``), found without importing it.

    Raises:
        RuntimeError: scikit-learn is not installed here.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the trial-python image takes its data from scikit-learn: pip install scikit-learn")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


def _trial_images(base: str, targets) -> dict[str, Image]:
    """Build (or find cached) the container trials' images on ``base``, from a context holding the files of
    :data:`TRIALS_DIR` and :func:`digits_data`."""
    with tempfile.TemporaryDirectory(prefix="kubetune-trials-", dir=images_dir()) as tmp:
        context = Path(tmp)
        for path in _context_files([str(TRIALS_DIR.relative_to(ROOT))]):
            shutil.copy2(path, context / path.name)  # keeps train.sh executable
        shutil.copy2(digits_data(), context / "digits.csv.gz")
        parts = [p.name.encode() + b"\0" + p.read_bytes() for p in sorted(context.iterdir())]
        bud_args = ["--layers", "--build-arg", f"DEBIAN_IMAGE={base}", "-f", str(context / "Containerfile"), tmp]
        return {target: _build(target, [base.encode(), target.encode(), *parts], bud_args) for target in targets}


def build_images(targets=TARGETS) -> dict[str, Image]:
    """Build (or find cached) images and return them by name (``pause``, each target and each of
    :data:`TRIAL_TARGETS`).

    Raises:
        RuntimeError: a tool is missing (naming its Debian package) or a build step failed (with its
            output tail).
    """
    lacking = missing_tools()
    if lacking:
        raise RuntimeError("building images needs: " + ", ".join(lacking))
    images_dir().mkdir(parents=True, exist_ok=True)
    out: dict[str, Image] = {}
    base = _base_image()
    context = [str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() for p in _context_files()]
    for target in targets:
        out[target] = _build(
            target,
            [base.encode(), target.encode(), *context],
            # --layers: a stage whose inputs did not change is reused (the runtime's under examples)
            ["--layers", *_ca_args(), "--build-arg", f"PYTHON_IMAGE={base}", "-f", str(ROOT / "Dockerfile"), str(ROOT)],
        )
    out.update(_trial_images(base, TRIAL_TARGETS))
    out["pause"] = _pause_image()  # last: `make node` builds the node's binaries meanwhile
    return out


def rebuild(image: Image, label: str, directory: Path) -> Image:
    """Build a new image on ``image`` with buildah, adding the label ``io.kubetune.rebuild=<label>`` (a new
    image ID: to the node, a new release of the same code), saved as an archive in ``directory``.

    Raises:
        RuntimeError: a buildah step failed (with its output tail).
    """
    ref = f"{image.ref.rsplit(':', 1)[0]}:{label}"
    container = _buildah("from", f"docker-archive:{image.archive}").stdout.strip().splitlines()[-1]
    _buildah("config", "--label", f"io.kubetune.rebuild={label}", container)
    _buildah("commit", "--rm", container, ref)
    archive = Path(directory) / f"{image.name}-{label}.tar"
    try:
        _save(ref, image.name, archive)
    finally:
        subprocess.run(_buildah_argv("rmi", ref), capture_output=True)
    return Image(image.name, ref, archive)


def _pause_image() -> Image:
    """Kubernetes' pause program (:mod:`devcluster.nodebuild`) alone in an image: the pod sandbox."""
    from .nodebuild import ensure_node_binaries

    pause = ensure_node_binaries()["pause"]
    tag = _digest([pause.read_bytes()])
    ref = f"docker.io/kubetune/pause:{tag}"
    archive = images_dir() / f"pause-{tag}.tar"
    if not archive.is_file():
        with tempfile.TemporaryDirectory(dir=images_dir()) as tmp:
            shutil.copy(pause, Path(tmp) / "pause")
            (Path(tmp) / "Containerfile").write_text(
                'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
            )
            _buildah("bud", "--isolation", "chroot", "-t", ref, str(tmp))
        _save(ref, "pause", archive)
    return Image("pause", ref, archive)


def _prune(target: str, keep: Path, newest: int = 2) -> None:
    """Delete all but the ``newest`` archives of ``target`` (``keep`` always stays) and their buildah images."""
    archives = sorted(images_dir().glob(f"{target}-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [a for a in archives[newest:] if a != keep]:
        old.unlink(missing_ok=True)
        tag = old.stem.rsplit("-", 1)[1]  # names hold dashes (trial-python), tags do not
        subprocess.run(_buildah_argv("rmi", f"docker.io/kubetune/{target}:{tag}"), capture_output=True)


def load_images(images: dict[str, Image], ctr: Path, address: Path) -> None:
    """Import each image archive into containerd's ``k8s.io`` namespace, skipping images it has."""
    listed = subprocess.run(
        [str(ctr), "--address", str(address), "-n", "k8s.io", "images", "ls", "-q"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for image in images.values():
        if image.ref in listed:
            continue
        _run([str(ctr), "--address", str(address), "-n", "k8s.io", "images", "import", str(image.archive)])


def main() -> int:
    """Build every image and print its reference and archive size."""
    for image in build_images().values():
        print(f"{image.ref}\t{image.archive.stat().st_size / 2**20:.1f} MiB\t{image.archive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
