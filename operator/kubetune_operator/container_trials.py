"""The trial container of a container trial (``spec.trainable.command``): the user's image and command, the trial's
parameters substituted, nothing of kubetune's added.

Owns the parameter references (``${trialParameters.NAME}``, Katib's form, and ``${config.NAME}``, kubetune's, where
NAME may be a dotted path into a nested config; docs/api.md, "Any container as a trial"): :func:`substitute` and
:func:`references`, and :func:`trial_container`, the container ``builders.build_pod`` puts in such a trial's pod.
Called by ``builders.py`` (each attempt's pod) and ``experiment_spec.py`` (references checked at admission). Pure.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

__all__ = ["REFERENCE", "references", "substitute", "trial_container"]

#: A parameter reference: ``${trialParameters.lr}`` or ``${config.optimizer.lr}``.
REFERENCE = re.compile(r"\$\{(trialParameters|config)\.([A-Za-z0-9_][A-Za-z0-9_.\-]*)\}")


def references(texts: Iterable[str]) -> list[str]:
    """The parameter paths ``texts`` refer to (``["lr", "optimizer.lr"]``), in order, repeats kept."""
    return [m.group(2) for text in texts for m in REFERENCE.finditer(text)]


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    if path in config:  # a flat key with dots in it (as Katib's parameter names may be) wins
        return config[path]
    value: Any = config
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(path)
        value = value[part]
    return value


def substitute(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with each parameter reference replaced by the value in ``config``: a string as it is, any other
    value as compact JSON (``0.01``, ``true``, ``[1, 2]``).

    Raises:
        ValueError: a reference to a parameter that is not in ``config`` (the message names it).
    """

    def value(match: re.Match) -> str:
        try:
            found = _lookup(config, match.group(2))
        except KeyError:
            raise ValueError(f"{match.group(0)} names no parameter of the trial's config") from None
        return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))

    return REFERENCE.sub(value, text)


def trial_container(
    name: str, image: str, command: Iterable[str], args: Iterable[str], env: list, config: Mapping[str, Any]
) -> dict:
    """The trial container of a container trial: ``image`` running ``command`` and ``args`` with ``config``'s
    values substituted, ``env`` (``template.env``) substituted in its ``value`` fields, and the *restricted* Pod
    Security settings of a container (no privilege escalation, every capability dropped). No variable, volume
    or file of kubetune's is added, and the image's own filesystem stays as it is (writable, unlike the runtime's:
    a user's image may write where it runs).

    Args:
        name: the container's name (``labels.TRIAL_CONTAINER``).
        image: the image reference.
        command, args: ``spec.trainable.command`` and ``args``.
        env: ``spec.template.env`` (``{"name", "value"}`` or ``{"name", "valueFrom"}`` items).
        config: the trial's config.

    Raises:
        ValueError: a reference to a parameter not in ``config``.
    """
    container = {
        "name": name,
        "image": image,
        "command": [substitute(c, config) for c in command],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    args = [substitute(a, config) for a in args]
    if args:
        container["args"] = args
    if env:
        container["env"] = [
            {**item, "value": substitute(item["value"], config)} if isinstance(item.get("value"), str) else dict(item)
            for item in env
        ]
    return container
