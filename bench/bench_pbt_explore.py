"""Benchmark of PBT's explore step with a user function in the trial pod against the operator-side explore (issue
23.3), side by side in one process.

* ``operator``: today's explore of a domain (``{"uniform": [1e-4, 0.1]}``): the operator's
  :func:`kubetune_operator.schedulers.pbt.explore`, with the new config in the exploit.
* ``in pod``: the same mutation as a function (``lambda: random.uniform(1e-4, 0.1)``): the operator's explore
  leaves the key to the pod; the pod loads the pickled function from storage (``file://`` here; an S3 GET in a
  cluster adds its round trip) and calls it (:func:`kubetune.runtime.pbt_explore.explore_in_pod`), and the
  controller journals the config the pod reports (``ExperimentController.record_results(explored=...)``).

Prints the median seconds per exploit of each, the added seconds and the ratio. The pod's reported config rides
on the batch the runtime sends anyway (its first), so no request is added.

Run: ``.venv/bin/python bench/bench_pbt_explore.py [--rounds 2000]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from devcluster.testkit import experiment_object
from kubetune.runtime.pbt_explore import explore_in_pod
from kubetune.search import parse_space
from kubetune.shipping import dumps
from kubetune.storage import FileStorage
from kubetune_operator.controller import ExperimentController
from kubetune_operator.schedulers.pbt import PodFunction, explore
from kubetune_operator.settings import Settings


def controller(uri: str) -> ExperimentController:
    experiment = experiment_object(
        uid="uid-1234",
        config={"lr": 0.01},
        numSamples=1,
        metric="acc",
        mode="max",
        storage={"uri": "s3://b/p"},
        scheduler={
            "name": "pbt",
            "params": {
                "perturbation_interval": 2,
                "hyperparam_mutations": {"lr": {"kubetune/pickled_function": uri}},
            },
        },
    )
    ctl = ExperimentController(experiment, Settings(), b"k" * 32)
    ctl.restore([])
    return ctl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    folder = tempfile.mkdtemp(prefix="bench-pbt-")
    storage, uri = FileStorage(), f"file://{folder}/lr.pkl"
    storage.put_bytes(uri, dumps(lambda: random.uniform(1e-4, 0.1)))
    config = {"lr": 0.01, "batch": 32, "layers": 4}
    domain = parse_space({"lr": {"uniform": [1e-4, 0.1]}})
    function = {"lr": PodFunction(uri)}
    ctl = controller(uri)
    operator, in_pod = [], []
    for i in range(rounds):  # interleaved, so both see the same machine load
        rng = random.Random(i)
        start = time.perf_counter()
        explore(config, domain, 1.0, [1.2, 0.8], rng)
        operator.append(time.perf_counter() - start)
        rng = random.Random(i)
        start = time.perf_counter()
        pending: list = []
        new, _ = explore(config, function, 1.0, [1.2, 0.8], rng, pending)
        chosen = explore_in_pod(new, {"resample": pending, "customExploreFn": None}, storage)  # in the pod
        # the exploit carried out: the pod's report is awaited
        ctl.decisions.pod_explores["t"] = {"resample": pending, "customExploreFn": None}
        ctl.decisions._apply_pod_explored("t", chosen, 1)  # what the collector's batch journals (``explored`` entry)
        ctl.journal.record(["explored", "t", {"config": chosen, "attempt": 1}])
        in_pod.append(time.perf_counter() - start)
    a, b = statistics.median(operator), statistics.median(in_pod)
    print(f"operator-side explore: {a * 1e6:.1f} us per exploit (median of {rounds})")
    print(f"explore with the user function in the pod: {b * 1e6:.1f} us per exploit")
    print(f"added: {(b - a) * 1e6:.1f} us per exploit ({b - a:.6f} s); ratio in pod / operator: {b / a:.1f}")


if __name__ == "__main__":
    main()
