"""The searcher interface (Ray Tune's ``Searcher``) and JSON helpers for searcher state.

Owns :class:`Searcher`, the base every search algorithm of
``kubetune_operator.searchers`` builds on, and the strict-JSON encoding of
non-finite floats used by searcher and scheduler state. Callers: the
per-Experiment reconcile loop (``suggest`` while slots are free,
``on_trial_complete`` when a trial ends, ``get_state``/``set_state`` around an
operator restart) and the algorithm modules. Pure Python: no kopf, no
Kubernetes imports.
"""

from __future__ import annotations

import math
from typing import Any

from kubetune.resultkeys import check_mode

__all__ = ["FINISHED", "Searcher", "encode_number", "decode_number"]

#: Returned by :meth:`Searcher.suggest` once the searcher will never suggest again (Ray's ``Searcher.FINISHED``).
FINISHED = "FINISHED"


def encode_number(value: float | int | None) -> Any:
    """A JSON-safe form of ``value``: finite numbers and None as is, NaN/±inf as ``"nan"``/``"inf"``/``"-inf"``.

    Kubernetes' JSON (Go's ``encoding/json``) rejects NaN and Infinity, so state
    that may end up in an object goes through this.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def decode_number(value: Any) -> float | int | None:
    """Inverse of :func:`encode_number`."""
    return float(value) if isinstance(value, str) else value


class Searcher:
    """Suggests configs for new trials and learns from their results (Ray's ``Searcher``).

    Args:
        metric: result key to optimize; searchers that do not learn may ignore it.
        mode: ``"max"`` or ``"min"``.

    Raises:
        ValueError: a bad ``mode``.
    """

    FINISHED = FINISHED
    #: True when the searcher's suggestions are a function of the spec alone (the operator journals nothing).
    stateless = False
    #: True when a "not now" (None) from :meth:`suggest` changes nothing in the searcher: the operator then journals
    #: no such answer (a searcher that waits, e.g. for a rung to end, would add an entry at every reconcile pass).
    quiet_wait = False
    #: How many configs a random-access searcher has (the operator then reads :meth:`variant` ``i`` for trial
    #: ``i`` instead of calling :meth:`suggest`); None for a searcher that suggests.
    total: int | None = None

    def __init__(self, metric: str | None = None, mode: str | None = None):
        check_mode(metric, mode, required=False)
        self.metric = metric
        self.mode = mode

    def suggest(self, trial_id: str) -> dict | None | str:
        """A config for the new trial ``trial_id``, None for "not now", or :data:`FINISHED`."""
        raise NotImplementedError

    def variant(self, index: int) -> tuple[dict, str]:
        """``(config, tag)`` of config ``index`` of a random-access searcher (one with :attr:`total` set).

        Raises:
            NotImplementedError: a searcher that suggests (this default).
        """
        raise NotImplementedError(f"{type(self).__name__} suggests: it has no random-access variants")

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """An intermediate result of ``trial_id`` (default: ignored)."""

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False, early_stopped: bool = False
    ) -> None:
        """``trial_id`` ended with last ``result`` (None if it reported nothing); ``error`` if it failed;
        ``early_stopped`` if it was stopped before it completed (by the scheduler, a stopper or the
        Experiment's end), which Ray's searchers are not told.

        Called once per trial; calls for unknown or already completed trials are ignored.
        """

    def get_state(self) -> dict:
        """Everything needed to resume, as strict JSON (no NaN/Infinity)."""
        raise NotImplementedError

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state` output (possibly from another process)."""
        raise NotImplementedError
