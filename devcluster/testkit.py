"""Fixtures shared by the tests and the benchmarks: an Experiment object as the API server hands it to the
operator, ConfigMaps in memory with the API server's rules, polling until a condition holds, PB2's
population data, a real MLflow tracking server (:func:`tracking_server`) and the records of W&B's offline runs
(:func:`wandb_records`).

Imported by ``tests/unit`` (the controller, journal, restart and scheduler tests), ``tests/integration`` and
``tests/realnode`` (:func:`wait_for`), and ``bench/`` (which imports nothing from ``tests/``). Nothing here
starts a cluster.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator


def experiment_object(
    name: str = "exp", uid: str = "exp-uid", *, namespace: str = "ns", generation: int = 1, **spec
) -> dict:
    """An Experiment as the operator reads it from the API server, for driving the controller without a cluster.

    Args:
        name: ``metadata.name``.
        uid: ``metadata.uid``.
        namespace: ``metadata.namespace``.
        generation: ``metadata.generation``.
        **spec: the spec's fields, as the CRD spells them (``config=...``, ``numSamples=...``), in order after
            ``trainable`` (default ``{"entrypoint": "m:T"}``; a ``trainable`` given replaces it in place).

    Returns:
        A new dict: ``apiVersion``, ``kind``, ``metadata`` and ``spec``.
    """
    return {
        "apiVersion": "kubetune.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation},
        "spec": {"trainable": {"entrypoint": "m:T"}, **spec},
    }


class ConfigMaps:
    """One namespace's ConfigMaps by name, in memory, with the API server's create/patch/delete rules.

    For the unit tests of the journal and of controller restarts, and the journal and collector benchmarks
    (the integration tests use the real API server through ``kubetune_operator.kube``). ``fail`` makes the
    next N writes raise, as a failing API server.
    """

    def __init__(self):
        self.items: dict[str, dict] = {}
        self.writes = 0
        self.fail = 0

    async def write(self, namespace, write) -> None:
        """Carry out a :class:`kubetune_operator.journal.Write` as ``Kube.write_journal`` does."""
        if self.fail:
            self.fail -= 1
            raise RuntimeError("injected API failure")
        self.writes += 1
        for manifest in write.creates:
            name = manifest["metadata"]["name"]
            if name in self.items:
                self.items[name]["data"].update(manifest["data"])  # 409: merge the data in
            else:
                self.items[name] = copy.deepcopy(manifest)
        for name, data in write.patches:
            if name not in self.items:
                raise RuntimeError(f"404: ConfigMap {name} not found")
            self.items[name]["data"].update(data)
        for name in write.deletes:
            self.items.pop(name, None)

    def list(self) -> list[dict]:
        """Every ConfigMap, as the API server lists them."""
        return copy.deepcopy(list(self.items.values()))

    def size(self) -> int:
        """Bytes of data held, over every ConfigMap."""
        return sum(len(k) + len(v) for cm in self.items.values() for k, v in cm["data"].items())


def wait_for(fn, timeout=120, interval=0.25, what="condition"):
    """Poll ``fn`` until it returns something truthy and return that; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def population_rows(seed: int, count: int) -> list[list]:
    """PB2 data of 8 trials, perturbed every 4 iterations: reward grows with lr, noise with m.

    The data ``tests/unit/test_schedulers_pb2.py`` compares with Ray's explore step on; ``bench/bench_pb2.py``
    sends this function's source to Ray's interpreter, so it uses nothing but :mod:`random`.
    """
    rnd = random.Random(seed)
    configs = {f"t{i}": [rnd.uniform(1e-4, 0.1), rnd.uniform(0, 1)] for i in range(8)}
    reward, rows, iteration = dict.fromkeys(configs, 0.0), [], 0
    while len(rows) < count:
        iteration += 4
        for trial, (lr, m) in configs.items():
            reward[trial] += lr * 10 + rnd.gauss(0, 0.05) * m
            rows.append([trial, float(iteration), [lr, m], reward[trial]])
    return rows


def outside_a_pod(argv: list[str]) -> list[str]:
    """``argv`` run as on a user's machine, outside any pod: the process node's pods mount their service-account
    folders on this host, where Kubeflow's SDKs take ``/var/run/secrets/kubernetes.io`` for being in a pod and read
    its namespace file; a private mount namespace with an empty ``/var/run/secrets`` hides them (unchanged when the
    folder is absent)."""
    if not os.path.isdir("/var/run/secrets"):
        return argv
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    return [*unshare, "sh", "-c", 'mount -t tmpfs tmpfs /var/run/secrets && exec "$@"', "sh", *argv]


#: Runs the command of its arguments and, on SIGTERM, kills its whole process group: with
#: :func:`_terminated_with_this_process`, a test run that is killed leaves no server behind.
GROUP_LEADER = (
    "import os, signal, subprocess, sys; "
    "signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL)); "
    "sys.exit(subprocess.call(sys.argv[1:]))"
)


def _terminated_with_this_process() -> None:  # in the child, between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def tracking_server(folder: Path) -> Iterator[str]:
    """``mlflow server`` (the package index's ``mlflow``) on a free port of 127.0.0.1, its SQLite store and its
    artifacts in ``folder``, until the block ends; yields its URL.

    Raises:
        AssertionError: it did not answer ``/health`` within 60 s (with its log's tail).
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(folder / "server.log", "w")
    server = subprocess.Popen(
        [
            *(sys.executable, "-c", GROUP_LEADER),
            *(sys.executable, "-m", "mlflow", "server"),
            *("--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"),
            *("--artifacts-destination", str(folder / "artifacts")),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        ],
        cwd=folder,
        # no job runner (its huey consumers, 15 worker threads in two processes, serve MLflow's GenAI jobs)
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the server and its uvicorn worker are in the leader's process group, ended with it
        preexec_fn=_terminated_with_this_process,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)
        log.close()


def leveldb_log_records(path: Path) -> list[bytes]:
    """The records of a W&B transaction log (``run-<id>.wandb``): LevelDB's log format (32 KiB blocks of chunks, each
    ``crc32c:u32 length:u16 type:u8`` then the bytes; types full 1, first 2, middle 3, last 4) after W&B's 7-byte
    header (``:W&B``, magic ``0xBEE1``, version)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1
    records, parts, offset, block = [], [], 7, 32768
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header is padding
            offset += block - offset % block
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == 0 and length == 0:
            continue
        parts.append(chunk)
        if kind in (1, 4):
            records.append(b"".join(parts))
            parts = []
    return records


def key_of(item) -> str:
    """The key of a W&B config, history or summary item: ``key``, or its ``nested_key`` parts joined with ``/``."""
    return item.key or "/".join(item.nested_key)


def wandb_records(wandb_dir: Path, run_id: str) -> dict[str, list]:
    """The records W&B wrote offline for run ``run_id`` under ``wandb_dir`` (one run folder), by their type (``run``,
    ``history``, ``summary``, ``exit``, ...), parsed with W&B's own protocol buffers."""
    from wandb.proto import wandb_internal_pb2

    (log,) = (wandb_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    by_type: dict[str, list] = {}
    for data in leveldb_log_records(log):
        record = wandb_internal_pb2.Record.FromString(data)
        by_type.setdefault(record.WhichOneof("record_type"), []).append(record)
    assert "run" in by_type, f"{log} ({log.stat().st_size} bytes) holds {sorted(by_type)}"
    return by_type


def run_of(records: dict[str, list]) -> tuple[str, str, str, str]:
    """``(id, name, group, project)`` of the one run record of a run's records (:func:`wandb_records`)."""
    (run,) = [r.run for r in records["run"]]
    return run.run_id, run.display_name, run.run_group, run.project


def config_of(records: dict[str, list]) -> dict:
    """The config of a run's records: its run record's, updated by each config record."""
    items = [item for r in records["run"] for item in r.run.config.update]
    items += [item for r in records.get("config", []) for item in r.config.update]
    return {key_of(item): json.loads(item.value_json) for item in items}


def history_of(records: dict[str, list]) -> list[dict]:
    """Each history row of a run's records, ``{key: value}``."""
    return [{key_of(item): json.loads(item.value_json) for item in r.history.item} for r in records.get("history", [])]
