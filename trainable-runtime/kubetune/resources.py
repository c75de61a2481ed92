"""Ray's forms of a trial's resources, mapped onto the Experiment's ``spec.resourcesPerTrial``.

Owns :class:`PlacementGroupFactory` (Ray 1.x/2.x, ``tune.PlacementGroupFactory``), :class:`Resources` (Ray 0.8's
``ray.tune.resources.Resources``, what RLlib's ``Trainer.default_resource_request`` returned) and
:func:`resources_per_trial`, which ``tune.run`` / ``Tuner`` (``kubetune.sdk.tuner``) call on ``resources_per_trial``,
on ``tune.with_resources``'s value and on ``Trainable.default_resource_request``'s answer.

A trial is one pod, or a gang: the head pod (rank 0, which runs the trainable) and identical worker pods
(``resourcesPerTrial.workers``, docs/ray-tune.md "Distributed trainables"):

* a ``PlacementGroupFactory``'s first bundle is the head, every other bundle a worker; the other bundles must
  be identical (one pod shape per group) and hold only ``CPU``, ``GPU`` and ``memory`` (bytes);
* Ray 0.8's ``extra_cpu``/``extra_gpu``/``extra_memory`` are the workers' total: one worker per extra GPU
  when there are extra GPUs (each with its share of the extra CPUs and memory), else one per extra CPU.

A shape that cannot map raises ``ValueError`` saying why.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

__all__ = ["PlacementGroupFactory", "Resources", "resources_per_trial"]

_KEYS = ("cpu", "gpu", "memory")
_EXTRA = ("extra_cpu", "extra_gpu", "extra_memory")


class PlacementGroupFactory:
    """Ray's placement group of one trial: bundles of resources, the first for the trainable itself.

    Args:
        bundles: ``[{"CPU": 1, "GPU": 1}, {"CPU": 2, "GPU": 1}, ...]``; ``memory`` in bytes.
        strategy: Ray's placement strategy (``PACK``, ``SPREAD``, ``STRICT_PACK``, ``STRICT_SPREAD``); kept for
            the porting table's sake: pods go where the Kubernetes scheduler puts them.
        args, kwargs: Ray's further placement group options, accepted and unused.

    Raises:
        ValueError: no bundles, or a bundle that is not a dict of non-negative numbers.
    """

    def __init__(self, bundles: list[dict], strategy: str = "PACK", *args: Any, **kwargs: Any):
        if not bundles or not all(isinstance(b, dict) for b in bundles):
            raise ValueError(f"PlacementGroupFactory needs a list of bundles (dicts), got {bundles!r}")
        for bundle in bundles:
            for key, value in bundle.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ValueError(f"PlacementGroupFactory bundle {bundle!r}: {key} must be a number >= 0")
        self.bundles = [dict(b) for b in bundles]
        self.strategy = strategy

    @property
    def head_bundle_is_empty(self) -> bool:
        """Whether the first bundle asks for nothing (Ray's trainable that only drives its workers)."""
        return not any(self.bundles[0].values())

    @property
    def required_resources(self) -> dict:
        """The sum of every bundle, by resource (Ray's property)."""
        total: dict = {}
        for bundle in self.bundles:
            for key, value in bundle.items():
                total[key] = total.get(key, 0) + value
        return total

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroupFactory) and (self.bundles, self.strategy) == (
            other.bundles,
            other.strategy,
        )

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self.bundles!r}, strategy={self.strategy!r})"


class Resources(namedtuple("Resources", ["cpu", "gpu", "memory", "extra_cpu", "extra_gpu", "extra_memory"])):
    """Ray 0.8's ``Resources(cpu, gpu, memory=0, extra_cpu=0, extra_gpu=0, extra_memory=0)``: the trainable's own
    share and the ``extra_*`` its workers need in all (memory in bytes)."""

    __slots__ = ()

    def __new__(
        cls,
        cpu: float,
        gpu: float,
        memory: float = 0,
        extra_cpu: float = 0,
        extra_gpu: float = 0,
        extra_memory: float = 0,
        **_: Any,
    ):
        return super().__new__(cls, cpu, gpu, memory, extra_cpu, extra_gpu, extra_memory)


def resources_per_trial(value: Any) -> dict:
    """``spec.resourcesPerTrial`` for one of Ray's forms: a dict (keys in any case, with Ray 0.8's ``extra_*``),
    a :class:`Resources` or a :class:`PlacementGroupFactory`; ``{}`` for None.

    Returns:
        ``{"cpu"?, "gpu"?, "memory"?, "workers"?: {"replicas", "cpu", "gpu"?, "memory"?}}``; memory a byte
        count as a string, or the Kubernetes quantity given.

    Raises:
        ValueError: a key other than cpu, gpu, memory and the ``extra_*``; a fractional GPU count; worker
            bundles that differ; extra resources that do not split into whole workers.
    """
    if value is None:
        return {}
    if isinstance(value, PlacementGroupFactory):
        return _from_bundles(value.bundles)
    if isinstance(value, Resources):
        value = value._asdict()
    if not isinstance(value, dict):
        raise ValueError(
            f"resources must be a dict, a PlacementGroupFactory or a Resources, got {type(value).__name__}"
        )
    lowered = {key.lower(): v for key, v in value.items()}
    unknown = sorted(k for k in value if k.lower() not in _KEYS + _EXTRA)
    if unknown:
        raise ValueError(
            f"resources_per_trial: {', '.join(map(repr, unknown))} not supported (cpu, gpu, memory and Ray 0.8's "
            "extra_cpu, extra_gpu, extra_memory are; other extended resources go in template)"
        )
    out = _pod({k: lowered[k] for k in _KEYS if lowered.get(k) is not None}, "resources_per_trial")
    extra = {k[len("extra_") :]: lowered.get(k) or 0 for k in _EXTRA}
    if any(extra.values()):
        out["workers"] = _split_extra(extra)
    return out


def _from_bundles(bundles: list[dict]) -> dict:
    def lowered(bundle: dict) -> dict:
        unknown = sorted(k for k in bundle if k.lower() not in _KEYS)
        if unknown:
            raise ValueError(
                f"PlacementGroupFactory bundle {bundle!r}: {', '.join(unknown)} not supported (CPU, GPU and memory "
                "are; other extended resources go in template)"
            )
        return {k.lower(): v for k, v in bundle.items() if v}

    head, workers = lowered(bundles[0]), [lowered(b) for b in bundles[1:]]
    out = _pod(head, "the PlacementGroupFactory's first bundle")
    if "cpu" not in out:
        out["cpu"] = 0  # an empty head bundle: a trainable that only drives its workers asks for nothing
    if workers:
        if any(w != workers[0] for w in workers):
            raise ValueError(
                "PlacementGroupFactory: the bundles after the first become identical worker pods, and these "
                f"differ ({workers}); kubetune runs one worker shape per trial"
            )
        out["workers"] = {"replicas": len(workers), **_pod(workers[0], "a worker bundle")}
        out["workers"].setdefault("cpu", 0)
    return out


def _pod(amounts: dict, what: str) -> dict:
    out: dict = {}
    if amounts.get("cpu") is not None:
        out["cpu"] = _cpu(amounts["cpu"])
    gpu = amounts.get("gpu")
    if gpu:
        if isinstance(gpu, bool) or not float(gpu).is_integer():
            raise ValueError(f"{what}: gpu must be a whole number (a pod gets whole GPUs), got {gpu!r}")
        out["gpu"] = int(gpu)
    memory = amounts.get("memory")
    if memory:
        out["memory"] = str(int(memory)) if isinstance(memory, (int, float)) else memory
    return out


def _cpu(value: Any) -> Any:
    """A CPU count as the CRD takes it: whole numbers as they are, fractions in millicores (``0.5`` -> ``"500m"``)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else f"{round(value * 1000)}m"
    return value


def _split_extra(extra: dict) -> dict:
    """Ray 0.8's ``extra_*`` as identical workers: one per extra GPU, else one per extra CPU."""
    cpu, gpu, memory = extra["cpu"], extra["gpu"], extra["memory"]
    if gpu and not float(gpu).is_integer():
        raise ValueError(f"resources_per_trial: extra_gpu must be a whole number, got {gpu!r}")
    replicas = int(gpu) if gpu else math.ceil(cpu) if cpu else 1
    if not gpu and cpu and not float(cpu).is_integer():
        raise ValueError(
            f"resources_per_trial: extra_cpu={cpu!r} without extra_gpu must be whole: it becomes one worker pod "
            "per CPU; a PlacementGroupFactory says each worker's share exactly"
        )
    worker: dict = {"replicas": replicas, "cpu": _cpu(cpu / replicas) if cpu else 0}
    if gpu:
        worker["gpu"] = 1
    if memory:
        if isinstance(memory, str):
            raise ValueError("resources_per_trial: extra_memory must be a byte count (it is split among the workers)")
        worker["memory"] = str(int(memory) // replicas)
    return worker
