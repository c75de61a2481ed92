"""moto's S3 server in a separate process, for the benchmarks that time storage (imported by them).

A separate process keeps the endpoint's own work off the benchmark's interpreter, as a real object
store would be. :func:`moto_server` starts it on a free loopback port, waits until it listens and
yields its endpoint URL; the server is killed on exit.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from typing import Iterator


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run ``python -m moto.server`` on 127.0.0.1 and yield ``http://127.0.0.1:<port>``.

    Raises:
        RuntimeError: the server did not listen within 30 s.
    """
    port = _free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        moto.kill()
        moto.wait()
