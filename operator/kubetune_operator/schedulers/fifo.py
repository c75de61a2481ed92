"""The ``fifo`` scheduler: every trial runs until its own end (Ray's ``FIFOScheduler``).

Owns :class:`FIFOScheduler`; created through
``kubetune_operator.algorithms.create_scheduler``.
"""

from __future__ import annotations

from kubetune_operator.schedulers.base import TrialScheduler

__all__ = ["FIFOScheduler"]


class FIFOScheduler(TrialScheduler):
    """Always ``CONTINUE``; trials start in creation order. ``metric``/``mode`` are optional and unused."""

    stateless = True
