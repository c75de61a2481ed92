"""An RLlib-style trainable that drives rollout workers of its own: ``examples.distributed.rollouts:BanditDriver``.

As RLlib's ``Trainer.default_resource_request`` did, the class asks for its workers' CPUs as Ray 0.8's
``extra_cpu`` (``Resources(cpu, gpu, extra_cpu=num_workers * cpus_per_worker)``): kubetune makes them worker pods
of the trial's gang (one per extra CPU). Each worker pod runs :meth:`BanditDriver.worker`, a small server (on
``MASTER_PORT`` + its rank) that
plays episodes of a 10-armed Gaussian bandit under the policy it is sent; the trainable (the head) sends its
softmax policy to every worker each step, pools their episodes and takes a policy-gradient step (REINFORCE
with a baseline), reporting the mean episode reward. The workers are found at ``tune.get_context().get_hosts()``.

Run by the trial pods of ``tests/realnode/test_distributed.py`` (through ``tune.run``) and by the unit tests,
which run the workers as local processes.
"""

from __future__ import annotations

import json
import os
import socket
import time

import numpy as np

import kubetune as tune
from kubetune.resources import Resources

#: The arms' mean rewards (-1 to 1, shuffled).
ARM_MEANS = np.linspace(-1.0, 1.0, 10)[[3, 1, 4, 0, 5, 9, 2, 8, 6, 7]]
#: The arm with the highest mean.
BEST_ARM = int(np.argmax(ARM_MEANS))


class BanditDriver(tune.Trainable):
    """Config: ``num_workers`` (default 2), ``episodes_per_worker`` (default 50), ``lr`` (default 0.5)."""

    @classmethod
    def default_resource_request(cls, config: dict) -> Resources:
        return Resources(cpu=0.25, gpu=0, extra_cpu=config.get("num_workers", 2))

    def setup(self, config: dict) -> None:
        self.logits = np.zeros(len(ARM_MEANS))
        port = int(os.environ.get("MASTER_PORT", 29500))
        hosts = tune.get_context().get_hosts()
        deadline = time.monotonic() + 180
        self.workers = [_connect(host, port + rank, deadline) for rank, host in enumerate(hosts) if rank]
        self.readers = [w.makefile("r") for w in self.workers]

    def step(self) -> dict:
        request = {"logits": self.logits.tolist(), "episodes": int(self.config.get("episodes_per_worker", 50))}
        for worker in self.workers:
            worker.sendall(json.dumps(request).encode() + b"\n")
        arms, rewards = [], []
        for reader in self.readers:
            batch = json.loads(reader.readline())
            arms += batch["arms"]
            rewards += batch["rewards"]
        arms, rewards = np.array(arms), np.array(rewards)
        probs = _softmax(self.logits)
        advantage = rewards - rewards.mean()
        grad = np.zeros_like(self.logits)
        for arm, adv in zip(arms, advantage):
            grad += adv * (np.eye(len(probs))[arm] - probs)
        self.logits += self.config.get("lr", 0.5) * grad / len(arms)
        return {
            "episode_reward_mean": float(rewards.mean()),
            "episodes_this_iter": len(arms),
            "best_arm_prob": float(_softmax(self.logits)[BEST_ARM]),
        }

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        return {"logits": self.logits.tolist()}

    def load_checkpoint(self, checkpoint: dict) -> None:
        self.logits = np.array(checkpoint["logits"])

    def cleanup(self) -> None:
        for worker in getattr(self, "workers", ()):
            worker.close()

    @staticmethod
    def worker(config: dict) -> None:
        """A rollout worker: answers each policy the driver sends with that many episodes, until it hangs up."""
        rank = tune.get_context().get_world_rank()
        rng = np.random.default_rng(rank)
        server = socket.create_server(("0.0.0.0", int(os.environ.get("MASTER_PORT", 29500)) + rank))
        connection, _ = server.accept()
        with connection, connection.makefile("r") as requests:
            for line in requests:
                request = json.loads(line)
                arms = rng.choice(len(ARM_MEANS), size=request["episodes"], p=_softmax(np.array(request["logits"])))
                rewards = rng.normal(ARM_MEANS[arms], 1.0)
                reply = {"arms": arms.tolist(), "rewards": rewards.tolist()}
                connection.sendall(json.dumps(reply).encode() + b"\n")


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max())
    return exp / exp.sum()


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    while True:
        try:
            return socket.create_connection((host, port), timeout=60)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
