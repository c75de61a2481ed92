"""Small trainables the integration tests run in trial pods (imported by the
runtime as ``tests.integration.trainables:<Name>``; the process kubelet's
``PYTHONPATH`` holds the repository root, standing for the trial image)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import kubetune
from kubetune.env import COLLECTOR_RESULTS_PATH


class Counter(kubetune.Trainable):
    """``score`` grows by ``config["x"]`` each step; ``sleep`` seconds per step.

    ``fail_at``: raise in that iteration on the first attempt only (a crash to retry);
    ``always_fail``: raise in every step (a trial that exhausts its retries).
    """

    def setup(self, config):
        self.total = 0.0

    def step(self):
        time.sleep(self.config.get("sleep", 0))
        if self.config.get("always_fail"):
            raise ValueError("this trainable always fails")
        if self.config.get("fail_at") == self.iteration + 1 and os.environ.get("KUBETUNE_ATTEMPT") == "0":
            raise RuntimeError(f"injected failure at iteration {self.iteration + 1}")
        self.total += self.config["x"]
        return {"score": self.total}

    def save_checkpoint(self, checkpoint_dir):
        Path(checkpoint_dir, "state.json").write_text(json.dumps({"total": self.total}))
        return checkpoint_dir

    def load_checkpoint(self, checkpoint_dir):
        self.total = json.loads(Path(checkpoint_dir, "state.json").read_text())["total"]

    @staticmethod
    def worker(config):
        """A worker pod of the trial's gang (``resourcesPerTrial.workers``): idles, as a rollout worker waiting
        for work, until the operator deletes it when the head's attempt ends."""
        time.sleep(3600)


class TwoObjectives(kubetune.Trainable):
    """Two objectives at odds, the same at every step: ``accuracy`` (``config["x"]``, higher is better) and
    ``cost`` (``x**2 + y``, lower is better), so which trials are on the Pareto front follows from the configs."""

    def step(self):
        x, y = self.config["x"], self.config["y"]
        return {"accuracy": x, "cost": x * x + y}

    def save_checkpoint(self, checkpoint_dir):
        Path(checkpoint_dir, "state.json").write_text(json.dumps({"iteration": self.iteration}))
        return checkpoint_dir

    def load_checkpoint(self, checkpoint_dir):
        pass


class Poisoner(Counter):
    """:class:`Counter` whose first step does what any code in a trial pod can (issue 22.1): post, with the
    attempt's own collector token, the batch ``{"score": 2.0, "training_iteration": Infinity}``; every result
    carries the collector's HTTP status for it as ``poison_status``."""

    def setup(self, config):
        super().setup(config)
        self.poison_status = None

    def step(self):
        if self.poison_status is None:
            env = os.environ
            body = (
                f'{{"namespace": "{env["KUBETUNE_NAMESPACE"]}", "experiment": "{env["KUBETUNE_EXPERIMENT"]}", '
                f'"trial": "{env["KUBETUNE_TRIAL"]}", "attempt": {env["KUBETUNE_ATTEMPT"]}, '
                '"results": [{"score": 2.0, "training_iteration": Infinity}]}'
            )
            request = urllib.request.Request(
                env["KUBETUNE_COLLECTOR_URL"].rstrip("/") + COLLECTOR_RESULTS_PATH,
                data=body.encode(),
                headers={"Authorization": f"Bearer {env['KUBETUNE_TOKEN']}", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    self.poison_status = reply.status
            except urllib.error.HTTPError as exc:
                self.poison_status = exc.code
        return {**super().step(), "poison_status": self.poison_status}
