"""Helpers for the reporter and runtime tests (imported explicitly): a real HTTP collector and a runtime runner.

* :class:`Collector` — an ``http.server`` collector on 127.0.0.1 that speaks the protocol of
  ``kubetune.env`` (records every batch, answers ``{"decision": ...}``); it can start late on a
  port chosen in advance, to play a collector that is down.
* :func:`runtime_env` / :func:`start_runtime` — run ``python -m kubetune.runtime`` as a real
  subprocess with a trial environment written by ``kubetune.env.encode_trial_env``.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from conftest_storage import AWS_TEST_ENV

from kubetune.env import COLLECTOR_RESULTS_PATH, CheckpointPolicy, TrialEnv, encode_trial_config, encode_trial_env

TOKEN = "test-token-not-a-secret"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(n: int) -> int:
    """The first of ``n`` consecutive TCP ports that were all free on every address a moment ago.

    The block lies below the kernel's ephemeral range, so the clients' outgoing connections of a busy machine
    do not take ``port + 1`` between the check and a server binding it (a port from :func:`free_port` has no such
    margin above it).
    """
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for base in random.Random().sample(range(10000, low - n), 200):
        sockets = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                sockets.append(s)
                s.bind(("0.0.0.0", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports below {low}")


class Collector:
    """A results collector on ``127.0.0.1:port``.

    Args:
        port: the port (0: any); the URL is known before :meth:`start`.
        decide: ``decide(batch, batches_so_far) -> decision``; default always ``continue``.
        max_body: bodies larger than this many bytes get 413.
        unavailable: how many requests, first, get 503 (an operator that has not loaded the experiment yet).

    Attributes:
        batches: every accepted request body (parsed), in arrival order.
        bad_auth: how many requests came without the right bearer token (answered 401).
    """

    def __init__(
        self,
        port: int = 0,
        decide: Callable[[dict, list[dict]], str] | None = None,
        max_body: int = 1 << 20,
        unavailable: int = 0,
    ):
        self.port = port or free_port()
        self.unavailable = unavailable
        self.max_body = max_body
        self.too_large = 0
        self.decide = decide or (lambda batch, batches: "continue")
        self.batches: list[dict] = []
        self.bad_auth = 0
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def results(self) -> list[dict]:
        with self.lock:
            return [r for b in self.batches for r in b["results"]]

    def start(self) -> "Collector":
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != COLLECTOR_RESULTS_PATH:
                    return self._reply(404, {"error": "not found"})
                if len(body) > collector.max_body:
                    with collector.lock:
                        collector.too_large += 1
                    return self._reply(413, {"error": "too large"})
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    with collector.lock:
                        collector.bad_auth += 1
                    return self._reply(401, {"error": "bad token"})
                with collector.lock:
                    if collector.unavailable > 0:
                        collector.unavailable -= 1
                        return self._reply(503, {"error": "retry"})
                batch = json.loads(body)
                with collector.lock:
                    collector.batches.append(batch)
                    decision = collector.decide(batch, collector.batches)
                self._reply(200, {"decision": decision})

            def _reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def runtime_env(
    tmp_path,
    trial_dir_uri: str,
    *,
    config: dict,
    endpoint: str | None = None,
    collector: Collector | None = None,
    **fields,
) -> dict[str, str]:
    """The environment of a runtime subprocess for one trial (``fields`` go to ``TrialEnv``)."""
    checkpoint = fields.pop("checkpoint", CheckpointPolicy())
    trial = TrialEnv(
        namespace="ns",
        experiment="exp",
        trial="trial-0",
        attempt=fields.pop("attempt", 0),
        config=config,
        trial_dir_uri=trial_dir_uri,
        checkpoint=checkpoint,
        storage_endpoint=endpoint,
        collector_url=collector.url if collector else None,
        token=TOKEN if collector else None,
        **fields,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBETUNE_", "AWS_"))}
    env.update(AWS_TEST_ENV)
    config_file = tmp_path / "config.json"  # the operator mounts it from the attempt's Secret
    config_file.write_text(encode_trial_config(config))
    env.update(encode_trial_env(trial, str(config_file)))
    env["KUBETUNE_TERMINATION_MESSAGE_PATH"] = str(tmp_path / "termination-log")
    env["KUBETUNE_WORKDIR"] = str(tmp_path / "work")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "modules"), env.get("PYTHONPATH", "")])
    return env


def start_runtime(env: dict[str, str]) -> subprocess.Popen:
    """Start ``python -m kubetune.runtime`` with ``env``; stdout and stderr merged, text."""
    return subprocess.Popen(
        [sys.executable, "-m", "kubetune.runtime"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def run_runtime(env: dict[str, str], timeout_s: float = 60) -> tuple[int, str]:
    """Run the runtime to its end; return ``(exit code, output)``."""
    proc = start_runtime(env)
    output, _ = proc.communicate(timeout=timeout_s)
    return proc.returncode, output


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms until it holds; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
