"""Client-side specifications of what the operator runs: schedulers, searchers and stoppers.

Owns :class:`AlgorithmSpec`, the base of the Ray-named classes users build in a script
(``ASHAScheduler(...)`` in :mod:`kubetune.schedulers`, ``OptunaSearch(...)`` in
:mod:`kubetune.search.algorithms`, ``TrialPlateauStopper(...)`` in :mod:`kubetune.stopper`), and
:func:`unsupported`, the error for a Ray Tune name kubetune cannot honour. The algorithms
themselves run in the operator (they must survive its restarts and never run user code there);
these classes only check their arguments' names and serialize to the Experiment's ``scheduler``,
``searchAlgorithm`` and ``stoppers`` fields. The operator validates the values and reports
``Ready=False/InvalidSpec`` for bad ones, which :func:`kubetune.run` raises as ``ValueError``.
Called by :mod:`kubetune.sdk.tuner` when it builds the Experiment.
"""

from __future__ import annotations

from typing import Any


class AlgorithmSpec:
    """An algorithm the operator runs, by its CRD name and Ray's keyword arguments.

    Subclasses set :attr:`name` (the CRD's enum value) and pass their non-default keyword
    arguments to ``__init__``; ``metric`` and ``mode`` are kept apart because the Experiment has
    them once, in ``spec.metric``/``spec.mode``.

    Attributes:
        name: the CRD name, e.g. ``"asha"``.
        metric: the result key the algorithm optimizes, or None (the experiment's).
        mode: ``"min"``, ``"max"`` or None.
        params: the other keyword arguments, JSON values.
    """

    name = ""

    def __init__(self, metric: str | None = None, mode: str | None = None, **params: Any):
        if mode not in (None, "min", "max"):
            raise ValueError(f"{type(self).__name__}: mode must be 'min' or 'max', got {mode!r}")
        self.metric, self.mode = metric, mode
        self.params = {key: value for key, value in params.items() if value is not None}

    def to_spec(self) -> dict:
        """Return the Experiment field's value: ``{"name": ..., "params": {...}}``."""
        return {"name": self.name, "params": dict(self.params)}

    def __repr__(self) -> str:
        args = ", ".join(
            f"{k}={v!r}" for k, v in {"metric": self.metric, "mode": self.mode, **self.params}.items() if v is not None
        )
        return f"{type(self).__name__}({args})"


def unsupported(name: str, why: str, instead: str) -> NotImplementedError:
    """Return the error for the Ray Tune name ``name``: why kubetune cannot honour it, what to use.

    Returns:
        A ``NotImplementedError`` whose message reads
        ``"<name> is not supported by kubetune: <why>; use <instead>"``.
    """
    return NotImplementedError(f"{name} is not supported by kubetune: {why}; use {instead}")


def unsupported_names(module: str, names: dict[str, tuple[str, str]]):
    """Return a module ``__getattr__`` raising :func:`unsupported` for Ray names kubetune lacks.

    Args:
        module: the module's name, for the ``AttributeError`` of other names.
        names: Ray name → ``(why, instead)``.
    """

    def __getattr__(attr: str) -> Any:
        if attr in names:
            raise unsupported(attr, *names[attr])
        raise AttributeError(f"module {module!r} has no attribute {attr!r}")

    return __getattr__
