"""The plan of Katib's ``hyperband`` searcher: its brackets, their rungs, each rung's size and resource value.

Owns :func:`max_bracket`, :func:`plan` and :class:`Rung`: the numbers of HyperBand's outer and inner loops (Li et
al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization", JMLR 18(185), 2018, Algorithm 1)
as Katib's hyperband suggestion service computes them (``pkg/suggestion/v1beta1/hyperband/service.py``:
``HyperBandParam.convert``, ``_new_hbParameters``, ``_make_child_bracket``), in exact arithmetic. Pure numbers, no
state: called by the operator's ``katib-hyperband`` searcher (``kubetune_operator.searchers.katib_hyperband``),
which walks the plan, and by the Katib converter (:mod:`kubetune.sdk.katib_convert`), which checks Katib's
``parallelTrialCount`` rule and counts the trials of an Experiment without ``maxTrialCount``.

Where Katib's floats and kubetune's exact numbers differ (docs/katib.md, "hyperband"):

- ``s_max`` is the largest ``s`` with ``eta**s <= r_l``; Katib's ``int(log(r_l) / log(eta))`` is one less when the
  division rounds down (``r_l`` 1000, ``eta`` 10: ``2.9999999999999996``, so 2).
- a rung's resource value is ``floor(r_l * eta**(i - s))``; Katib's ``int(r_l * eta**-s * eta**i)`` can be one
  less when the float product rounds down.
- a bracket's size is ``ceil((s_max + 1) * eta**s / (s + 1))`` in integers, as Katib's formula means it.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

__all__ = ["DEFAULT_ETA", "MAX_BRACKET", "Rung", "max_bracket", "plan", "total_trials"]

#: Katib's default ``eta`` (``HyperBandParam``), also used when a setting is 0 or below.
DEFAULT_ETA = 3
#: The largest ``s_max`` taken (Katib has no limit): its first rung alone is ``eta**s_max`` trials, 2**64 at least.
MAX_BRACKET = 64


class Rung(NamedTuple):
    """One rung of a bracket.

    Attributes:
        size: trials in the rung: the bracket's ``n`` for rung 0, then ``ceil(size / eta)`` of the rung before
            (Katib's ``top_trials_num``; the paper's ``floor``), the best of the rung before, copied.
        resource: the value the resource parameter takes in each of them: ``floor(r_l * eta**(i - s))``.
    """

    size: int
    resource: int


def _checked(r_l: float, eta: int) -> Fraction:
    if isinstance(eta, bool) or not isinstance(eta, int) or eta < 2:
        raise ValueError(f"eta must be a whole number >= 2, got {eta!r}")
    if isinstance(r_l, bool) or not isinstance(r_l, (int, float)) or not math.isfinite(r_l) or r_l < 1:
        raise ValueError(f"r_l must be a number >= 1, got {r_l!r}")
    return Fraction(r_l)


def max_bracket(r_l: float, eta: int) -> int:
    """Katib's ``s_max``: the largest ``s`` with ``eta**s <= r_l`` (the paper's ``floor(log_eta(R))``).

    Args:
        r_l: the largest resource value a trial gets (Katib's ``r_l``, the paper's ``R``), >= 1.
        eta: the reduction factor, a whole number >= 2.

    Raises:
        ValueError: ``r_l`` below 1 or not a finite number, ``eta`` not a whole number >= 2, ``s_max`` above
            :data:`MAX_BRACKET`.
    """
    limit = _checked(r_l, eta)
    s = 0
    while eta ** (s + 1) <= limit:
        s += 1
        if s > MAX_BRACKET:
            raise ValueError(f"r_l {r_l!r} with eta {eta} makes more than {MAX_BRACKET + 1} brackets")
    return s


def plan(r_l: float, eta: int) -> list[list[Rung]]:
    """Every bracket of Katib's hyperband, in the order it runs them (``s = s_max`` down to 0), as lists of rungs.

    Bracket ``s`` starts with ``n = ceil((s_max + 1) * eta**s / (s + 1))`` new configs at resource
    ``floor(r_l * eta**-s)`` and has ``s + 1`` rungs; rung ``i + 1`` copies the best ``ceil(n_i / eta)`` configs of
    rung ``i`` with resource ``floor(r_l * eta**(i + 1 - s))``.

    Args:
        r_l: Katib's ``r_l``, >= 1.
        eta: Katib's ``eta``, a whole number >= 2.

    Returns:
        ``s_max + 1`` brackets, bracket ``k`` (``s = s_max - k``) holding ``s + 1`` :class:`Rung`.

    Raises:
        ValueError: as :func:`max_bracket`.
    """
    limit = _checked(r_l, eta)
    s_max = max_bracket(r_l, eta)
    brackets = []
    for s in range(s_max, -1, -1):
        size = -(-(s_max + 1) * eta**s // (s + 1))
        rungs = []
        for i in range(s + 1):
            rungs.append(Rung(size, math.floor(limit * Fraction(eta) ** (i - s))))
            size = -(-size // eta)
        brackets.append(rungs)
    return brackets


def total_trials(r_l: float, eta: int) -> int:
    """How many trials the whole plan runs (every rung of every bracket).

    Raises:
        ValueError: as :func:`max_bracket`.
    """
    return sum(rung.size for bracket in plan(r_l, eta) for rung in bracket)
