"""Ray's path ``ray.tune.utils.util``: :func:`validate_save_restore`, the check that a class trainable resumes from
its checkpoint, and :func:`wait_for_gpu`, which blocks a trial until its GPU's memory is free.

Users call them from their scripts (``kubetune.utils.validate_save_restore(MyTrainable)`` before ``tune.run``) and
from their trainables in the trial pod (``tune.utils.wait_for_gpu()`` at the top of a function). Semantics are Ray
2.x's (``ray/tune/utils/util.py``); where Ray uses its actors or GPUtil, kubetune uses processes of its own and
``nvidia-smi`` (``docs/ray-tune.md``, "Integrations").
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import cloudpickle

from kubetune.result import TRAINING_ITERATION

logger = logging.getLogger(__name__)

__all__ = ["validate_save_restore", "wait_for_gpu"]

#: What a validation process runs: unpickle ``(trainable class, config, steps)`` from the file ``argv[1]``, run the
#: steps on one instance, pickle ``("ok", values)`` or ``("error", traceback text)`` into the file ``argv[2]``.
_PROCESS = """
import sys, traceback, cloudpickle
from kubetune.utils.util import _run_steps
with open(sys.argv[1], "rb") as f:
    cls, config, steps = cloudpickle.load(f)
try:
    outcome = ("ok", _run_steps(cls, config, steps))
except BaseException:
    outcome = ("error", traceback.format_exc())
with open(sys.argv[2], "wb") as f:
    cloudpickle.dump(outcome, f)
"""


def _run_steps(cls: type, config: dict | None, steps: list[tuple[str, Any]]) -> list[Any]:
    """Build ``cls(config=config)`` and call its methods ``[(name, argument or None), ...]`` in turn; then stop it.

    Returns:
        What each call returned.
    """
    trainable = cls(config=config)
    try:
        return [getattr(trainable, name)() if arg is None else getattr(trainable, name)(arg) for name, arg in steps]
    finally:
        trainable.stop()


def _in_process(cls: type, config: dict | None, steps: list[tuple[str, Any]], gpus: str, folder: str) -> list[Any]:
    """:func:`_run_steps` in a new Python process that sees the GPUs ``gpus`` (``CUDA_VISIBLE_DEVICES``).

    Raises:
        RuntimeError: the trainable raised there (the message holds its traceback), or the process died.
    """
    job, out = os.path.join(folder, "job.pkl"), os.path.join(folder, "outcome.pkl")
    with open(job, "wb") as f:
        cloudpickle.dump((cls, config, steps), f)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "CUDA_VISIBLE_DEVICES": gpus,
        "TMPDIR": folder,  # the instance's logdir and checkpoints: removed with the folder
    }
    done = subprocess.run([sys.executable, "-c", _PROCESS, job, out], env=env, cwd=folder)
    if not os.path.exists(out):
        raise RuntimeError(f"the process running {cls.__name__} ended with code {done.returncode} and no outcome")
    with open(out, "rb") as f:
        kind, value = cloudpickle.load(f)
    os.remove(out)
    if kind == "error":
        raise RuntimeError(f"{cls.__name__} failed in its process:\n{value}")
    return value


def validate_save_restore(
    trainable_cls: type, config: dict | None = None, num_gpus: int = 0, use_object_store: bool = False
) -> bool:
    """Check that a class trainable resumes correctly from its own checkpoint.

    As Ray's: one instance trains 3 iterations and saves; a second instance, in another process (Ray: another
    actor), restores that checkpoint and trains 2 more, which must be iterations 4 and 5. Each instance runs in a
    new Python process of its own (the class travels by cloudpickle, by value when it is not importable), so state
    kept outside the checkpoint, in the instance, the class or a module, is not carried over.

    Args:
        trainable_cls: a ``kubetune.Trainable`` subclass.
        config: the config both instances get.
        num_gpus: how many of this machine's GPUs each process sees (``CUDA_VISIBLE_DEVICES``: the first
            ``num_gpus`` of :func:`gpu_ids`); 0 hides them all, as Ray does for an actor without GPUs.
        use_object_store: save with ``save_to_object`` and restore with ``restore_from_object`` (Ray 1.x's
            argument; the way PBT and HyperBand move checkpoints in Ray 1.x) instead of ``save``/``restore``.

    Returns:
        True.

    Raises:
        AssertionError: a result lacks ``training_iteration``, or the restored instance does not go on at 4 and 5.
        ValueError: ``num_gpus`` is more than this machine has (Ray would wait for them forever).
        RuntimeError: the trainable raised (the message holds its traceback).
    """
    gpus = ""
    if num_gpus:
        ids = gpu_ids()
        if len(ids) < num_gpus:
            raise ValueError(f"validate_save_restore(num_gpus={num_gpus}): this machine has {len(ids)} GPU(s)")
        gpus = ",".join(str(i) for i in ids[:num_gpus])
    save, restore = ("save_to_object", "restore_from_object") if use_object_store else ("save", "restore")
    folder = tempfile.mkdtemp(prefix="validate_save_restore_")
    try:
        *_, third, saved = _in_process(trainable_cls, config, [("train", None)] * 3 + [(save, None)], gpus, folder)
        assert third.get(TRAINING_ITERATION), f"{trainable_cls.__name__}'s results have no `training_iteration`"
        _, fourth, fifth = _in_process(
            trainable_cls, config, [(restore, saved), ("train", None), ("train", None)], gpus, folder
        )
        assert fourth[TRAINING_ITERATION] == 4, f"restored, it trained iteration {fourth[TRAINING_ITERATION]}, not 4"
        assert fifth[TRAINING_ITERATION] == 5, f"restored, it trained iteration {fifth[TRAINING_ITERATION]}, not 5"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return True


def gpu_ids() -> list[int | str]:
    """This trial's GPUs, as Ray's ``ray.get_gpu_ids()`` gives an actor's: ``CUDA_VISIBLE_DEVICES`` when set
    (ordinals as ints, UUIDs as strings), else every GPU ``nvidia-smi`` lists (a pod sees only the GPUs it was
    given); ``[]`` without ``nvidia-smi``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(v) if v.isdigit() else v for v in (v.strip() for v in visible.split(",")) if v]
    return [gpu["index"] for gpu in _gpus()]


def _gpus() -> list[dict[str, Any]]:
    """Every GPU ``nvidia-smi`` lists: ``{"index": int, "uuid": str, "memory_util": used / total}``; ``[]`` without
    ``nvidia-smi`` or when it fails (as GPUtil, which Ray reads, returns no GPUs then)."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return []
    query = ["--query-gpu=index,uuid,memory.used,memory.total", "--format=csv,noheader,nounits"]
    try:
        text = subprocess.run([binary, *query], capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        try:  # "[N/A]" (a MIG device's memory, say): that GPU is left out
            gpus.append({"index": int(parts[0]), "uuid": parts[1], "memory_util": float(parts[2]) / float(parts[3])})
        except (ValueError, IndexError, ZeroDivisionError):
            continue
    return gpus


def wait_for_gpu(
    gpu_id: int | str | None = None,
    target_util: float = 0.01,
    retry: int = 20,
    delay_s: int = 5,
    gpu_memory_limit: float | None = None,
) -> bool:
    """Block until a GPU's memory is free: its used memory / total memory at most ``target_util``.

    Ray's semantics with ``nvidia-smi`` in place of GPUtil (GPUtil reads ``nvidia-smi`` too): the GPU is checked
    up to ``retry`` times, ``delay_s`` seconds apart.

    Args:
        gpu_id: a GPU ordinal (an int, or a string of digits) or UUID (``"GPU-04546190-..."``); None: the first of
            the trial's GPUs (:func:`gpu_ids`).
        target_util: the memory utilisation, a fraction in [0, 1], at or below which the GPU counts as free.
        retry: how many times to check.
        delay_s: seconds to wait after a check that found the GPU busy.
        gpu_memory_limit: deprecated in Ray; anything but None raises.

    Returns:
        True, once the GPU is free.

    Raises:
        ValueError: ``gpu_memory_limit`` is given; ``gpu_id`` is neither an int nor a string, or is not a GPU
            ``nvidia-smi`` lists.
        RuntimeError: ``gpu_id`` is None and the trial has no GPU (no ``nvidia-smi``, or none listed: ask for
            ``resources_per_trial={"gpu": 1}``); or the GPU was still busy after ``retry`` checks.
    """
    if gpu_memory_limit:
        raise ValueError("wait_for_gpu: gpu_memory_limit is gone (deprecated in Ray); pass target_util instead")
    if gpu_id is None:
        ids = gpu_ids()
        if not ids:
            raise RuntimeError(
                "wait_for_gpu found no GPU for this trial (CUDA_VISIBLE_DEVICES unset and nvidia-smi lists none): "
                'did you ask for one with resources_per_trial={"gpu": 1}?'
            )
        gpu_id = ids[0]
    key = "index"
    if isinstance(gpu_id, str):
        if gpu_id.isdigit():
            gpu_id = int(gpu_id)
        else:
            key = "uuid"
    elif not isinstance(gpu_id, int):
        raise ValueError(f"wait_for_gpu: gpu_id must be an int or a str, got {type(gpu_id).__name__}")
    known = {gpu[key] for gpu in _gpus()}
    if gpu_id not in known:
        raise ValueError(
            f"wait_for_gpu: no GPU {gpu_id!r} here (nvidia-smi lists {sorted(map(str, known))}); give an ordinal "
            "(0, '0') or a UUID ('GPU-...')"
        )
    for _ in range(int(retry)):
        util = next(gpu["memory_util"] for gpu in _gpus() if gpu[key] == gpu_id)
        if util <= target_util:
            return True
        logger.info("GPU %s: memory %.3f used, waiting for %s", gpu_id, util, target_util)
        time.sleep(delay_s)
    raise RuntimeError(f"wait_for_gpu: GPU {gpu_id}'s memory was still over {target_util} used after {retry} checks")
