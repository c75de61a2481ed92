"""Loading the user's trainable in the trial pod, from the Experiment's ``spec.trainable``.

Called by :mod:`kubetune.runtime.loop` once per attempt. Exactly one source is set by the operator
(``kubetune.env``): an import path ``package.module:Name`` importable in the image, inline Python
``source`` plus the ``name`` it defines, or ``pickleURI``, a cloudpickled class or function the SDK
uploaded to object storage. Whatever is loaded goes through
:func:`kubetune.runtime.function_trainable.as_trainable_class` (classes as they are, functions wrapped).
"""

from __future__ import annotations

import importlib
import linecache
import sys
import types
from typing import Any
from urllib.parse import urlparse

from kubetune.env import TrialEnv
from kubetune.storage import Storage, open_storage

#: Module name the inline source runs as; registered in ``sys.modules`` so pickles can refer to it.
SOURCE_MODULE = "kubetune_trainable_source"
_SOURCE_FILENAME = "<kubetune trainable source>"


def import_entrypoint(entrypoint: str) -> Any:
    """Return the object named by ``"package.module:Name"`` (``Name`` may be dotted: ``Outer.Inner``).

    Raises:
        ValueError: ``entrypoint`` lacks the ``:``.
        ImportError: the module does not import.
        AttributeError: the module has no such name.
    """
    module_name, sep, qualname = entrypoint.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"trainable entrypoint must look like 'package.module:Name', got {entrypoint!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def exec_source(source: str, name: str) -> Any:
    """Run ``source`` as a fresh module :data:`SOURCE_MODULE` and return its global ``name``.

    The source is registered with ``linecache`` so tracebacks (and ``error.txt``) show its lines.

    Raises:
        SyntaxError: the source does not compile.
        NameError: the source does not define ``name``.
    """
    module = types.ModuleType(SOURCE_MODULE)
    module.__file__ = _SOURCE_FILENAME
    linecache.cache[_SOURCE_FILENAME] = (len(source), None, source.splitlines(True), _SOURCE_FILENAME)
    sys.modules[SOURCE_MODULE] = module
    exec(compile(source, _SOURCE_FILENAME, "exec"), module.__dict__)  # noqa: S102 - the user's own code
    if name not in module.__dict__:
        raise NameError(f"the trainable source defines no {name!r}")
    return module.__dict__[name]


def load_pickle(storage: Storage, uri: str) -> Any:
    """Return the object the SDK pickled at ``uri`` (format: :func:`kubetune.shipping.loads`).

    Raises:
        FileNotFoundError: nothing at ``uri``.
        RuntimeError: the pickle was made by another Python minor version (the message names both).
    """
    from kubetune.shipping import loads

    return loads(storage.get_bytes(uri))


def load_trainable_class(env: TrialEnv, storage: Storage) -> type:
    """Load the trial's trainable and return it as a ``kubetune.Trainable`` subclass.

    Raises:
        ValueError: as :func:`load_trainable`.
    """
    from kubetune.runtime.function_trainable import as_trainable_class

    return as_trainable_class(load_trainable(env, storage))


def load_trainable(env: TrialEnv, storage: Storage) -> Any:
    """Load the trial's trainable as the user wrote it: a ``Trainable`` subclass or a function.

    Args:
        env: the trial environment; exactly one of ``entrypoint``, ``source`` (with ``name``),
            ``pickle_uri`` must be set.
        storage: the trial's storage, reused for ``pickle_uri`` when the scheme matches.

    Raises:
        ValueError: none or several trainable sources are set, or ``source`` comes without ``name``.
    """
    given = [
        key
        for key, value in (("entrypoint", env.entrypoint), ("source", env.source), ("pickleURI", env.pickle_uri))
        if value
    ]
    if len(given) != 1:
        raise ValueError(f"exactly one of entrypoint, source, pickleURI must be set; got {given or 'none'}")
    if env.entrypoint:
        obj = import_entrypoint(env.entrypoint)
    elif env.source:
        if not env.name:
            raise ValueError("an inline trainable source needs the name it defines")
        obj = exec_source(env.source, env.name)
    else:
        assert env.pickle_uri is not None
        if urlparse(env.pickle_uri).scheme != storage.scheme:
            storage = open_storage(env.pickle_uri, env.storage_endpoint, env.storage_region)
        obj = load_pickle(storage, env.pickle_uri)
    return obj
