"""Real S3 endpoints on loopback for the storage, checkpoint and runtime tests (imported explicitly).

* :func:`moto_endpoint` — moto's ``ThreadedMotoServer`` on 127.0.0.1, one per test session.
* :class:`RestartableMotoServer` — the same moto application on a werkzeug server that can go down
  and come back on the SAME port with the same buckets (moto keeps its state in this process).
  ``ThreadedMotoServer.stop()`` cannot simulate an outage: it leaves the listening socket bound and
  keeps serving open keep-alive connections, so clients would see neither a refused connection nor a
  reset. :meth:`RestartableMotoServer.stop` closes the listener and every open connection.
"""

from __future__ import annotations

import socket
import threading
import uuid

import boto3
import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import ThreadedWSGIServer

#: Environment for anything (this process or a runtime subprocess) that talks to the moto endpoint.
AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def s3_client(endpoint: str):
    """A plain boto3 client on ``endpoint`` (test setup and checks, not the code under test)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def new_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name (moto's state is shared by the whole session) and return it."""
    name = f"kt-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def moto_endpoint():
    """URL of a moto S3 server on 127.0.0.1 (session-wide)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(monkeypatch):
    """Test credentials in this process's environment, for boto3's default chain."""
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "KUBETUNE_STORAGE_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)


class _TrackingServer(ThreadedWSGIServer):
    """werkzeug's threaded server that remembers its client sockets so they can be cut."""

    def __init__(self, host: str, port: int):
        super().__init__(host, port, DomainDispatcherApplication(create_backend_app), handler=MotoRequestHandler)
        self.clients: set[socket.socket] = set()
        self.clients_lock = threading.Lock()

    def get_request(self):
        conn, addr = super().get_request()
        with self.clients_lock:
            self.clients.add(conn)
        return conn, addr


class RestartableMotoServer:
    """moto's S3 on 127.0.0.1 that can be stopped (outage) and started again on the same port."""

    def __init__(self):
        self.port = 0
        self._server: _TrackingServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._server = _TrackingServer("127.0.0.1", self.port)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the listener and every open connection: new connections are refused, open ones reset."""
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._server.clients_lock:
            for conn in self._server.clients:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
        self._thread.join()
        self._server = None
