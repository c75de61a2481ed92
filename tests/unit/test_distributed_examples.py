"""The examples of distributed trainables (examples/distributed) with their ranks as local processes: the
data-parallel model trains the same on 1, 2 and 3 processes joined by JAX's gloo collectives, and the
RLlib-style driver learns from the rollout workers it drives. On the real node they run as gangs of pods
(tests/realnode/test_distributed.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest_runtime import free_port, free_port_block

from kubetune.env import HOSTS, RANK, WORLD_SIZE
from kubetune.resources import resources_per_trial

ROOT = Path(__file__).resolve().parents[2]

RUN_RANK = """
import json, sys
import kubetune
reports = []
kubetune.report = lambda metrics, checkpoint=None: reports.append(metrics)
kubetune.get_checkpoint = lambda: None
from examples.distributed.data_parallel import train
train({"lr": 0.5, "epochs": 4, "batch_size": 64})
print(json.dumps(reports))
"""


def _env(rank: int, size: int, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETUNE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "trainable-runtime"), env.get("PYTHONPATH", "")])
    if size > 1:
        env.update({RANK: str(rank), WORLD_SIZE: str(size), HOSTS: ",".join(["127.0.0.1"] * size)})
        env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(size), JAX_PROCESS_ID=str(rank))
        env["MASTER_PORT"] = str(port)
    return env


def _data_parallel(size: int) -> list[dict]:
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN_RANK], env=_env(rank, size, port), stdout=subprocess.PIPE, text=True
        )
        for rank in range(size)
    ]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    reports = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    assert all(r == reports[0] for r in reports)  # every rank applied the same averaged updates
    return reports[0]


def test_the_data_parallel_model_trains_the_same_on_one_two_and_three_processes():
    one = _data_parallel(1)
    assert [r["world_size"] for r in one] == [1] * 4 and one[-1]["mean_accuracy"] > 0.9
    for size in (2, 3):
        many = _data_parallel(size)
        assert [r["world_size"] for r in many] == [size] * 4
        assert [round(r["mean_accuracy"], 3) for r in many] == [round(r["mean_accuracy"], 3) for r in one]
        assert abs(many[-1]["mean_loss"] - one[-1]["mean_loss"]) < 1e-4


DRIVE = """
import json
from examples.distributed.rollouts import BanditDriver
driver = BanditDriver(config={"num_workers": 2, "episodes_per_worker": 100, "lr": 4.0})
results = [driver.train() for _ in range(20)]
driver.stop()
print(json.dumps([r["episode_reward_mean"] for r in results] + [results[-1]["best_arm_prob"]]))
"""
SERVE = """
from examples.distributed.rollouts import BanditDriver
BanditDriver.worker({})
"""


def test_the_rllib_style_driver_asks_for_extra_cpus_and_learns_from_the_workers_it_drives(tmp_path):
    from examples.distributed.rollouts import BanditDriver

    request = BanditDriver.default_resource_request({"num_workers": 2})
    assert resources_per_trial(request) == {"cpu": "250m", "workers": {"replicas": 2, "cpu": 1}}
    port = free_port_block(3)  # each worker listens on MASTER_PORT + its rank: on one host here, on its own pod there
    workers = [subprocess.Popen([sys.executable, "-c", SERVE], env=_env(rank, 3, port)) for rank in (1, 2)]
    out, err = tmp_path / "driver.out", tmp_path / "driver.err"
    try:
        with out.open("w") as stdout, err.open("w") as stderr:
            driver = subprocess.Popen([sys.executable, "-c", DRIVE], env=_env(0, 3, port), stdout=stdout, stderr=stderr)
        deadline = time.monotonic() + 120
        while driver.poll() is None:  # a worker that dies leaves the driver waiting: fail at once, not at 120 s
            failed = [w.returncode for w in workers if w.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                driver.kill()
                driver.wait()
                raise AssertionError(f"workers exited {failed}; the driver's stderr: {err.read_text()}")
            time.sleep(0.2)
        assert driver.returncode == 0, err.read_text()
        for worker in workers:
            assert worker.wait(timeout=30) == 0  # the driver's stop() hung up: each worker returned
    finally:
        for worker in workers:
            worker.kill()
    *rewards, best_arm = json.loads(out.read_text().strip().splitlines()[-1])
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.5  # it learned from the workers' episodes
    assert best_arm > 0.5, (rewards, best_arm)
