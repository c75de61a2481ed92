"""Runs the kubetune operator (``python -m kubetune_operator``) as a local process
against a :class:`devcluster.Cluster`, as the integration tests and the demo need it.

Called by ``tests/integration/conftest.py``, the benchmarks and the demo runner. The
collector listens on a free port of the cluster's host address (loopback, where the
process kubelet's trial processes run; the real node's gateway, which its pods reach),
which is also the URL trial pods report to; the collector's key Secret lives in
``OPERATOR_NAMESPACE``, created here if missing.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from kubernetes import client

from . import procs

OPERATOR_NAMESPACE = "kubetune-system"


class OperatorProcess:
    """The real operator as a child process (it dies with its parent).

    Args:
        cluster: the running cluster.
        log: where the operator's output goes.
        settings: extra ``KUBETUNE_OPERATOR_*`` variables.
    """

    def __init__(self, cluster, log: Path, **settings: str):
        self.cluster = cluster
        self.port = procs.free_port()
        self.log = log
        self.env = {
            **os.environ,
            **cluster.env(),
            "KUBETUNE_OPERATOR_COLLECTOR_BIND_HOST": cluster.host,
            "KUBETUNE_OPERATOR_COLLECTOR_BIND_PORT": str(self.port),
            "KUBETUNE_OPERATOR_COLLECTOR_URL": f"http://{cluster.host}:{self.port}",
            "KUBETUNE_OPERATOR_COLLECTOR_KEY_SECRET_NAMESPACE": OPERATOR_NAMESPACE,
            **settings,
        }
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://{self.cluster.host}:{self.port}"

    def start(self) -> None:
        """Start the operator and wait until its collector answers.

        Raises:
            RuntimeError: it exited or did not become ready within 60 s (with its log tail).
        """
        core = client.CoreV1Api(self.cluster.api_client())
        try:
            core.create_namespace({"metadata": {"name": OPERATOR_NAMESPACE}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        self.proc = procs.spawn([sys.executable, "-m", "kubetune_operator"], self.log, env=self.env)
        procs.wait_until(
            lambda: procs.http_ok(f"{self.url}/healthz"), timeout=60, what="operator", proc=self.proc, log=self.log
        )

    def kill(self) -> None:
        """SIGKILL, as a crashed or evicted operator."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s."""
        if self.proc is not None and self.proc.poll() is None:
            procs.stop_pid(self.proc.pid, timeout=15)
