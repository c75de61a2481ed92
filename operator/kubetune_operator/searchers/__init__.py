"""Search algorithms: the :class:`Searcher` contract (``base``), ``basic`` (Ray's variant generation),
``optuna``, ``bohb`` and ``katib_hyperband`` (Katib's hyperband searcher). Chosen by name through
:mod:`kubetune_operator.algorithms`. Pure Python: no kopf, no Kubernetes imports.
"""

from kubetune_operator.searchers.base import FINISHED, Searcher

__all__ = ["FINISHED", "Searcher"]
