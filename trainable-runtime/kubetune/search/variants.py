"""Basic variant generation: grid cross product × ``num_samples`` random draws, random access.

Owns :class:`VariantSpace`, the equivalent of Ray Tune's
``BasicVariantGenerator``/``generate_variants``, rebuilt so that variant ``i``
is a pure function of ``(space, num_samples, seed, points_to_evaluate,
constant_grid_search, i)``: no iterator state, no
global RNG. An operator restarted mid-experiment therefore regenerates exactly
the configs it handed out before. Callers: the operator's ``basic``/``random``
searcher (``kubetune_operator.searchers.basic``) and the SDK (local previews,
:func:`generate_variants`).

Order, as Ray's: the ``points_to_evaluate`` first, each taking the place of one
of the ``num_samples`` passes; in each pass grid variables are sorted by their path
in the config and the first varies fastest, with fresh random draws for every grid
point (or, with ``constant_grid_search``, draws kept across the pass's grid points).
A grid value may hold domains, ``sample_from`` or grids of its own, expanded where it
is chosen. Tags are Ray's ``experiment_tag``: ``"<index>_<key>=<value>,..."`` over
the grid and sampled values, sorted by path, keyed by the last path element, floats
as ``%.4f``.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import math
import operator
import random
import re
from collections.abc import Mapping
from typing import Any

from kubetune.search.sample import GRID_SEARCH, Domain, Function, is_grid, parse_space

__all__ = [
    "VariantSpace",
    "RecursiveDependencyError",
    "generate_variants",
    "format_tag",
    "find_domains",
    "resolve_sample_from",
    "substitute",
]

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
        return type(space)(
            substitute(v, {p[1:]: x for p, x in values.items() if p[0] == i}) for i, v in enumerate(space)
        )
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


class RecursiveDependencyError(ValueError):
    """``sample_from`` values that read each other in a cycle, so none can be computed (Ray's
    ``RecursiveDependencyError``; here also a ``ValueError``, which spec validation catches)."""


class _Grid:
    """One ``grid_search``: its values, the expansion each value holds (None for a plain constant) and
    where each value's variants start among the grid's ``total`` variants."""

    def __init__(self, values: list):
        self.values = values
        self.children: list[_Level | None] = []
        for value in values:
            level = _Level(value)
            self.children.append(level if level.grids or level.domains or level.functions else None)
        self.starts = list(itertools.accumulate((1 if c is None else c.total for c in self.children), initial=0))
        self.total = self.starts[-1]


class _Level:
    """One level of Ray's recursive expansion of a space: its grids (sorted by path), domains and
    ``sample_from`` functions, at paths relative to the space; ``total`` variants (grid values that
    hold grids of their own count their own variants)."""

    def __init__(self, space: Any):
        nodes = sorted(find_domains(space), key=lambda item: _path_key(item[0]))
        self.grids = [(path, _Grid(node[GRID_SEARCH])) for path, node in nodes if is_grid(node)]
        self.domains = [
            (path, node) for path, node in nodes if isinstance(node, Domain) and not isinstance(node, Function)
        ]
        self.functions = [(path, node) for path, node in nodes if isinstance(node, Function)]
        self.total = math.prod(grid.total for _, grid in self.grids)


def _apply_point(node: Any, value: Any, path: Path, where: str) -> Any:
    """``node`` (part of a parsed space) with a point's ``value`` set into it, as Ray presets a point: an
    object walks into an object of the space and a list into a list, key by key; anything else (a
    number, or an object where the space holds a domain or a grid) replaces the node."""
    if isinstance(value, Mapping) and isinstance(node, dict) and not is_grid(node):
        out = dict(node)
        for key, item in value.items():
            if key not in node:
                raise ValueError(f"{where}: {'.'.join(map(str, path + (key,)))} is not a key of the search space")
            out[key] = _apply_point(node[key], item, path + (key,), where)
        return out
    if isinstance(value, (list, tuple)) and isinstance(node, (list, tuple)):
        if len(value) > len(node):
            raise ValueError(
                f"{where}: {'.'.join(map(str, path))} has {len(value)} items, the search space {len(node)}"
            )
        out = list(node)
        for i, item in enumerate(value):
            out[i] = _apply_point(node[i], item, path + (i,), where)
        return type(node)(out)
    return copy.deepcopy(value)


class VariantSpace:
    """Random-access variants of a parameter space (Ray's ``BasicVariantGenerator``).

    Variants come in Ray's order: first one block per point of ``points_to_evaluate`` (the space
    with the point's values set, its other grids crossed and its other domains drawn), then
    ``num_samples - len(points_to_evaluate)`` passes over the whole space (none when the points
    outnumber ``num_samples``), each point counting as one of the ``num_samples`` as in Ray. A grid
    value that holds domains or grids is expanded where it is chosen, as Ray's recursive expansion does.

    Args:
        space_spec: the parameter space: JSON form (``spec.config``) or SDK form
            with :class:`~kubetune.search.sample.Domain` objects; see
            :func:`~kubetune.search.sample.parse_space`.
        num_samples: passes over the grid (``numSamples``), ≥ 1.
        seed: seeds every draw; None picks one at random (read it back from :attr:`seed`
            and keep it to regenerate the same variants later).
        points_to_evaluate: configs to run first (Ray's ``points_to_evaluate``): objects whose keys
            are keys of the space (nested objects walk into nested objects); their values are constants.
        constant_grid_search: Ray's ``constant_grid_search``: draw the random values once per sample
            and keep them across its grid points, instead of drawing them afresh for every grid point
            (the values a chosen grid value brings are drawn once per choice of it, kept across its own
            grid). ``sample_from`` values are computed per variant either way (in an Experiment, by
            each trial's pod).

    Attributes:
        space: the parsed space.
        seed: the seed in use.
        num_samples: as given.
        points_to_evaluate: as given (a list).
        constant_grid_search: as given.
        grid_size: variants in one pass over the space: the product of the grid sizes (1 without
            grid search), grid values that hold grids counting their own variants.
        total: the number of variants: each point's variants, plus ``grid_size`` for each remaining sample.

    Raises:
        ValueError: bad ``num_samples``, seed or ``constant_grid_search``, a bad domain in the space (from
            ``parse_space``), or a point that is not an object, names a key the space lacks or has a
            list longer than the space's.
    """

    def __init__(
        self,
        space_spec: Any,
        num_samples: int = 1,
        seed: int | None = None,
        points_to_evaluate: list[dict] | None = None,
        constant_grid_search: bool = False,
    ):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        if not isinstance(constant_grid_search, bool):
            raise ValueError(f"constant_grid_search must be true or false, got {constant_grid_search!r}")
        if points_to_evaluate is None:
            points_to_evaluate = []
        if not isinstance(points_to_evaluate, (list, tuple)):
            raise ValueError(f"points_to_evaluate must be a list of configs, got {points_to_evaluate!r}")
        self.space = parse_space(space_spec)
        self.seed = seed
        self.num_samples = num_samples
        self.points_to_evaluate = list(points_to_evaluate)
        self.constant_grid_search = constant_grid_search
        self._level = _Level(self.space)
        self._presets: list[tuple[Any, _Level]] = []
        for i, point in enumerate(self.points_to_evaluate):
            if not isinstance(point, Mapping):
                raise ValueError(f"points_to_evaluate[{i}] must be an object (a config), got {point!r}")
            preset = _apply_point(self.space, point, (), f"points_to_evaluate[{i}]")
            self._presets.append((preset, _Level(preset)))
        self._preset_starts = list(itertools.accumulate((level.total for _, level in self._presets), initial=0))
        self.grid_size = self._level.total
        self.total = self._preset_starts[-1] + max(0, num_samples - len(self._presets)) * self.grid_size

    def _segment(self, index: int) -> tuple[int, Any, _Level]:
        """``(first index, space, expansion)`` of the point or sample pass that variant ``index`` belongs to."""
        if index < self._preset_starts[-1]:
            point = bisect.bisect_right(self._preset_starts, index) - 1
            return (self._preset_starts[point], *self._presets[point])
        sample = (index - self._preset_starts[-1]) // self.grid_size
        return self._preset_starts[-1] + sample * self.grid_size, self.space, self._level

    def variant(self, index: int) -> tuple[dict, str]:
        """Config and tag of variant ``index``, computed from ``(seed, index)`` alone.

        Args:
            index: 0-based, ``< total``. Within a pass (or a point's block) the grid variables are
                sorted by path and the first varies fastest; a chosen grid value's own grids vary
                faster still.

        Returns:
            ``(config, tag)``: a fresh config dict (constants deep-copied) and the
            trial tag, e.g. ``"3_lr=0.0012,optimizer=adam"``.

        Raises:
            IndexError: ``index`` outside ``[0, total)``.
            ValueError: a ``sample_from`` function failed.
            RecursiveDependencyError: ``sample_from`` functions depend on each other in a cycle.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.total:
            raise IndexError(f"variant index {index!r} outside [0, {self.total})")
        start, config, level = self._segment(index)
        rest = index - start  # position among the variants the current level expands to
        grids, domains, functions = level.grids, level.domains, list(level.functions)
        drawn: dict[Path, Any] = {}
        grid_paths: list[Path] = []
        while grids or domains:
            block_start = index - rest
            # Ray's order: the first grid varies fastest and a value's own variants faster still, so the
            # last grid is the most significant digit and each chosen value multiplies the block sizes.
            outer = list(itertools.accumulate((grid.total for _, grid in grids), operator.mul, initial=1))
            chosen: dict[Path, Any] = {}
            inner: list[tuple[Path, _Level]] = []
            within = 1
            for k in reversed(range(len(grids))):
                path, grid = grids[k]
                unit = within * outer[k]
                i = bisect.bisect_right(grid.starts, rest // unit) - 1
                rest -= grid.starts[i] * unit
                within *= grid.starts[i + 1] - grid.starts[i]
                chosen[path] = grid.values[i]
                if grid.children[i] is not None:
                    inner.append((path, grid.children[i]))
            # A level's random values are drawn once per choice of its grid values (Ray draws them before
            # expanding the chosen values), or once per level with constant_grid_search.
            key = block_start if self.constant_grid_search else index - rest
            for path, domain in domains:
                # One RNG per (seed, key, path): a value does not depend on which other parameters
                # the space holds, and str seeds are hashed stably (SHA-512).
                drawn[path] = domain.sample(random_state=random.Random(f"{self.seed}:{key}:{list(path)!r}"))
            if chosen:
                config = substitute(config, chosen)
                grid_paths += chosen
            grids = sorted(
                ((path + sub, grid) for path, child in inner for sub, grid in child.grids),
                key=lambda item: _path_key(item[0]),
            )
            domains = [(path + sub, domain) for path, child in inner for sub, domain in child.domains]
            functions += [(path + sub, function) for path, child in inner for sub, function in child.functions]
        functions.sort(key=lambda item: _path_key(item[0]))
        config = substitute(config, {**drawn, **{path: _Unresolved(path) for path, _ in functions}})
        resolved = {**drawn, **_resolve_functions(config, functions)}
        resolved.update((path, _lookup(config, path)) for path in grid_paths)  # as Ray: the value it resolved to
        return config, format_tag(index, resolved)


def _lookup(config: Any, path: Path) -> Any:
    for key in path:
        config = config[key]
    return config


def resolve_sample_from(config: Any) -> Any:
    """Return a copy of ``config`` with each ``sample_from`` :class:`Function` replaced by its value.

    As Ray resolves them: after every other value, each function called with the config so far
    (item, attribute or ``spec.config.<key>`` access), functions that read another function's value
    after it. Used by the trial pod (``kubetune.shipping``) on a config whose other values the
    operator already chose.

    Raises:
        ValueError: a function failed.
        RecursiveDependencyError: functions depend on each other in a cycle.
    """
    functions = sorted(
        ((path, node) for path, node in find_domains(config) if isinstance(node, Function)),
        key=lambda item: _path_key(item[0]),
    )
    resolved = substitute(config, {path: _Unresolved(path) for path, _ in functions})
    _resolve_functions(resolved, functions)
    return resolved


def _resolve_functions(config: dict, functions: list[tuple[Path, Function]]) -> dict[Path, Any]:
    """Call ``functions`` on ``config`` (holding :class:`_Unresolved` at their paths), filling it in place."""
    pending = list(functions)
    done: dict[Path, Any] = {}
    while pending:
        waiting, reads = [], []
        for path, function in pending:
            try:
                value = function.call(_ConfigView(config))
            except _DependencyError as exc:
                waiting.append((path, function))
                reads.append(exc.args[0])
                continue
            except Exception as exc:
                raise ValueError(f"sample_from at {'.'.join(map(str, path))} failed: {exc!r}") from exc
            _assign(config, path, value)
            done[path] = value
        if len(waiting) == len(pending):
            names = [".".join(map(str, p)) for p, _ in waiting]
            raise RecursiveDependencyError(
                f"sample_from values depend on each other in a cycle: {', '.join(names)} "
                f"(`{names[0]}` recursively depends on `{'.'.join(map(str, reads[0]))}`)"
            )
        pending = waiting
    return done


def _assign(config: Any, path: Path, value: Any) -> None:
    parent = config
    for i, key in enumerate(path[:-1]):
        child = parent[key]
        if isinstance(child, tuple):  # tuples are immutable: rebuild the one on the path
            child = list(child)
            parent[key] = child
            _assign(child, path[i + 1 :], value)
            parent[key] = tuple(child)
            return
        parent = child
    parent[path[-1]] = value


def generate_variants(
    space: Any,
    num_samples: int = 1,
    seed: int | None = None,
    points_to_evaluate: list[dict] | None = None,
    constant_grid_search: bool = False,
) -> list[tuple[dict, str]]:
    """All variants of ``space`` as ``[(config, tag), ...]`` in index order (arguments as :class:`VariantSpace`).

    Raises:
        ValueError: as :class:`VariantSpace` and :meth:`VariantSpace.variant` (a
            :class:`RecursiveDependencyError` among them).
    """
    generator = VariantSpace(space, num_samples, seed, points_to_evaluate, constant_grid_search)
    return [generator.variant(i) for i in range(generator.total)]
