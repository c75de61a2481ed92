"""Stopping criteria: the per-trial ``stop`` thresholds.

Owns the comparison rule, so the in-pod runtime (which applies ``spec.stop`` to every result
before asking the collector) and the operator (which applies it to every result it receives)
agree. Callers: ``kubetune.runtime``, the operator's controller. The experiment's ``goal`` is
:func:`kubetune.resultkeys.goal_reached`.

Rules follow Ray Tune's ``Trial.should_stop`` (2.x): a trial stops once
``result[key] >= value`` for any key of the stop dict, whatever the
experiment's mode; nested results are matched by their flattened ``a/b`` keys;
a key the result does not hold never stops the trial. As in Python's (and so Ray's)
comparison, a bool is the number 0 or 1 on either side: ``{"done": True}`` stops at a
result with ``done: True``, and ``{"x": True}`` once ``x >= 1``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from kubetune.resultkeys import flatten

__all__ = ["is_threshold", "should_stop"]


def is_threshold(value: Any) -> bool:
    """Whether ``value`` can be a stop threshold, or be compared with one: an int, a float or a bool (Ray
    compares ``result[key] >= value``, where a bool is 0 or 1), not NaN."""
    return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value))


def should_stop(result: Mapping[str, Any], stop: Mapping[str, Any] | None) -> tuple[bool, str | None]:
    """Whether ``result`` meets a stop criterion of ``stop`` (``spec.stop``).

    Args:
        result: one training result (may be nested).
        stop: thresholds by result key; nested dicts are flattened like the
            result, so ``{"info": {"loss": 1}}`` and ``{"info/loss": 1}`` agree.

    Returns:
        ``(True, key)`` for the first key (in ``stop``'s order) with
        ``result[key] >= threshold``; else ``(False, None)``. Keys missing from the
        result, and values that are neither numbers nor bools (None, strings, NaN), never stop.
        ``done`` is not consulted here: the Trainable loop handles it.
    """
    if not stop:
        return False, None
    flat = flatten(result)
    for key, threshold in flatten(stop).items():
        value = flat.get(key)
        if is_threshold(value) and is_threshold(threshold) and value >= threshold:
            return True, key
    return False, None
