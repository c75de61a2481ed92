"""Parameter-space domains: the SDK's ``tune.uniform(...)`` family and their JSON form.

Owns the :class:`Domain` classes, the Ray-Tune-compatible factory functions
(:func:`uniform`, :func:`choice`, ...), the CRD/JSON encoding of a domain
(``{"loguniform": [1e-4, 1e-1]}``) and :func:`parse_space`, which turns an
Experiment's ``spec.config`` back into domains. Callers: the SDK (building
``spec.config`` with :meth:`Domain.to_spec`), :mod:`kubetune.search.variants`
(sampling), the operator's searchers (``kubetune_operator.searchers``) and its
spec validation (:func:`parse_space` errors name the offending path).

Semantics follow Ray Tune's ``tune/search/sample.py`` (2.x): bounds,
quantization (round to a multiple of ``q``, which makes the upper bound
reachable) and log scales behave as there, and so does Ray's ``Domain`` API: ``sample(config,
size, random_state)``, ``is_valid(value)`` and the builders ``Float(lower, upper).uniform()``,
``.loguniform()``, ``.normal(mean, sd)`` and ``.quantized(q)``. The variant generator passes
each draw its own seeded :class:`random.Random`, so it controls reproducibility.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import math
import random
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Sequence

__all__ = [
    "Domain",
    "Float",
    "Integer",
    "Normal",
    "Categorical",
    "Function",
    "grid_search",
    "choice",
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "randint",
    "qrandint",
    "lograndint",
    "qlograndint",
    "randn",
    "qrandn",
    "sample_from",
    "parse_space",
    "space_spec",
    "space_warnings",
    "is_grid",
    "DOMAIN_NAMES",
    "UNKNOWN_DOMAINS",
    "unknown_domain",
]

GRID_SEARCH = "grid_search"


class Domain:
    """A set of values and how to draw one of them (Ray's ``Domain`` plus its sampler).

    Attributes:
        name: the domain's key in the JSON form (``"uniform"``, ``"choice"``, ...).
    """

    name: str = ""

    def sample(self, config: Any = None, size: int = 1, random_state: Any = None) -> Any:
        """Draw ``size`` values (Ray's ``Domain.sample``).

        Args:
            config: the config a ``sample_from`` function receives; other domains ignore it.
            size: how many values, >= 1.
            random_state: None (Python's global ``random`` stream, as Ray uses NumPy's global one), an
                ``int`` seed, or a :class:`random.Random`. Draws come from Python's ``random``, so a seed
                gives other values than the same seed does in Ray (NumPy).

        Returns:
            One value when ``size == 1``, else a list of ``size`` values.

        Raises:
            ValueError: ``size`` is not an integer >= 1, ``random_state`` has another type, or the domain
                cannot be sampled (a ``Float`` without bounds and without ``.normal()``).
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        rng = _random_state(random_state)
        values = [self._draw(rng) for _ in range(size)]
        return values if size > 1 else values[0]

    def _draw(self, rng: Any) -> Any:
        """One value drawn with ``rng`` (a :class:`random.Random` or the ``random`` module)."""
        raise NotImplementedError

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` is a valid value of this domain (Ray's ``Domain.is_valid``)."""
        raise NotImplementedError

    def args(self) -> list:
        """Ray's positional arguments of this domain, as :meth:`to_spec` writes them."""
        raise NotImplementedError

    def to_spec(self) -> dict:
        """The CRD/JSON form: ``{name: [positional args]}`` (``choice``: the categories list).

        Raises:
            ValueError: the domain cannot be written as JSON (``sample_from``).
        """
        return {self.name: self.args()}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.name == self.name and other.args() == self.args()

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(repr(a) for a in self.args())})"


def _random_state(random_state: Any) -> Any:
    if random_state is None:
        return random  # the module's global stream: random.seed() makes it reproducible
    if isinstance(random_state, random.Random):
        return random_state
    if isinstance(random_state, int) and not isinstance(random_state, bool):
        return random.Random(random_state)
    raise ValueError(f"random_state must be None, an int seed or a random.Random, got {type(random_state).__name__}")


def _between(value: Any, lower: float, upper: float) -> bool:
    try:
        return bool(lower <= value <= upper)
    except TypeError:  # not a number
        return False


def _quantize(value: float, q: float) -> float:
    # Python's round() rounds halves to even, as numpy's np.round does in Ray.
    return round(value / q) * q


def _uniform_float(rng: Any, lower: float, upper: float) -> float:
    """A float in [lower, upper): upper is excluded even when rounding would reach it."""
    x = lower + (upper - lower) * rng.random()
    return x if x < upper else math.nextafter(upper, lower)


class _Ranged(Domain):
    """A range ``[lower, upper]`` with Ray's sampler builders: exactly one of ``uniform()``/``loguniform()``
    (``Float`` also ``normal()``), then ``quantized(q)`` optionally; a domain built without a builder is
    sampled uniformly, as Ray's default sampler does."""

    def __init__(self, lower: Any, upper: Any, q: Any = None, log: bool = False, base: float = 10):
        self.lower, self.upper, self.q, self.log, self.base = lower, upper, q, log, base
        self.sampler_chosen = False  # set by the builders and the factory functions (Ray's ``set_sampler``)

    @property
    def name(self) -> str:
        return ("q" if self.q is not None else "") + self._names[self.log]

    def args(self) -> list:
        out = [self.lower, self.upper] + ([self.q] if self.q is not None else [])
        return out + ([self.base] if self.log and self.base != 10 else [])

    def is_valid(self, value: Any) -> bool:
        """Ray's rule: ``lower <= value <= upper`` (both bounds included, ``q`` not checked); False for a
        value that is not a number (Ray raises ``TypeError``)."""
        return _between(value, self.lower, self.upper)

    def _no_sampler_yet(self, builder: str) -> None:
        if self.sampler_chosen:
            raise ValueError(
                f"{type(self).__name__} {self!r} has its sampler already; .{builder}() would choose "
                "another one (Ray allows one sampler per domain, then .quantized(q))"
            )

    def _with(self, **changes: Any) -> Any:
        new = copy.copy(self)
        new.__dict__.update(changes, sampler_chosen=True)
        return new

    def uniform(self) -> Any:
        """This range sampled uniformly (Ray's ``.uniform()``).

        Raises:
            ValueError: a sampler was chosen already, or the bounds are not finite numbers with
                ``lower < upper``.
        """
        self._no_sampler_yet("uniform")
        lower, upper = _bounds(self.lower, self.upper, False, isinstance(self, Integer))
        return self._with(lower=lower, upper=upper, log=False)

    def loguniform(self, base: float = 10) -> Any:
        """This range sampled log-uniformly (Ray's ``.loguniform()``; ``base`` does not change the draw).

        Raises:
            ValueError: a sampler was chosen already, ``lower <= 0``, bad bounds or a bad ``base``.
        """
        self._no_sampler_yet("loguniform")
        lower, upper = _bounds(self.lower, self.upper, True, isinstance(self, Integer))
        return self._with(lower=lower, upper=upper, log=True, base=_base(base))


class Float(_Ranged):
    """Floats in [lower, upper), uniform or log-uniform, optionally rounded to multiples of ``q``.

    With ``q`` the bounds are first narrowed to the multiples of ``q`` inside them
    and the draw is rounded, so the (narrowed) upper bound can be returned.
    ``Float(lower, upper)`` is Ray's constructor: a bound may be None (unbounded), for
    :meth:`normal`; :func:`uniform` and the other factories build it with a sampler.

    Attributes:
        lower, upper: bounds (``-inf``/``inf`` when given as None); ``log`` needs ``0 < lower``.
        q: quantization step, or None.
        log: sample ``exp(U(log lower, log upper))`` instead of ``U(lower, upper)``.
        base: accepted for compatibility with Ray's ``base`` argument; the
            distribution does not depend on it.
    """

    _names = ("uniform", "loguniform")

    def __init__(
        self, lower: float | None, upper: float | None, q: float | None = None, log: bool = False, base: float = 10
    ):
        super().__init__(-math.inf if lower is None else lower, math.inf if upper is None else upper, q, log, base)

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> Normal:
        """Normally distributed values instead (Ray's ``Float(None, None).normal(mean, sd)``).

        Returns:
            A :class:`Normal` domain (``randn``).

        Raises:
            ValueError: a sampler was chosen already, the range has a bound (Ray fails when sampling it),
                ``sd <= 0`` or a non-finite argument.
        """
        self._no_sampler_yet("normal")
        if math.isfinite(self.lower) or math.isfinite(self.upper):
            raise ValueError(
                f"normal sampling takes no bounds, got lower={self.lower!r}, upper={self.upper!r}: "
                "build it from Float(None, None)"
            )
        mean, sd = _number("mean", mean), _number("sd", sd)
        if sd <= 0:
            raise ValueError(f"sd must be > 0, got {sd!r}")
        return Normal(mean, sd)

    def quantized(self, q: float) -> Float:
        """Round draws to multiples of ``q`` (Ray's ``.quantized(q)``); the upper bound becomes reachable.

        Raises:
            ValueError: ``q <= 0``, a bound that is not a multiple of ``q`` (as Ray), or a bound that is
                not finite.
        """
        lower, upper = _bounds(self.lower, self.upper, self.log, integer=False)
        q = _step(q, integer=False)
        for label, bound in (("lower", lower), ("upper", upper)):
            if not math.isclose(bound / q, round(bound / q)):
                raise ValueError(f"{label}={bound!r} is not a multiple of q={q!r}")
        return self._with(q=q)

    def _draw(self, rng: Any) -> float:
        lower, upper = self.lower, self.upper
        if not (math.isfinite(lower) and math.isfinite(upper)):
            raise ValueError(f"{self!r} has no bounds to sample between; use .normal() for an unbounded Float")
        if self.q is not None:
            lower, upper = math.ceil(lower / self.q) * self.q, math.floor(upper / self.q) * self.q
        if self.log:
            x = math.exp(_uniform_float(rng, math.log(lower), math.log(upper)))
        else:
            x = _uniform_float(rng, lower, upper)
        return float(_quantize(x, self.q)) if self.q is not None else x


class Integer(_Ranged):
    """Integers in [lower, upper), uniform or log-uniform, optionally multiples of ``q``.

    With ``q > 1`` the bounds narrow to the multiples of ``q`` inside them and the
    draw is rounded to a multiple of ``q``, so the upper bound is included (Ray's
    ``qrandint``); ``q == 1`` behaves exactly as the unquantized domain.

    Attributes:
        lower, upper: bounds; ``log`` needs ``0 < lower``.
        q: quantization step (a positive int), or None for ``randint``/``lograndint``.
        log: ``floor(exp(U(log lower, log upper)))`` instead of a uniform integer.
        base: accepted for compatibility with Ray; the distribution does not depend on it.
    """

    _names = ("randint", "lograndint")

    def bounds(self) -> tuple[int, int]:
        """The bounds the draw uses: narrowed to multiples of ``q`` when ``q > 1``."""
        if self.q is None or self.q == 1:
            return self.lower, self.upper
        return -(-self.lower // self.q) * self.q, (self.upper // self.q) * self.q

    def quantized(self, q: int) -> Integer:
        """Multiples of ``q`` only, the upper bound included (Ray's ``.quantized(q)``).

        Raises:
            ValueError: ``q`` is not a positive integer, or ``[lower, upper]`` holds fewer than two multiples
                of it.
        """
        new = self._with(q=_step(q, integer=True))
        low, high = new.bounds()
        if low >= high:
            raise ValueError(f"[{self.lower}, {self.upper}] holds fewer than two multiples of q={q!r}")
        return new

    def _draw(self, rng: Any) -> int:
        lower, upper = self.bounds()
        if self.log:
            # exp() can round up to ``upper`` itself; the draw stays below it.
            x = min(math.floor(math.exp(_uniform_float(rng, math.log(lower), math.log(upper)))), upper - 1)
        else:
            x = rng.randrange(lower, upper)
        if self.q is not None and self.q > 1:
            x = _quantize(x, self.q)
        return int(x)


class Normal(Domain):
    """Normally distributed floats (Ray's ``randn``/``qrandn``, a ``Float`` with a normal sampler there).

    Attributes:
        mean, sd: parameters of the normal distribution (``sd > 0``).
        q: round the draw to a multiple of ``q``, or None.
    """

    def __init__(self, mean: float = 0.0, sd: float = 1.0, q: float | None = None):
        self.mean, self.sd, self.q = mean, sd, q

    @property
    def name(self) -> str:
        return "qrandn" if self.q is not None else "randn"

    def args(self) -> list:
        return [self.mean, self.sd] + ([self.q] if self.q is not None else [])

    def quantized(self, q: float) -> Normal:
        """Round draws to multiples of ``q`` (Ray's ``.normal(mean, sd).quantized(q)``, i.e. ``qrandn``).

        Raises:
            ValueError: ``q`` is not a finite number > 0.
        """
        return Normal(self.mean, self.sd, _step(q, integer=False))

    def is_valid(self, value: Any) -> bool:
        """Ray's rule for an unbounded ``Float``: any number but NaN; False for a value that is not a number."""
        return _between(value, -math.inf, math.inf)

    def _draw(self, rng: Any) -> float:
        x = rng.normalvariate(self.mean, self.sd)
        return float(_quantize(x, self.q)) if self.q is not None else x


class Categorical(Domain):
    """One of ``categories``, uniformly; elements keep their types (Ray's ``choice``)."""

    name = "choice"

    def __init__(self, categories: Sequence):
        self.categories = list(categories)

    def args(self) -> list:
        return list(self.categories)

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` is one of the categories (``==``), as Ray."""
        return value in self.categories

    def uniform(self) -> Categorical:
        """This domain with its (only) sampler, uniform: Ray's ``Categorical(categories).uniform()``."""
        return Categorical(self.categories)

    def _draw(self, rng: Any) -> Any:
        return self.categories[rng.randrange(len(self.categories))]


class Function(Domain):
    """A value computed by a user function (Ray's ``sample_from``).

    The function takes no argument or one: the config resolved so far, which
    also answers Ray's older spec style (``spec.config.a``) when the variant generator
    calls it. It runs after all other domains of the variant are drawn. In an Experiment it
    runs in the trial pod (``kubetune.shipping``), never in the operator.
    """

    name = "sample_from"

    def __init__(self, func: Callable):
        try:
            inspect.signature(func).bind({})
            self.pass_config = True
        except TypeError:
            try:
                inspect.signature(func).bind()
            except TypeError as exc:
                raise ValueError("sample_from needs a function taking 0 or 1 arguments") from exc
            self.pass_config = False
        self.func = func

    def args(self) -> list:
        return [self.func]

    def to_spec(self) -> dict:
        raise ValueError("sample_from cannot be written to spec.config (JSON); use a built-in domain")

    def sample(self, config: Any = None, size: int = 1, random_state: Any = None) -> Any:
        """Call the function ``size`` times (Ray's ``Function.sample``): with ``config``, or with
        ``config[i]`` for call ``i`` when ``config`` is a list; ``random_state`` is not used.

        Returns:
            One value when ``size == 1``, else a list.

        Raises:
            ValueError: ``size`` is not an integer >= 1.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        values = [self.call(config[i] if isinstance(config, list) else config) for i in range(size)]
        return values if size > 1 else values[0]

    def is_valid(self, value: Any) -> bool:
        """Always True, as Ray: what the function may return is unknown."""
        return True

    def call(self, config: Any) -> Any:
        """Run the function, passing ``config`` when it takes an argument."""
        return self.func(config) if self.pass_config else self.func()


# --------------------------------------------------------------------------- validation helpers


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def _integer(name: str, value: Any) -> int:
    _number(name, value)
    if value != int(value):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _bounds(lower: Any, upper: Any, log: bool, integer: bool) -> tuple:
    check = _integer if integer else _number
    lower, upper = check("lower", lower), check("upper", upper)
    if lower >= upper:
        raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
    if log and lower <= 0:
        raise ValueError(f"log scale needs lower > 0, got lower={lower!r}")
    return lower, upper


def _step(q: Any, integer: bool) -> Any:
    q = _integer("q", q) if integer else _number("q", q)
    if q <= 0:
        raise ValueError(f"q must be > 0, got {q!r}")
    return q


def _base(base: Any) -> float:
    base = _number("base", base)
    if base <= 0 or base == 1:
        raise ValueError(f"base must be > 0 and != 1, got {base!r}")
    return base


# --------------------------------------------------------------------------- the SDK's factory functions


def grid_search(values: Iterable) -> dict:
    """Every value in ``values`` once per sample pass: ``{"grid_search": [values...]}`` (Ray's ``grid_search``).

    Any iterable is taken (a list, a tuple, ``range(10)``, a generator), and realised into a list once,
    here. A value may itself be a domain, a ``sample_from`` or a ``grid_search``: the variant generator
    resolves it for the grid points that choose it, as Ray does.

    Raises:
        ValueError: ``values`` is empty, not iterable, a string (Ray would search its characters) or a
            mapping (Ray would search its keys).
    """
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ValueError(f"grid_search needs a non-empty iterable of values (not a string or mapping), got {values!r}")
    realised = list(values)
    if not realised:
        raise ValueError(f"grid_search needs a non-empty iterable of values, got {values!r}")
    return {GRID_SEARCH: realised}


def choice(categories: Sequence) -> Categorical:
    """One of ``categories``, uniformly; element types are kept.

    Raises:
        ValueError: ``categories`` is empty or not a sequence (a string is not accepted).
    """
    if not isinstance(categories, Sequence) or isinstance(categories, (str, bytes)) or not categories:
        raise ValueError(f"choice needs a non-empty list of categories, got {categories!r}")
    return Categorical(categories)


def uniform(lower: float, upper: float) -> Float:
    """A float in [lower, upper).

    Raises:
        ValueError: a bound is not a finite number, or ``lower >= upper``.
    """
    return Float(lower, upper).uniform()


def quniform(lower: float, upper: float, q: float) -> Float:
    """``round(x / q) * q`` for x uniform in [lower, upper]; the upper bound is reachable.

    Raises:
        ValueError: bad bounds, ``q <= 0``, or a bound that is not a multiple of ``q`` (as Ray).
    """
    return Float(lower, upper).uniform().quantized(q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """``exp(U(log lower, log upper))``: every order of magnitude equally likely.

    Raises:
        ValueError: ``lower <= 0``, ``lower >= upper`` or a bad ``base``.
    """
    return Float(lower, upper).loguniform(base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """:func:`loguniform` rounded to a multiple of ``q``; the upper bound is reachable.

    Raises:
        ValueError: as :func:`loguniform`, plus ``q <= 0`` or bounds not multiples of ``q``.
    """
    return Float(lower, upper).loguniform(base).quantized(q)


def randint(lower: int, upper: int) -> Integer:
    """An integer in [lower, upper).

    Raises:
        ValueError: a bound is not an integer, or ``lower >= upper``.
    """
    return Integer(lower, upper).uniform()


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """A multiple of ``q`` in [lower, upper], upper included (with ``q == 1``: as :func:`randint`).

    Raises:
        ValueError: bad bounds, ``q`` not a positive integer, or fewer than two multiples of ``q`` in range.
    """
    return Integer(lower, upper).uniform().quantized(q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """``floor(exp(U(log lower, log upper)))``: an integer in [lower, upper) on a log scale.

    Raises:
        ValueError: ``lower <= 0``, ``lower >= upper``, non-integer bounds or a bad ``base``.
    """
    return Integer(lower, upper).loguniform(base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """:func:`lograndint` rounded to a multiple of ``q``; the upper bound is reachable.

    Raises:
        ValueError: as :func:`lograndint`, plus a bad ``q``.
    """
    return Integer(lower, upper).loguniform(base).quantized(q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """A float from the normal distribution N(mean, sd²).

    Raises:
        ValueError: ``sd <= 0`` or a non-finite argument.
    """
    return Float(None, None).normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """:func:`randn` rounded to a multiple of ``q``.

    Raises:
        ValueError: ``sd <= 0``, ``q <= 0`` or a non-finite argument.
    """
    return Float(None, None).normal(mean, sd).quantized(q)


def sample_from(func: Callable) -> Function:
    """A value computed by ``func(config)`` (or ``func()``) after the other domains are drawn.

    Raises:
        ValueError: ``func`` cannot be called with 0 or 1 arguments.
    """
    return Function(func)


_FACTORIES: dict[str, Callable[..., Domain]] = {
    f.__name__: f
    for f in (
        choice,
        uniform,
        quniform,
        loguniform,
        qloguniform,
        randint,
        qrandint,
        lograndint,
        qlograndint,
        randn,
        qrandn,
    )
}
#: Keys that make a one-key dict in ``spec.config`` a domain (``grid_search`` included).
DOMAIN_NAMES = frozenset(_FACTORIES) | {GRID_SEARCH}
#: Distribution names of other tools (NNI's JSON spaces, hyperopt, Optuna, W&B sweeps) that kubetune has not,
#: each with the domain to use instead (None: there is none). A one-key object named so whose value is
#: arguments (a list or an object) is refused: taken as a constant, it would reach the trainable as a dict.
UNKNOWN_DOMAINS: dict[str, str | None] = {
    "gaussian": "randn",
    "normal": "randn",
    "qgaussian": "qrandn",
    "qnormal": "qrandn",
    "lognormal": None,
    "qlognormal": None,
    "uniformint": "randint",
    "quniformint": "qrandint",
    "int_uniform": "randint",
    "loguniformint": "lograndint",
    "qloguniformint": "qlograndint",
    "log_uniform": "loguniform",
    "log_uniform_values": "loguniform",
    "q_uniform": "quniform",
    "q_log_uniform": "qloguniform",
    "q_log_uniform_values": "qloguniform",
    "discrete_uniform": "quniform",
    "categorical": "choice",
    "pchoice": "choice",
    "sample_from": None,
}


def unknown_domain(name: Any, args: Any) -> str | None:
    """Why the one-key object ``{name: args}`` cannot be a parameter space: ``name`` is in
    :data:`UNKNOWN_DOMAINS` and ``args`` looks like arguments (a list or an object). None otherwise.

    Returns:
        A message that names the domain to use, or says there is none, and lists :data:`DOMAIN_NAMES`.
    """
    if not isinstance(name, str) or name.lower() not in UNKNOWN_DOMAINS or not isinstance(args, (list, tuple, dict)):
        return None
    instead = UNKNOWN_DOMAINS[name.lower()]
    if name.lower() == "sample_from":
        hint = "sample_from is a Python function: give it to kubetune.run or Tuner, which ship it to the trial pods"
    elif instead is None:
        hint = f"kubetune has no {name} domain"
    else:
        params = ", ".join(inspect.signature(_FACTORIES[instead]).parameters)
        hint = f"use {instead}({params})"
    return f"{name!r} is not a domain kubetune knows ({hint}); the domains are: {', '.join(sorted(DOMAIN_NAMES))}"


# --------------------------------------------------------------------------- JSON -> domains


#: The JSON form of an object that is not a domain though it has one key named like one
#: (``{"kubetune/object": {"choice": "adam"}}`` is the object ``{"choice": "adam"}``): what the SDK
#: writes for such an object of the user's, so the operator reads it as the user meant it.
OBJECT = "kubetune/object"


class PlainObject(dict):
    """An object of the user's in a parsed space (from :data:`OBJECT`): never a domain nor a grid,
    whatever its keys; its values are spaces."""


def _reads_as_domain(value: dict) -> bool:
    """Whether :func:`parse_space` would take the object ``value`` for a domain (or refuse it as one)."""
    if sum(1 for k in value if k in DOMAIN_NAMES) > 1:
        return True
    if len(value) != 1:
        return False
    ((name, args),) = value.items()
    if name == GRID_SEARCH:  # what tune.grid_search gives: a grid in Ray's SDK too
        return False
    return name in DOMAIN_NAMES or name == OBJECT or unknown_domain(name, args) is not None


def is_grid(value: Any) -> bool:
    """Whether ``value`` is a grid-search marker ``{"grid_search": [...]}``."""
    return isinstance(value, dict) and not isinstance(value, PlainObject) and len(value) == 1 and GRID_SEARCH in value


def _domain_from_spec(name: str, args: Any) -> Any:
    factory = _FACTORIES[name]
    if name == "choice" and isinstance(args, (list, tuple)):
        return choice(args)
    try:
        if isinstance(args, (list, tuple)):
            bound = inspect.signature(factory).bind(*args)
        elif isinstance(args, dict):
            bound = inspect.signature(factory).bind(**args)
        else:
            raise ValueError(f"arguments must be a list (positional) or an object (keyword), got {args!r}")
    except TypeError as exc:
        params = ", ".join(inspect.signature(factory).parameters)
        raise ValueError(f"bad arguments {args!r} for {name}({params}): {exc}") from None
    return factory(*bound.args, **bound.kwargs)


def space_warnings(spec: Any, path: str = "config") -> list[str]:
    """Likely mistakes in a JSON parameter space that :func:`parse_space` accepts as constants: a
    one-key object whose key is close to a domain name (``{"loguniforn": [1e-4, 0.1]}``).

    Returns:
        One message per suspicious object, starting with its path.
    """
    found: list[str] = []
    if isinstance(spec, dict):
        if len(spec) == 1:
            ((name, _),) = spec.items()
            close = difflib.get_close_matches(str(name), sorted(DOMAIN_NAMES), n=1, cutoff=0.8)
            if name not in DOMAIN_NAMES and close:
                found.append(f"{path}: {{{name!r}: ...}} is taken as a constant; did you mean the {close[0]} domain?")
        for key, value in spec.items():
            found += space_warnings(value, f"{path}.{key}")
    elif isinstance(spec, (list, tuple)):
        for i, value in enumerate(spec):
            found += space_warnings(value, f"{path}[{i}]")
    return found


def parse_space(spec: Any, path: str = "config") -> Any:
    """Turn a JSON parameter space (``spec.config``) into one holding :class:`Domain` objects.

    The root (``path`` ``"config"``, the default) is an object of parameters, never a domain. Below
    it, a one-key dict whose key is in :data:`DOMAIN_NAMES` is a domain; its value is
    Ray's positional arguments as a list (``{"quniform": [0, 1, 0.1]}``) or its
    keyword arguments as an object (``{"uniform": {"lower": 0, "upper": 1}}``);
    ``choice`` takes the categories list itself. ``grid_search`` stays a
    ``{"grid_search": [...]}`` dict whose values are parsed as spaces in turn (a value may be
    a domain or a nested ``grid_search``, as in Ray). Other dicts and
    lists are walked recursively; ``{"kubetune/object": {...}}`` (:data:`OBJECT`) is the object it
    holds (a :class:`PlainObject`), walked the same way but never a domain or grid itself; anything
    else is a constant. Domain objects
    already present (SDK input) are kept as they are. The input is not modified.

    Args:
        spec: the parameter space, JSON-shaped.
        path: name of the root used in error messages.

    Returns:
        A new structure of the same shape with domains in place of their JSON form.

    Raises:
        ValueError: a domain has bad arguments, a dict has two or more domain keys
            (``{"uniform": ..., "choice": ...}``), or a one-key dict names a distribution kubetune
            has not (:func:`unknown_domain`: ``{"gaussian": [0, 1]}``); the message starts with its path,
            e.g. ``"config.optimizer.lr: loguniform: log scale needs lower > 0, ..."``.
    """
    if isinstance(spec, PlainObject) or (
        isinstance(spec, dict) and len(spec) == 1 and isinstance(spec.get(OBJECT), dict)
    ):
        fields = spec if isinstance(spec, PlainObject) else spec[OBJECT]
        return PlainObject({k: parse_space(v, f"{path}.{k}") for k, v in fields.items()})
    if isinstance(spec, dict):
        domains = sorted(k for k in spec if k in DOMAIN_NAMES)
        if len(domains) > 1 and path != "config":
            raise ValueError(f"{path}: one object holds several domains ({', '.join(domains)}); give each its own key")
        if len(spec) == 1 and path != "config":
            name, args = next(iter(spec.items()))
            problem = unknown_domain(name, args)
            if problem:
                raise ValueError(f"{path}: {problem}")
            if name in DOMAIN_NAMES:
                try:
                    domain = grid_search(args) if name == GRID_SEARCH else _domain_from_spec(name, args)
                except ValueError as exc:
                    raise ValueError(f"{path}: {name}: {exc}") from None
                if name == GRID_SEARCH:  # a grid value is a space of its own: constants, domains, grids
                    return {
                        GRID_SEARCH: [
                            parse_space(v, f"{path}.{GRID_SEARCH}[{i}]") for i, v in enumerate(domain[GRID_SEARCH])
                        ]
                    }
                return domain
        return {k: parse_space(v, f"{path}.{k}") for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(parse_space(v, f"{path}[{i}]") for i, v in enumerate(spec))
    return spec


def space_spec(
    space: Any, path: str = "config", on_function: Callable[[Function], Any] | None = None, values: bool = False
) -> Any:
    """Turn an SDK parameter space (with :class:`Domain` objects) into its JSON form, ``spec.config``.

    The inverse of :func:`parse_space`: domains become ``{name: [args]}``, tuples lists, NumPy
    scalars Python numbers; dict keys must be strings. ``{"grid_search": [...]}`` is a grid, as in Ray.
    Any other dict below the root with one key named like a domain (``{"choice": "adam"}``,
    ``{"uniform": tune.uniform(-5, -1)}``, ``{"normal": [0, 1]}``), or with several, is the user's
    object, written as ``{"kubetune/object": {...}}`` (:data:`OBJECT`) so that the operator does not
    read it as a domain.

    Args:
        space: the parameter space.
        path: name of the root in error messages.
        on_function: gives the JSON that stands for a ``sample_from`` function (the SDK pickles it
            for the trial pod, :class:`kubetune.shipping.FunctionPickles`).
        values: ``space`` holds values only (a point of ``points_to_evaluate``, which the operator
            reads as values): objects are written as they are.

    Raises:
        ValueError: a ``sample_from`` function without ``on_function`` (user code the operator does not
            run), a non-string key, or a value JSON cannot hold (the message gives its path and
            suggests ``with_parameters`` for large objects).
    """
    if isinstance(space, Function):
        if on_function is None:
            raise ValueError(
                f"{path}: sample_from is user code, which the operator does not run: give the space "
                "to kubetune.run or Tuner, which ship it to the trial pods, or use a built-in domain"
            )
        return on_function(space)
    if isinstance(space, Domain):
        return space.to_spec()
    if isinstance(space, dict):
        bad = [k for k in space if not isinstance(k, str)]
        if bad:
            raise ValueError(f"{path}: keys must be strings, got {bad[0]!r}")
        encoded = {k: space_spec(v, f"{path}.{k}", on_function, values) for k, v in space.items()}
        return {OBJECT: encoded} if not values and path != "config" and _reads_as_domain(space) else encoded
    if isinstance(space, (list, tuple)):
        return [space_spec(v, f"{path}[{i}]", on_function, values) for i, v in enumerate(space)]
    if space is None or isinstance(space, str):
        return space
    for kind in (bool, int, float):  # subclasses too (numpy.float64): plain Python numbers
        if isinstance(space, kind):
            return kind(space)
    item = getattr(space, "item", None)  # a NumPy scalar
    if callable(item) and getattr(space, "shape", None) == ():
        return item()
    raise ValueError(
        f"{path}: a {type(space).__name__} cannot be written to spec.config (JSON); pass large or "
        "custom objects with tune.with_parameters"
    )
