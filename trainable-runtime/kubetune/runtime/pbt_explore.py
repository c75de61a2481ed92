"""The trial pod's part of a PBT explore step: the user functions the operator never runs.

Owns :func:`explore_in_pod`, called by :meth:`kubetune.runtime.loop.TrialRunner.setup` when the attempt carries
out a PBT exploit whose explore step needs user code (``kubetune.env.PBT_EXPLORE``): a function of
``hyperparam_mutations`` the operator chose to resample, and ``custom_explore_fn``. The operator has already
decided everything else (which keys are resampled and which perturbed, by which factor, with its journaled
random stream: ``kubetune_operator.schedulers.pbt.explore``); this calls the functions, as Ray's ``_explore``
does, before the trainable is built and restores the donor's checkpoint. The runtime then reports the
config to the operator, which journals it, so a retried attempt or a restarted operator never calls them again.
"""

from __future__ import annotations

import copy
from typing import Any

from kubetune.shipping import loads
from kubetune.storage import Storage

__all__ = ["explore_in_pod"]


def explore_in_pod(config: dict, instruction: dict, storage: Storage) -> dict:
    """Return ``config`` with the user functions of ``instruction`` applied (``config`` is not changed).

    Each ``{"path": [key, ...], "function": uri, "int": bool}`` of ``instruction["resample"]`` sets that key to
    the function's value, called without arguments (Ray's ``distribution()``), made an ``int`` when the key's
    value was one; then ``instruction["customExploreFn"]``, when set, is called with the whole config and its
    return value is the config (Ray's ``custom_explore_fn(new_config)``).

    Args:
        config: the config the operator explored (the donor's, resolved).
        instruction: ``kubetune.env.TrialEnv.pbt_explore``.
        storage: where the SDK pickled the functions.

    Returns:
        The new config: a dict.

    Raises:
        FileNotFoundError: a function's pickle is missing.
        RuntimeError: it was pickled by another Python minor version.
        ValueError: ``custom_explore_fn`` returned something other than a dict (Ray asserts it returns a config).
        Exception: whatever a user function raises (the attempt fails and is retried as any failure).
    """
    new = copy.deepcopy(config)
    functions: dict[str, Any] = {}

    def function(uri: str) -> Any:
        if uri not in functions:
            functions[uri] = loads(storage.get_bytes(uri))
        return functions[uri]

    for step in instruction.get("resample") or ():
        *parents, key = step["path"]
        node = new
        for parent in parents:
            node = node.setdefault(parent, {})
        value = function(step["function"])()
        node[key] = int(value) if step.get("int") else value
    custom = instruction.get("customExploreFn")
    if custom:
        new = function(custom)(new)
        if not isinstance(new, dict):
            raise ValueError(f"custom_explore_fn must return the new config (a dict), got {type(new).__name__}")
    return new
