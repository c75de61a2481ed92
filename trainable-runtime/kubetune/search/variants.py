"""Basic variant generation: grid cross product × ``num_samples`` random draws, random access.

Owns :class:`VariantSpace`, the equivalent of Ray Tune's
``BasicVariantGenerator``/``generate_variants``, rebuilt so that variant ``i``
is a pure function of ``(space, num_samples, seed, i)``: no iterator state, no
global RNG. An operator restarted mid-experiment therefore regenerates exactly
the configs it handed out before. Callers: the operator's ``basic``/``random``
searcher (``kubetune_operator.searchers.basic``) and the SDK (local previews,
:func:`generate_variants`).

Order, as Ray's: grid variables are sorted by their path in the config and the
first varies fastest; each of the ``num_samples`` passes covers the whole grid
with fresh random draws. Tags are Ray's ``experiment_tag``:
``"<index>_<key>=<value>,..."`` over the grid and sampled values, sorted by
path, keyed by the last path element, floats as ``%.4f``.
"""

from __future__ import annotations

import copy
import math
import random
import re
from typing import Any

from kubetune.search.sample import Domain, Function, is_grid, parse_space

__all__ = ["VariantSpace", "generate_variants", "format_tag", "find_domains", "resolve_sample_from", "substitute"]

Path = tuple  # of str (dict keys) and int (list indices)


def _path_key(path: Path) -> tuple:
    # Sort keys of mixed types (list indices before dict keys) without TypeError.
    return tuple((isinstance(p, str), p) for p in path)


def _clean(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return re.sub(r"[^a-zA-Z0-9_-]+", "_", str(value)).strip("_")


def format_tag(index: int, resolved: dict[Path, Any]) -> str:
    """Ray's trial tag: ``"<index>_<k>=<v>,..."`` for ``resolved`` (path → value), or ``"<index>"``.

    Keys are the last element of each path; values are cleaned for use in
    names (floats ``%.4f``; other characters outside ``[a-zA-Z0-9_-]`` become ``_``).
    """
    parts = [f"{_clean(path[-1])}={_clean(resolved[path])}" for path in sorted(resolved, key=_path_key)]
    return f"{index}_{','.join(parts)}" if parts else str(index)


def find_domains(space: Any) -> list[tuple[Path, Any]]:
    """``(path, node)`` of every domain and ``grid_search`` marker in a parsed space, in document order.

    Paths are tuples of dict keys and list indices, e.g. ``("model", "layers", 0)``.
    """
    found: list[tuple[Path, Any]] = []

    def walk(node: Any, path: Path) -> None:
        if isinstance(node, Domain) or is_grid(node):
            found.append((path, node))
        elif isinstance(node, dict):
            for key, value in node.items():
                walk(value, path + (key,))
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                walk(value, path + (i,))

    walk(space, ())
    return found


def substitute(space: Any, values: dict[Path, Any]) -> Any:
    """A deep copy of ``space`` with the node at each path of ``values`` replaced by (a copy of) its value.

    Nothing in the result is shared with ``space`` or ``values``, so configs never share state.
    """
    if () in values:
        return copy.deepcopy(values[()])
    if isinstance(space, dict):
        return {k: substitute(v, {p[1:]: x for p, x in values.items() if p[0] == k}) for k, v in space.items()}
    if isinstance(space, (list, tuple)):
        return type(space)(substitute(v, {p[1:]: x for p, x in values.items() if p[0] == i})
                           for i, v in enumerate(space))
    return copy.deepcopy(space)


class _Unresolved:
    """Placeholder for a ``sample_from`` value not computed yet."""

    def __init__(self, path: Path):
        self.path = path


class _DependencyError(Exception):
    """A ``sample_from`` function read a value that is itself still unresolved."""


class _ConfigView(dict):
    """The config passed to ``sample_from`` functions: item or attribute access.

    ``view["a"]``, ``view.a`` and Ray's older spec style ``view.config.a`` all
    work; reading a value that is still unresolved raises :class:`_DependencyError`
    so the function is retried after the others.
    """

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, _Unresolved):
            raise _DependencyError(value.path)
        return _ConfigView(value) if isinstance(value, dict) else value

    def __getitem__(self, key: Any) -> Any:
        return self._wrap(dict.__getitem__(self, key))

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return self[name]
        if name == "config":
            return self
        raise AttributeError(name)


class VariantSpace:
    """Random-access variants of a parameter space (Ray's basic variant generation).

    Args:
        space_spec: the parameter space: JSON form (``spec.config``) or SDK form
            with :class:`~kubetune.search.sample.Domain` objects; see
            :func:`~kubetune.search.sample.parse_space`.
        num_samples: passes over the grid (``numSamples``), ≥ 1.
        seed: seeds every draw; None picks one at random (read it back from :attr:`seed`
            and keep it to regenerate the same variants later).

    Attributes:
        space: the parsed space.
        seed: the seed in use.
        num_samples: as given.
        grid_size: product of the grid sizes (1 without grid search).
        total: ``num_samples * grid_size``, the number of variants.

    Raises:
        ValueError: bad ``num_samples`` or seed, or a bad domain in the space (from ``parse_space``).
    """

    def __init__(self, space_spec: Any, num_samples: int = 1, seed: int | None = None):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.space = parse_space(space_spec)
        self.seed = seed
        self.num_samples = num_samples
        nodes = sorted(find_domains(self.space), key=lambda item: _path_key(item[0]))
        self._grid = [(path, list(node["grid_search"])) for path, node in nodes if is_grid(node)]
        self._domains = [(path, node) for path, node in nodes if isinstance(node, Domain)
                         and not isinstance(node, Function)]
        self._functions = [(path, node) for path, node in nodes if isinstance(node, Function)]
        self.grid_size = math.prod(len(values) for _, values in self._grid)
        self.total = num_samples * self.grid_size

    def variant(self, index: int) -> tuple[dict, str]:
        """Config and tag of variant ``index``, computed from ``(seed, index)`` alone.

        Args:
            index: 0-based, ``< total``. ``index // grid_size`` is the sample pass,
                ``index % grid_size`` the grid point (first grid variable fastest).

        Returns:
            ``(config, tag)``: a fresh config dict (constants deep-copied) and the
            trial tag, e.g. ``"3_lr=0.0012,optimizer=adam"``.

        Raises:
            IndexError: ``index`` outside ``[0, total)``.
            ValueError: a ``sample_from`` function failed or functions depend on each other in a cycle.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.total:
            raise IndexError(f"variant index {index!r} outside [0, {self.total})")
        resolved: dict[Path, Any] = {}
        rest = index % self.grid_size
        for path, values in self._grid:
            rest, i = divmod(rest, len(values))
            resolved[path] = values[i]
        for path, domain in self._domains:
            # One RNG per (seed, index, path): a value does not depend on which other
            # parameters the space holds, and str seeds are hashed stably (SHA-512).
            resolved[path] = domain.sample(random.Random(f"{self.seed}:{index}:{list(path)!r}"))
        config = substitute(self.space, {**resolved, **{path: _Unresolved(path) for path, _ in self._functions}})
        resolved.update(_resolve_functions(config, self._functions))
        return config, format_tag(index, resolved)


def resolve_sample_from(config: Any) -> Any:
    """Return a copy of ``config`` with each ``sample_from`` :class:`Function` replaced by its value.

    As Ray resolves them: after every other value, each function called with the config so far
    (item, attribute or ``spec.config.<key>`` access), functions that read another function's value
    after it. Used by the trial pod (``kubetune.shipping``) on a config whose other values the
    operator already chose.

    Raises:
        ValueError: a function failed, or functions depend on each other in a cycle.
    """
    functions = sorted(((path, node) for path, node in find_domains(config) if isinstance(node, Function)),
                       key=lambda item: _path_key(item[0]))
    resolved = substitute(config, {path: _Unresolved(path) for path, _ in functions})
    _resolve_functions(resolved, functions)
    return resolved


def _resolve_functions(config: dict, functions: list[tuple[Path, Function]]) -> dict[Path, Any]:
    """Call ``functions`` on ``config`` (holding :class:`_Unresolved` at their paths), filling it in place."""
    pending = list(functions)
    done: dict[Path, Any] = {}
    while pending:
        waiting = []
        for path, function in pending:
            try:
                value = function.call(_ConfigView(config))
            except _DependencyError:
                waiting.append((path, function))
                continue
            except Exception as exc:
                raise ValueError(f"sample_from at {'.'.join(map(str, path))} failed: {exc!r}") from exc
            _assign(config, path, value)
            done[path] = value
        if len(waiting) == len(pending):
            names = ", ".join(".".join(map(str, p)) for p, _ in waiting)
            raise ValueError(f"sample_from values depend on each other in a cycle: {names}")
        pending = waiting
    return done


def _assign(config: Any, path: Path, value: Any) -> None:
    parent = config
    for i, key in enumerate(path[:-1]):
        child = parent[key]
        if isinstance(child, tuple):  # tuples are immutable: rebuild the one on the path
            child = list(child)
            parent[key] = child
            _assign(child, path[i + 1:], value)
            parent[key] = tuple(child)
            return
        parent = child
    parent[path[-1]] = value


def generate_variants(space: Any, num_samples: int = 1, seed: int | None = None) -> list[tuple[dict, str]]:
    """All variants of ``space`` as ``[(config, tag), ...]`` in index order.

    Raises:
        ValueError: as :class:`VariantSpace`.
    """
    generator = VariantSpace(space, num_samples, seed)
    return [generator.variant(i) for i in range(generator.total)]
