"""The process kubelet's HTTPS endpoint for container logs: what ``kubectl logs`` reaches.

The API server serves ``pods/<name>/log`` by calling the kubelet of the pod's node at
``https://<node InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/<ns>/<pod>/<container>``
with its kubelet client certificate. :class:`LogServer` answers that from the log files the
process kubelet writes (``<workdir>/pods/<ns>_<pod>/<container>.log``), honouring ``follow``,
``tailLines`` and ``limitBytes``; a followed log ends once the container has exited. It serves TLS
with a certificate of the cluster's CA and accepts only clients with one (the API server's).
Started by :mod:`devcluster.kubelet`, which puts its port in the Node objects.
"""

from __future__ import annotations

import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, urlparse

#: How often a followed log looks for new bytes, in seconds.
FOLLOW_POLL_S = 0.2
_PATH = re.compile(r"^/containerLogs/([a-z0-9-]+)/([a-z0-9.-]+)/([a-z0-9-]+)$")


def _tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class LogServer:
    """Serves container logs over TLS on 127.0.0.1.

    Args:
        pods_dir: the kubelet's pod folders.
        running: ``running(namespace, pod, container)``: whether that container may still write.
        pki: the cluster's PKI folder (``ca.crt``, ``kubelet.crt``, ``kubelet.key``).
        port: 0 for a free one; read :attr:`port` after :meth:`start`.
    """

    def __init__(self, pods_dir: Path, running: Callable[[str, str, str], bool], pki: Path, port: int = 0):
        self.pods_dir, self.running = pods_dir, running
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pki / "kubelet.crt"), str(pki / "kubelet.key"))
        context.load_verify_locations(str(pki / "ca.crt"))
        context.verify_mode = ssl.CERT_REQUIRED
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]

    def start(self) -> None:
        """Serve on a daemon thread."""
        threading.Thread(target=self.server.serve_forever, name="kubelet-logs", daemon=True).start()

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 - the kubelet's own log is enough
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                url = urlparse(self.path)
                match = _PATH.match(url.path)
                if not match:
                    return self.send_error(404, "not a containerLogs path")
                namespace, pod, container = match.groups()
                path = server.pods_dir / f"{namespace}_{pod}" / f"{container}.log"
                if not path.exists():
                    return self.send_error(404, f"no log for container {container} of pod {namespace}/{pod}")
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                full = path.read_bytes()
                data = _tail(full, int(query["tailLines"])) if "tailLines" in query else full
                limit = int(query["limitBytes"]) if "limitBytes" in query else None
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.end_headers()  # HTTP/1.0 without a length: the body ends when the connection closes
                sent = self._send(data if limit is None else data[:limit])
                offset = len(full)
                while query.get("follow") == "true" and (limit is None or sent < limit):
                    alive = server.running(namespace, pod, container)  # before reading: no byte is missed
                    with open(path, "rb") as f:
                        f.seek(offset)
                        chunk = f.read()
                    offset += len(chunk)
                    if chunk:
                        sent += self._send(chunk if limit is None else chunk[: limit - sent])
                    elif not alive:
                        break
                    else:
                        time.sleep(FOLLOW_POLL_S)

            def _send(self, data: bytes) -> int:
                if data:
                    self.wfile.write(data)
                    self.wfile.flush()
                return len(data)

        return Handler
