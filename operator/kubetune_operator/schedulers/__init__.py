"""Trial schedulers: the :class:`TrialScheduler` contract and its decisions (``base``), FIFO, ASHA,
HyperBand, the median stopping rule (Ray's, and Katib's ``medianstop``) and PBT. Chosen by name through
:mod:`kubetune_operator.algorithms`.
Pure Python: no kopf, no Kubernetes imports.
"""

from kubetune_operator.schedulers.base import CHECKPOINT, CONTINUE, PAUSE, STOP, TrialScheduler

__all__ = ["CHECKPOINT", "CONTINUE", "PAUSE", "STOP", "TrialScheduler"]
