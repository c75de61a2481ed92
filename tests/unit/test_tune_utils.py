"""Ray's ``ray.tune.utils`` helpers (issue 33): ``validate_save_restore`` passes a trainable that resumes from its
checkpoint and fails one that keeps its state outside it, each instance in a process of its own as Ray's actors;
``wait_for_gpu`` reads ``nvidia-smi`` (here a stand-in script on ``PATH`` that prints what the real one prints for
the query) and raises as Ray's does on a machine without GPUs."""

from __future__ import annotations

import json
import os
import sys

import pytest

import kubetune as tune
from kubetune import Trainable
from kubetune.utils import validate_save_restore, wait_for_gpu
from kubetune.utils.mock_trainable import MyTrainableClass


class CountingTrainable(Trainable):
    """Counts its steps; the count is in its checkpoint."""

    def setup(self, config):
        self.count = config.get("start", 0)

    def step(self):
        self.count += 1
        return {"count": self.count}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "count.json"), "w") as f:
            json.dump(self.count, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "count.json")) as f:
            self.count = json.load(f)


class ClassStateTrainable(CountingTrainable):
    """Keeps what its checkpoint should hold in a class attribute: restoring in the same process works, in another
    (a new trial pod, Ray's other actor) the count is gone."""

    saved = None

    def save_checkpoint(self, checkpoint_dir):
        type(self).saved = self.count

    def load_checkpoint(self, checkpoint_dir):
        self.count = type(self).saved


def test_a_trainable_that_resumes_from_its_checkpoint_passes():
    assert validate_save_restore(CountingTrainable, config={"start": 10}) is True
    assert validate_save_restore(MyTrainableClass, use_object_store=True) is True


def test_a_class_defined_in_a_function_travels_by_value():
    class Local(CountingTrainable):
        pass

    assert validate_save_restore(Local) is True


def test_state_kept_outside_the_checkpoint_fails_although_it_restores_in_one_process(tmp_path):
    same_process = ClassStateTrainable(logdir=str(tmp_path / "a"))
    [same_process.train() for _ in range(3)]
    other = ClassStateTrainable(logdir=str(tmp_path / "b"))
    other.restore(same_process.save())
    assert other.train()["count"] == 4  # in one process the class attribute carries the count

    with pytest.raises(RuntimeError, match=r"ClassStateTrainable failed in its process:(.|\n)*TypeError"):
        validate_save_restore(ClassStateTrainable)


def test_a_trainable_that_restarts_its_iterations_after_a_restore_fails():
    class Forgetful(CountingTrainable):
        def load_checkpoint(self, checkpoint_dir):
            self._iteration = 0  # a restore that loses the counters the checkpoint recorded

    with pytest.raises(AssertionError, match="iteration 1, not 4"):
        validate_save_restore(Forgetful)


def test_more_gpus_than_the_machine_has_are_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ValueError, match="has 1 GPU"):
        validate_save_restore(CountingTrainable, num_gpus=2)


@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
    """A stand-in ``nvidia-smi`` on an otherwise empty ``PATH``. ``set(rows)`` sets the rows it prints for the
    query ``index,uuid,memory.used,memory.total`` (CSV, no header, no units); each list of rows is printed once,
    the last one from then on. Returns ``set``; ``set.calls()`` is how many times it ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "nvidia-smi.json"
    script = bin_dir / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"path = {str(state)!r}\n"
        "state = json.load(open(path))\n"
        "assert sys.argv[1:] == ['--query-gpu=index,uuid,memory.used,memory.total', "
        "'--format=csv,noheader,nounits'], sys.argv\n"
        "print('\\n'.join(state['outputs'][min(state['calls'], len(state['outputs']) - 1)]))\n"
        "state['calls'] += 1\n"
        "json.dump(state, open(path, 'w'))\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def set_outputs(*outputs):
        state.write_text(json.dumps({"outputs": [list(rows) for rows in outputs], "calls": 0}))

    set_outputs.calls = lambda: json.loads(state.read_text())["calls"]
    return set_outputs


GPU0 = "0, GPU-00000000-aaaa-bbbb-cccc-000000000000, {used}, 81559"
GPU1 = "1, GPU-11111111-aaaa-bbbb-cccc-111111111111, {used}, 81559"


def test_without_gpus_wait_for_gpu_raises_as_rays_does(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(RuntimeError, match="no GPU for this trial"):
        wait_for_gpu()
    with pytest.raises(ValueError, match="no GPU 0 here"):
        wait_for_gpu(0)
    with pytest.raises(ValueError, match="gpu_memory_limit"):
        wait_for_gpu(gpu_memory_limit=0.5)
    with pytest.raises(ValueError, match="int or a str, got float"):
        wait_for_gpu(0.0)
    assert tune.utils.wait_for_gpu is wait_for_gpu


def test_wait_for_gpu_waits_until_the_first_gpus_memory_is_free(nvidia_smi):
    busy, free = [GPU0.format(used=40000), GPU1.format(used=0)], [GPU0.format(used=500), GPU1.format(used=0)]
    nvidia_smi(busy, busy, busy, free)  # gpu_ids, the id check, then one nvidia-smi per check
    assert wait_for_gpu(delay_s=0) is True
    assert nvidia_smi.calls() == 4  # busy at the first check, free at the second: 500 / 81559 < 0.01


def test_wait_for_gpu_takes_ordinals_as_strings_and_uuids(nvidia_smi, monkeypatch):
    nvidia_smi([GPU0.format(used=40000), GPU1.format(used=0)])
    assert wait_for_gpu("1", retry=1) is True
    assert wait_for_gpu("GPU-11111111-aaaa-bbbb-cccc-111111111111", retry=1) is True
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the trial's GPU, as Ray's get_gpu_ids() gives it
    assert wait_for_gpu(retry=1) is True
    with pytest.raises(ValueError, match="no GPU 'GPU-2' here"):
        wait_for_gpu("GPU-2")


def test_wait_for_gpu_gives_up_after_retry_checks(nvidia_smi):
    nvidia_smi([GPU0.format(used=40000)])
    with pytest.raises(RuntimeError, match="still over 0.01 used after 3 checks"):
        wait_for_gpu(0, retry=3, delay_s=0)
    assert nvidia_smi.calls() == 4  # the id check and 3 checks
    assert wait_for_gpu(0, target_util=0.5, retry=1) is True  # 40000 / 81559 = 0.49
