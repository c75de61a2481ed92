"""How the SDK's trainables and their large arguments travel from a script to the trial pods.

Owns the format of the pickles the SDK writes to object storage (:func:`dumps`/:func:`loads`: a
header naming the Python version, then cloudpickle's bytes), the choice between an import path and
a pickle (:func:`ship_trainable`), Ray's :func:`with_parameters` and :func:`with_resources`, Ray 0.8's ``loggers``
(:func:`with_loggers`), and
``sample_from`` functions, which run in the trial pod (:class:`FunctionPickles` on the client,
:func:`resolve_config` in the pod). Called by :mod:`kubetune.sdk.tuner` on the client and by
:mod:`kubetune.runtime` in the pod.

A ``sample_from`` function is pickled to ``<experiment storage>/sdk/functions/<sha256[:32]>.pkl``
and stands in ``spec.config`` as ``{"kubetune/pickled_function": "<uri>"}``, a constant to the
operator's searchers; the trial pod replaces it by the function's value before the trainable sees
the config, as Ray resolves ``sample_from`` after every other value. The first attempt reports the values it
drew (:func:`sampled_as_json`) and the operator gives them to the trial's later attempts, as Ray draws them once
per trial. A ``trial_name_creator`` travels the same way (:meth:`FunctionPickles.pickle`), named by
``spec.trialNameCreator.pickleURI``; the trial pod calls it (:mod:`kubetune.runtime.trial_name`).

``with_parameters`` objects are pickled one by one, content-addressed
(``<experiment storage>/sdk/parameters/<sha256[:32]>.pkl``) and uploaded only when absent, so the same
object is uploaded once however many trials or runs use it; the trainable itself carries their
URIs only, and each pod downloads an object the first time its trainable is set up.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import math
import os
import sys
import tempfile
from typing import Any, Callable

from kubetune.storage import Storage, join_uri

#: First bytes of an SDK pickle: ``b"kubetune-pickle python=3.12\n"`` then cloudpickle's bytes.
MAGIC = b"kubetune-pickle"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def dumps(obj: Any) -> bytes:
    """Cloudpickle ``obj`` behind a header naming this interpreter's Python version."""
    import cloudpickle

    return MAGIC + f" python={PYTHON}\n".encode() + cloudpickle.dumps(obj)


def loads(data: bytes) -> Any:
    """Unpickle what :func:`dumps` wrote (bytes without the header are read as plain cloudpickle).

    Raises:
        RuntimeError: the pickle was made by another Python minor version (cloudpickle's byte code
            does not travel between them); the message names both.
    """
    import cloudpickle

    if data.startswith(MAGIC):
        header, _, data = data.partition(b"\n")
        fields = dict(part.split("=", 1) for part in header.decode().split()[1:])
        made_by = fields.get("python")
        if made_by != PYTHON:
            raise RuntimeError(
                f"the trainable was pickled by Python {made_by} but this trial image runs Python "
                f"{PYTHON}: run the script with Python {PYTHON}, or use an image with Python "
                f"{made_by}"
            )
    return cloudpickle.loads(data)


#: Key of the JSON object that stands for a ``sample_from`` function in ``spec.config``.
FUNCTION_KEY = "kubetune/pickled_function"


def is_function(node: Any) -> bool:
    """Whether ``node`` (a value of ``spec.config``) stands for a pickled function: ``{FUNCTION_KEY: uri}``."""
    return isinstance(node, dict) and len(node) == 1 and FUNCTION_KEY in node


def holds_function(config: Any) -> bool:
    """Whether ``config`` (``spec.config``, or a part of it) holds a pickled function anywhere (:func:`is_function`)."""
    if isinstance(config, dict):
        return is_function(config) or any(holds_function(v) for v in config.values())
    return isinstance(config, list) and any(holds_function(v) for v in config)


def draws_for(config: Any, resolved: Any) -> bool:
    """Whether ``resolved`` is ``config`` with each pickled function replaced by a value, and nothing else changed:
    the values a trial pod reports for its config's ``sample_from`` functions (:func:`sampled_as_json`)."""
    if is_function(config):
        return True
    if isinstance(config, dict):
        return (
            isinstance(resolved, dict)
            and config.keys() == resolved.keys()
            and all(draws_for(v, resolved[k]) for k, v in config.items())
        )
    if isinstance(config, list):
        return (
            isinstance(resolved, list)
            and len(config) == len(resolved)
            and all(draws_for(a, b) for a, b in zip(config, resolved))
        )
    if type(config) in (int, float) and type(resolved) in (int, float):
        return config == resolved  # JSON may write 1.0 as 1
    return type(config) is type(resolved) and config == resolved


class FunctionPickles:
    """The ``sample_from`` functions of one run, pickled on the client and uploaded after every check.

    Args:
        base_uri: the experiment's SDK folder, ``<storage>/<namespace>/<experiment>/sdk``.
    """

    def __init__(self, base_uri: str):
        self.base_uri = base_uri
        self.pending: dict[str, bytes] = {}

    def marker(self, function: Any) -> dict:
        """Pickle ``function`` (a :class:`kubetune.search.sample.Function`); return its ``spec.config`` form."""
        return {FUNCTION_KEY: self.pickle(function.func)}

    def pickle(self, func: Callable | list | dict) -> str:
        """Pickle ``func`` (or a list of objects: the run's callbacks; or a dict's values: a searcher and its space) by
        value, its own modules' code included, for
        :meth:`upload`; return its URI."""
        data = _dumps_by_value(func)
        uri = join_uri(self.base_uri, "functions", hashlib.sha256(data).hexdigest()[:32] + ".pkl")
        self.pending[uri] = data
        return uri

    def upload(self, storage: Storage) -> None:
        """Upload the functions absent from storage."""
        for uri, data in self.pending.items():
            if not storage.exists(uri):
                storage.put_bytes(uri, data)


def resolve_config(config: Any, storage: Storage) -> Any:
    """In the trial pod: ``config`` with each pickled ``sample_from`` function replaced by its value.

    Returns ``config`` itself when it holds none.

    Raises:
        FileNotFoundError: a function's pickle is missing.
        RuntimeError: it was pickled by another Python minor version.
        ValueError: a function failed or functions depend on each other in a cycle.
    """
    from kubetune.search.sample import Function
    from kubetune.search.variants import resolve_sample_from

    found = False

    def load(node: Any) -> Any:
        nonlocal found
        if is_function(node):
            found = True
            return Function(loads(storage.get_bytes(node[FUNCTION_KEY])))
        if isinstance(node, dict):
            return {k: load(v) for k, v in node.items()}
        if isinstance(node, list):
            return [load(v) for v in node]
        return node

    loaded = load(config)
    return resolve_sample_from(loaded) if found else config


def sampled_as_json(config: Any) -> dict | None:
    """``config`` (resolved by :func:`resolve_config`) as the plain JSON a later attempt gets back equal, or None.

    numpy scalars become their Python values (as the collector's JSON would make them). None when a value
    would not come back the same from JSON (an object, a tuple, an array, a non-string key, NaN or an
    infinity, an integer beyond 64 bits), or the operator would refuse the config as a Trial's
    ``status.config``: nested deeper than :data:`kubetune.limits.MAX_DEPTH` or over
    :data:`kubetune.limits.MAX_FIELD_BYTES` of JSON.
    """
    from kubetune.limits import INT64, MAX_DEPTH, MAX_FIELD_BYTES, json_size

    class NotPlain(Exception):
        pass

    def plain(value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise NotPlain
        kind = type(value)
        if value is None or kind is bool or kind is str or (kind is int and -INT64 <= value < INT64):
            return value
        if kind is float and math.isfinite(value):
            return value
        if kind is dict and all(type(k) is str for k in value):
            return {k: plain(v, depth + 1) for k, v in value.items()}
        if kind is list:
            return [plain(v, depth + 1) for v in value]
        if getattr(value, "shape", None) == () and hasattr(value, "item") and type(value.item()) is not kind:
            return plain(value.item(), depth)  # a numpy scalar
        raise NotPlain

    try:
        converted = plain(config, 0)
    except NotPlain:
        return None
    if type(converted) is not dict or json_size(converted, MAX_FIELD_BYTES) > MAX_FIELD_BYTES:
        return None
    return converted


class Parameters:
    """The objects of one :func:`with_parameters` call: values on the client, URIs once uploaded.

    Pickling a ``Parameters`` keeps only the URIs, so a trainable never carries the objects.

    Attributes:
        names: the keyword names.
        uris: name → URI of its pickle, filled by :meth:`upload`.
    """

    _loaded: dict[str, Any] = {}  # URI → object, once per process (the pod)

    def __init__(self, values: dict[str, Any]):
        self.names = sorted(values)
        self._values: dict[str, Any] | None = dict(values)
        self.uris: dict[str, str] = {}

    def upload(self, storage: Storage, base_uri: str) -> int:
        """Upload each object absent from ``<base_uri>/parameters/``; return how many were uploaded."""
        if self.uris and all(uri.startswith(join_uri(base_uri, "parameters") + "/") for uri in self.uris.values()):
            return 0  # done for this experiment already
        uploaded = 0
        for name, value in (self._values or {}).items():
            data = dumps(value)
            uri = join_uri(base_uri, "parameters", hashlib.sha256(data).hexdigest()[:32] + ".pkl")
            if not storage.exists(uri):
                storage.put_bytes(uri, data)
                uploaded += 1
            self.uris[name] = uri
        return uploaded

    def load(self) -> dict[str, Any]:
        """Return name → object: the client's own values, or, in a pod, the objects downloaded (once).

        Raises:
            FileNotFoundError: an object is missing from storage.
        """
        if self._values is not None:
            return dict(self._values)
        from kubetune.env import STORAGE_ENDPOINT, STORAGE_REGION
        from kubetune.storage import open_storage

        storage = None
        for uri in self.uris.values():
            if uri not in Parameters._loaded:
                endpoint, region = os.environ.get(STORAGE_ENDPOINT), os.environ.get(STORAGE_REGION)
                storage = storage or open_storage(uri, endpoint, region)
                Parameters._loaded[uri] = loads(storage.get_bytes(uri))
        return {name: Parameters._loaded[uri] for name, uri in self.uris.items()}

    def __getstate__(self) -> dict:
        missing = set(self.names) - set(self.uris)
        if missing:
            raise TypeError(f"with_parameters objects {sorted(missing)} were not uploaded (kubetune.run uploads them)")
        return {"names": self.names, "uris": self.uris}

    def __setstate__(self, state: dict) -> None:
        self.names, self.uris, self._values = state["names"], state["uris"], None


def with_parameters(trainable: Any, **kwargs: Any) -> Any:
    """Return ``trainable`` receiving ``kwargs`` as extra arguments (Ray's ``tune.with_parameters``).

    A class trainable gets them in ``setup(config, **kwargs)``, a function as keyword arguments
    after ``config``. The objects go to the experiment's storage once (see the module docstring).

    Raises:
        TypeError: ``trainable`` is neither a class nor a function, or no keyword is given.
    """
    if not kwargs:
        raise TypeError("with_parameters needs at least one keyword argument")
    params = Parameters(kwargs)
    if inspect.isclass(trainable):

        class WithParameters(trainable):
            def setup(self, config):
                super().setup(config, **params.load())

        wrapped: Any = WithParameters
    elif callable(trainable):
        wrapped = _function_with(trainable, params)
    else:
        raise TypeError(f"with_parameters needs a Trainable class or a function, got {type(trainable).__name__}")
    wrapped.__name__ = wrapped.__qualname__ = getattr(trainable, "__name__", "trainable")
    return _wraps(wrapped, trainable, parameters=params)


def _function_with(fn: Callable, params: Parameters) -> Callable:
    """Wrap ``fn`` with the signature ``kubetune.runtime.function_trainable`` detects (checkpoint_dir kept)."""
    if "checkpoint_dir" in inspect.signature(fn).parameters:

        def inner(config, checkpoint_dir=None):
            return fn(config, checkpoint_dir=checkpoint_dir, **params.load())
    else:

        def inner(config):
            return fn(config, **params.load())

    return inner


def _wraps(wrapped: Any, trainable: Any, parameters: Parameters | None = None, resources: dict | None = None) -> Any:
    """Mark ``wrapped`` as a wrapper of ``trainable``: it carries the ``with_parameters`` objects and the
    ``with_resources`` of what it wraps, plus ``parameters``/``resources`` when given; return it."""
    carried = list(getattr(trainable, "_kubetune_parameters", []))
    wrapped._kubetune_wrapped = trainable
    wrapped._kubetune_parameters = carried + ([parameters] if parameters is not None else [])
    wrapped._kubetune_resources = getattr(trainable, "_kubetune_resources", None) if resources is None else resources
    return wrapped


def with_stopper(trainable: Any, stopper: Callable[[str, dict], bool]) -> type:
    """Return ``trainable`` as a class whose results ``stopper(trial_id, result)`` may end (``done``).

    A ``stop`` function or a ``Stopper`` of the user's own is user code, so it runs in the trial
    pod, each trial with its own copy: it sees that trial's results with Ray's auto-filled fields,
    as Ray calls it, and a True ends the trial at that result. State it shares between trials, or
    keeps across a retried attempt, is not shared (``docs/ray-tune.md``).

    Raises:
        TypeError: ``trainable`` is an import path (the wrapper needs the class itself).
    """
    if isinstance(trainable, str):
        raise TypeError("a stop function or Stopper of your own needs the trainable itself, not an import path")
    from kubetune.runtime.function_trainable import as_trainable_class

    base = as_trainable_class(trainable)

    class StoppedByUser(base):
        def train(self):
            result = super().train()
            if not result.get("done") and not result.get("__duplicate__") and stopper(self.trial_id, result):
                result["done"] = True
            return result

    StoppedByUser.__name__ = StoppedByUser.__qualname__ = base.__name__
    StoppedByUser._kubetune_code = [stopper if inspect.isfunction(stopper) else type(stopper)]
    return _wraps(StoppedByUser, trainable)


def with_loggers(trainable: Any, loggers: tuple) -> type:
    """Return ``trainable`` as a class that hands each of its results to a logger of each class of ``loggers``.

    Ray 0.8's ``tune.run(loggers=...)``: Ray makes a ``UnifiedLogger`` of them beside each trial, in the trial's own
    process, and calls its ``on_result`` with every result, ``flush`` and ``close`` when the trial stops; here that
    process is the trial pod (``kubetune.logger.UnifiedLogger`` over the trainable's ``logdir``, the pod's local
    folder: a file a logger writes there stays in the pod). Each attempt makes its own loggers.

    Raises:
        TypeError: ``trainable`` is an import path (the wrapper needs the class itself).
    """
    if isinstance(trainable, str):
        raise TypeError("a Logger class of your own needs the trainable itself, not an import path")
    from kubetune.logger import UnifiedLogger
    from kubetune.runtime.function_trainable import as_trainable_class

    base = as_trainable_class(trainable)
    classes = tuple(loggers)

    class LoggedByUser(base):
        def __init__(self, config=None, logger_creator=None, *args, **kwargs):
            if logger_creator is None:
                logdir = kwargs.get("logdir") or tempfile.mkdtemp(prefix="kubetune-loggers-")
                os.makedirs(logdir, exist_ok=True)

                def logger_creator(config):
                    return UnifiedLogger(config, logdir, loggers=classes)

            super().__init__(config, logger_creator, *args, **kwargs)

    LoggedByUser.__name__ = LoggedByUser.__qualname__ = base.__name__
    LoggedByUser._kubetune_code = list(classes)
    return _wraps(LoggedByUser, trainable)


def with_resources(trainable: Any, resources: Any) -> Any:
    """Return ``trainable`` with its trials' resources set (Ray's ``tune.with_resources``).

    Args:
        trainable: a class or function.
        resources: ``{"cpu": ..., "gpu": ..., "memory": ...}`` (memory in bytes or a Kubernetes quantity;
            Ray 0.8's ``extra_*`` for worker pods), a ``PlacementGroupFactory`` or a ``Resources``
            (:mod:`kubetune.resources`); a function of the config is not supported (all trials share one shape).

    Raises:
        TypeError: ``resources`` is a function, or of no such type.
        ValueError: a shape that cannot map (:func:`kubetune.resources.resources_per_trial`).
    """
    from kubetune.resources import PlacementGroupFactory, Resources, resources_per_trial

    if not isinstance(resources, (dict, PlacementGroupFactory, Resources)):
        raise TypeError(
            "with_resources needs a dict such as {'cpu': 2, 'gpu': 1} or a PlacementGroupFactory; per-config "
            "resources (a function of the config) are not supported: every trial has one shape"
        )
    resources_per_trial(resources)  # refused here, before any trial, when it cannot map
    if inspect.isclass(trainable):
        wrapped: Any = type(
            trainable.__name__,
            (trainable,),
            {"__qualname__": trainable.__qualname__, "__module__": trainable.__module__},
        )
    else:

        def wrapped(*args, **kwargs):
            return trainable(*args, **kwargs)

        wrapped.__signature__ = inspect.signature(trainable)
        wrapped.__name__ = wrapped.__qualname__ = getattr(trainable, "__name__", "trainable")
    return _wraps(wrapped, trainable, resources=resources)


def importable_path(obj: Any) -> str | None:
    """Return ``"module:QualName"`` when ``obj`` can be imported by name in a trial image, else None.

    That is when it is a module-level name of a module installed as a distribution (the trial image
    is built from the same requirements). Wrapped trainables, ``__main__`` and modules of a
    working tree return None: they travel by value.
    """
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname or hasattr(obj, "_kubetune_wrapped"):
        return None
    if module.split(".")[0] not in _installed_packages():
        return None
    return f"{module}:{qualname}"


def ship_trainable(trainable: Any, storage: Storage, base_uri: str) -> dict:
    """Return ``spec.trainable`` for ``trainable``, uploading what it needs.

    A string is an import path and used as is; an installed module-level name is referenced by
    import path; anything else (a script's class, a closure, a ``with_parameters`` wrapper) is
    cloudpickled by value to ``<base_uri>/trainable/<sha256[:32]>.pkl`` after its
    ``with_parameters`` objects are uploaded.

    Returns:
        ``{"entrypoint": ...}`` or ``{"pickleURI": ...}``.

    Raises:
        TypeError: ``trainable`` is not a class, a function or an import path.
    """
    if isinstance(trainable, str):
        return {"entrypoint": trainable}
    if not callable(trainable):
        raise TypeError(f"trainable must be a Trainable class, a function or 'module:Name', got {trainable!r}")
    path = importable_path(trainable)
    if path:
        return {"entrypoint": path}
    for params in getattr(trainable, "_kubetune_parameters", []):
        params.upload(storage, base_uri)
    data = _dumps_by_value(trainable)
    uri = join_uri(base_uri, "trainable", hashlib.sha256(data).hexdigest()[:32] + ".pkl")
    if not storage.exists(uri):
        storage.put_bytes(uri, data)
    return {"pickleURI": uri}


@functools.lru_cache(maxsize=1)
def _installed_packages() -> frozenset:
    """Top-level names of the installed distributions' packages (scanning them takes ~0.1 s: once)."""
    return frozenset(importlib.metadata.packages_distributions())


def _dumps_by_value(obj: Any) -> bytes:
    """:func:`dumps` with the code of ``obj``'s own (not installed) modules pickled by value."""
    import cloudpickle

    items = obj if isinstance(obj, list) else list(obj.values()) if isinstance(obj, dict) else [obj]
    modules = list(dict.fromkeys(m for item in items for m in _own_modules(item)))
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        return dumps(obj)
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


def _own_modules(trainable: Any) -> list:
    """The modules of ``trainable``, of what it wraps and of the user code it carries (a stopper)
    that are not installed (``__main__`` aside): their code travels by value."""
    installed = _installed_packages()
    modules = []
    while trainable is not None:
        for obj in (trainable, *getattr(trainable, "_kubetune_code", ())):
            module = sys.modules.get(getattr(obj, "__module__", None) or "")
            if (
                module is not None
                and module.__name__ != "__main__"
                and module not in modules
                and module.__name__.split(".")[0] not in installed
            ):
                modules.append(module)
        trainable = getattr(trainable, "_kubetune_wrapped", None)
    return modules
