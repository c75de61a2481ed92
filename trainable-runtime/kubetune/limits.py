"""Size limits of an Experiment's free-form fields, as the CRD states them and kubetune enforces them.

``spec.config``, ``spec.searchAlgorithm.params`` and ``spec.scheduler.params`` hold any JSON, so nothing
in the schema bounds them but these limits. The API server cannot check them (CEL cannot measure a
free-form field: docs/operations.md, "Size limits"): the SDK (:mod:`kubetune.sdk.tuner`) measures the compact
JSON before it uploads anything, and the operator (:mod:`kubetune_operator.controller`) measures it before
it creates anything, refusing a larger field with ``Ready=False``/``InvalidSpec`` and a Warning event that
name it. Everything downstream is sized for these limits: a trial's config travels in
its attempt's Secret (at most 1 MiB), and a Trial holds its config twice at most (``spec.config`` and a
PBT exploit's ``status.config``) within etcd's 1.5 MiB per object.

192 KiB also keeps ``kubectl apply``, which copies the whole object into an annotation (at most 256 KiB
for all of them), working. Larger objects (datasets, models, lookup tables) belong in
``tune.with_parameters``, which puts them in object storage once.

It also bounds the one string a trial pod names its Trial by, the display name its ``trial_name_creator``
returned (:func:`display_name_problem`): the pod (:mod:`kubetune.runtime.trial_name`) checks it before it
reports it, and the operator (``kubetune_operator.podinput``) again before a Trial's ``status.displayName``
takes it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

#: Largest ``spec.config``, ``spec.searchAlgorithm.params`` or ``spec.scheduler.params``, in bytes of
#: compact JSON (UTF-8). The CRD's field descriptions state the same number.
MAX_FIELD_BYTES = 192 * 1024
#: The fields bounded by :data:`MAX_FIELD_BYTES`, as paths in ``spec``.
BOUNDED_FIELDS = (("config",), ("searchAlgorithm", "params"), ("scheduler", "params"))
#: Deepest nesting of dicts and lists the operator takes in a value a trial pod reports: a result (Ray results
#: nest a few levels: ``info/learner/...``) or a config the pod computed.
MAX_DEPTH = 16
#: Integers a trial pod reports lie in ``[-INT64, INT64)``: they fit a signed 64-bit integer, as Kubernetes'
#: JSON and etcd's readers take them.
INT64 = 2**63
#: Longest display name of a Trial (``status.displayName``, what ``trial_name_creator`` returned), in characters.
MAX_DISPLAY_NAME_CHARS = 256


def display_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a Trial's display name (``status.displayName``), or None.

    Taken: a string of 1 to :data:`MAX_DISPLAY_NAME_CHARS` characters, every one printable (no newline, tab or
    other control character: the name is one cell of a table).

    Returns:
        A line saying what the name must be, without the name (any code in a trial pod may send one).
    """
    if type(name) is not str:
        return f"a display name must be a string, not {type(name).__name__}"
    if not 1 <= len(name) <= MAX_DISPLAY_NAME_CHARS:
        return f"a display name must have 1 to {MAX_DISPLAY_NAME_CHARS} characters, not {len(name)}"
    if not name.isprintable():
        return "a display name must be printable: no newline, tab or other control character"
    return None


class SpecTooLarge(ValueError):
    """A bounded field of an Experiment spec is over :data:`MAX_FIELD_BYTES` (the message names it)."""


def json_size(value: Any, limit: int | None = None) -> int:
    """Bytes of ``value`` as compact JSON (UTF-8, as :func:`json.dumps` with ``separators=(",", ":")`` and
    ``ensure_ascii=False`` writes it).

    Args:
        limit: once the size is known to be over ``limit``, stop and return a number over it (not the
            size): a 10 MB value costs about what one of ``limit`` bytes costs.

    Raises:
        TypeError: ``value`` holds something JSON cannot encode.
    """
    return len(_dumps(value).encode()) if limit is None else _size(value, limit)


#: Elements of a list encoded at once when each is small (:func:`_small`): C speed, not one call each.
_CHUNK = 512
_SCALARS = (int, float, bool, type(None))


def _leaf(value: Any) -> bool:
    return isinstance(value, _SCALARS) or (isinstance(value, str) and len(value) <= 64)


def _small(value: Any, nodes: list[int]) -> bool:
    """``value`` has at most ``nodes[0]`` values in all (at any depth), each a scalar or a short string (it
    uses them up from ``nodes[0]``): a chunk of such values is small to encode at once."""
    nodes[0] -= 1
    if nodes[0] < 0:
        return False
    if isinstance(value, dict):
        return all(_small(v, nodes) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_small(v, nodes) for v in value)
    return _leaf(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _size(value: Any, budget: int) -> int:
    """:func:`json_size` of ``value``, or a number over ``budget`` once it is over."""
    if isinstance(value, dict):
        total = 1 + 2 * len(value)  # braces and commas: 2 + (n - 1), and n colons
        for key, item in value.items():
            total += len(_dumps(str(key)).encode())
            if total > budget:
                return total
            total += _size(item, budget - total)
            if total > budget:
                return total
        return max(total, 2)
    if isinstance(value, (list, tuple)):
        total = 1 + len(value)  # brackets and commas: 2 + (n - 1)
        for start in range(0, len(value), _CHUNK):
            chunk = value[start : start + _CHUNK]
            if all(_small(x, [64]) for x in chunk):
                total += len(_dumps(list(chunk)).encode()) - len(chunk) - 1
            else:
                for item in chunk:
                    total += _size(item, budget - total)
                    if total > budget:
                        return total
            if total > budget:
                return total
        return max(total, 2)
    if isinstance(value, str) and len(value) > budget:
        return len(value) + 2  # at least one byte per character, and the quotes
    return len(_dumps(value).encode())


def check_spec_sizes(spec: Mapping) -> None:
    """Check each field of :data:`BOUNDED_FIELDS` in ``spec`` (an Experiment's ``spec``) against
    :data:`MAX_FIELD_BYTES`.

    Raises:
        SpecTooLarge: a field is larger; the message names it, its size and the limit, and points to
            ``tune.with_parameters``.
    """
    for path in BOUNDED_FIELDS:
        value: Any = spec
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is None:
            continue
        size = json_size(value, MAX_FIELD_BYTES)
        if size > MAX_FIELD_BYTES:
            field = "spec." + ".".join(path)
            raise SpecTooLarge(
                f"{field} is over {MAX_FIELD_BYTES // 1024} KiB as JSON (the limit kubetune states in its CRD): "
                f"large objects (data, models, tables) go to the trainable through tune.with_parameters, "
                f"which puts them in object storage once, not in {field}"
            )
