"""Process plumbing for the local cluster: free ports, starting children that
die with their parent, waiting for readiness, and stopping by PID.

Called by :mod:`devcluster.cluster` (control-plane processes) and
:mod:`devcluster.kubelet` (pod processes).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable

import psutil

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    argv: list[str], log: Path, *, env: dict | None = None, cwd: str | Path | None = None, die_with_parent: bool = True
) -> subprocess.Popen:
    """Start ``argv`` in its own session with stdout and stderr appended to ``log``.

    Args:
        die_with_parent: have the kernel SIGKILL the child if this process dies (``PR_SET_PDEATHSIG``),
            so a killed test run leaves no orphans. ``python -m devcluster up`` turns it off.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch, from the kernel's record: the same for the process's
    whole life), or None when there is no such process. With the PID it tells a process from a later one
    that reuses the PID."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None


def stop_pid(pid: int, *, timeout: float = 10.0, group: bool = False) -> None:
    """SIGTERM ``pid`` (or its process group), wait up to ``timeout`` seconds, then SIGKILL."""
    kill = os.killpg if group else os.kill
    try:
        kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while pid_alive(pid):
        _reap(pid)
        time.sleep(0.05)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
    interval: float = 0.1,
) -> None:
    """Poll ``check`` until it returns True.

    Raises:
        RuntimeError: ``proc`` exited first, or ``timeout`` seconds passed; the message names ``what``
            and quotes the tail of ``log``.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - anything short of success means "not yet"
            pass
        exited = proc is not None and proc.poll() is not None
        if exited or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            why = f"exited with {proc.returncode}" if exited else f"not ready after {timeout:.0f} s"
            raise RuntimeError(f"{what} {why}; log tail:\n{tail}")
        time.sleep(interval)


def http_ok(url: str, *, context: ssl.SSLContext | None = None, expect: bytes | None = None) -> bool:
    """GET ``url``; True on HTTP 200 (and ``expect`` in the body, if given)."""
    with urllib.request.urlopen(url, timeout=2, context=context) as resp:
        body = resp.read()
        return resp.status == 200 and (expect is None or expect in body)
