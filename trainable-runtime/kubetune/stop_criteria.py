"""Stopping criteria: the per-trial ``stop`` thresholds.

Owns the comparison rule, so the in-pod runtime (which applies ``spec.stop`` to every result
before asking the collector) and the operator (which applies it to every result it receives)
agree. Callers: ``kubetune.runtime``, the operator's controller. The experiment's ``goal`` is
:func:`kubetune.resultkeys.goal_reached`.

Rules follow Ray Tune's ``Trial.should_stop`` (2.x): a trial stops once
``result[key] >= value`` for any key of the stop dict, whatever the
experiment's mode; nested results are matched by their flattened ``a/b`` keys;
a key the result does not hold never stops the trial.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from kubetune.resultkeys import flatten, is_number

__all__ = ["should_stop"]


def _number(value: Any) -> bool:
    return is_number(value) and not math.isnan(value)


def should_stop(result: Mapping[str, Any], stop: Mapping[str, Any] | None) -> tuple[bool, str | None]:
    """Whether ``result`` meets a stop criterion of ``stop`` (``spec.stop``).

    Args:
        result: one training result (may be nested).
        stop: thresholds by result key; nested dicts are flattened like the
            result, so ``{"info": {"loss": 1}}`` and ``{"info/loss": 1}`` agree.

    Returns:
        ``(True, key)`` for the first key (in ``stop``'s order) with
        ``result[key] >= threshold``; else ``(False, None)``. Keys missing from the
        result, and values that are not numbers (None, strings, NaN), never stop.
        ``done`` is not consulted here: the Trainable loop handles it.
    """
    if not stop:
        return False, None
    flat = flatten(result)
    for key, threshold in flatten(stop).items():
        value = flat.get(key)
        if _number(value) and _number(threshold) and value >= threshold:
            return True, key
    return False, None
