"""Fixtures shared by the tests and the benchmarks: an Experiment object as the API server hands it to the
operator, ConfigMaps in memory with the API server's rules, polling until a condition holds, and PB2's
population data.

Imported by ``tests/unit`` (the controller, journal, restart and scheduler tests), ``tests/integration`` and
``tests/realnode`` (:func:`wait_for`), and ``bench/`` (which imports nothing from ``tests/``). Nothing here
starts a cluster.
"""

from __future__ import annotations

import copy
import os
import random
import time


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
