"""Name registries with lazy imports, shared by search algorithms and schedulers.

Owns the lookup behind ``kubetune_operator.searchers.create_searcher`` and
``kubetune_operator.schedulers.create_scheduler``: a registry maps a CRD enum
value to ``"module:Class"`` (Ray's ``SEARCH_ALG_IMPORT`` idea), the module is
imported only when that name is chosen, and parameters are checked against the
class's signature so a typo becomes a clear ``ValueError`` (the operator turns
it into an ``InvalidSpec`` condition) instead of a ``TypeError``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

__all__ = ["registered_class", "create_registered"]


def registered_class(registry: dict[str, str], kind: str, name: str) -> type:
    """Import and return the class registered as ``name``.

    Raises:
        ValueError: ``name`` is not registered; the message lists the valid names.
    """
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}")
    module, _, attr = registry[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def create_registered(registry: dict[str, str], kind: str, name: str, params: dict[str, Any],
                      **fixed: Any) -> Any:
    """``cls(**fixed, **params)`` for the class registered as ``name``.

    Args:
        registry: name → ``"module:Class"``.
        kind: what the registry holds, for messages (``"scheduler"``).
        name: the chosen name.
        params: the user's parameters for the class.
        **fixed: arguments the operator always passes (metric, mode, ...).

    Raises:
        ValueError: unknown ``name``, or parameters the class does not take (listed
            with the valid ones), or invalid values (from the class).
    """
    cls = registered_class(registry, kind, name)
    accepted = [p for p in inspect.signature(cls).parameters if p not in fixed]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for {kind} {name!r}; "
                         f"valid: {', '.join(accepted) or 'none'}")
    return cls(**fixed, **params)
