"""kubetune: Ray Tune's API for hyperparameter tuning on Kubernetes, one pod per trial.

``import kubetune as tune`` gives what a Ray Tune script imports from ``ray.tune``: the class API
:class:`Trainable`, the function API (:func:`report`, :func:`get_checkpoint`, :class:`Checkpoint`,
:func:`checkpoint_dir`, ``track.log``), the search space (``uniform``, ``choice``,
``grid_search``, ...), and the SDK (``run``, ``Tuner``, ``with_parameters``, ``ExperimentAnalysis``,
``tune.schedulers``, ``tune.search``, ``tune.stopper``), which is loaded on first use so that a
trial pod, which needs only the runtime, does not import it. Ray names kubetune cannot honour
raise an error that says why and what to use instead (``docs/ray-tune.md``).

The package's layout shows where code runs: ``kubetune.runtime`` runs in the trial pod (the process
``python -m kubetune.runtime``, the Trainable and function API it runs, the collector client);
``kubetune.sdk`` runs on the user's machine (``tune.run``, ``Tuner``, the analysis, the status table, the
``kubetune`` command); the modules at the top are the contracts both sides (and the operator) share
(storage, the trial environment, result keys, limits, shipping, checkpoints) and Ray's public paths
(``kubetune.schedulers``, ``kubetune.stopper``, ``kubetune.tuner``, ``kubetune.analysis``,
``kubetune.trainable``, ``kubetune.session``, ``kubetune.track``, ``kubetune.search``, ``kubetune.suggest``,
``kubetune.result``, ``kubetune.logger``, ``kubetune.utils`` with ``validate_save_restore`` and ``wait_for_gpu``,
``kubetune.utils.mock_trainable``, the trial's callbacks of ``kubetune.integration.xgboost``,
``kubetune.integration.lightgbm`` and ``kubetune.integration.keras``, and Ray 2.x's ``ray.air.integrations``:
the trackers ``kubetune.integrations.mlflow`` and ``kubetune.integrations.wandb``, and Keras's callback
``kubetune.integrations.keras``).
"""

import importlib
import importlib.abc
import sys

from kubetune import track
from kubetune.algorithm_spec import unsupported
from kubetune.checkpoint_layout import Checkpoint
from kubetune.runtime.function_trainable import as_trainable_class, wrap_function
from kubetune.runtime.session import (
    checkpoint_dir,
    get_checkpoint,
    get_trial_dir,
    get_trial_id,
    get_trial_name,
    is_session_enabled,
    report,
)
from kubetune.runtime.trainable import Trainable
from kubetune.search import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)

#: SDK names, imported when first used: name → module.
_LAZY = {
    "run": "kubetune.sdk.tuner",
    "Callback": "kubetune.callback",
    "run_experiments": "kubetune.sdk.tuner",
    "Tuner": "kubetune.sdk.tuner",
    "TuneConfig": "kubetune.sdk.tuner",
    "RunConfig": "kubetune.sdk.tuner",
    "CheckpointConfig": "kubetune.sdk.tuner",
    "FailureConfig": "kubetune.sdk.tuner",
    "TuneError": "kubetune.sdk.tuner",
    "with_parameters": "kubetune.shipping",
    "with_resources": "kubetune.shipping",
    "ExperimentAnalysis": "kubetune.sdk.analysis",
    "ResultGrid": "kubetune.sdk.analysis",
    "Result": "kubetune.sdk.analysis",
    "Stopper": "kubetune.sdk.stopper",
    "CLIReporter": "kubetune.sdk.progress",
    "JupyterNotebookReporter": "kubetune.sdk.progress",
    "ProgressReporter": "kubetune.sdk.progress",
    "PlacementGroupFactory": "kubetune.resources",
    "get_context": "kubetune.runtime.context",
    "get_trial_resources": "kubetune.runtime.context",
    "TuneContext": "kubetune.runtime.context",
    "ResumeConfig": "kubetune.sdk.resume",
    "create_scheduler": "kubetune.sdk.factories",
    "create_searcher": "kubetune.sdk.factories",
}
#: Submodules reached as attributes, as ``tune.schedulers.ASHAScheduler``, → their module (``suggest``: Ray 1.x's
#: ``search``).
_SUBMODULES = {
    "schedulers": "kubetune.schedulers",
    "stopper": "kubetune.stopper",
    "analysis": "kubetune.analysis",
    "tuner": "kubetune.tuner",
    "progress": "kubetune.sdk.progress",
    "suggest": "kubetune.suggest",
    "logger": "kubetune.logger",
    "callback": "kubetune.callback",
    "result": "kubetune.result",
    "utils": "kubetune.utils",
}
#: Ray names kubetune cannot honour: name → (why, what to use).
_UNSUPPORTED = {
    "Experiment": ("experiments are Kubernetes objects", "tune.run(...) with its arguments"),
    "register_trainable": ("trials import or unpickle the trainable itself", "pass the trainable to tune.run"),
    "register_env": ("there is no Ray registry", "create the environment in the trainable"),
    "SyncConfig": ("trials write to object storage themselves", "storage="),
}

__all__ = [
    "Checkpoint",
    "Trainable",
    "as_trainable_class",
    "checkpoint_dir",
    "get_checkpoint",
    "get_trial_dir",
    "get_trial_id",
    "get_trial_name",
    "is_session_enabled",
    "report",
    "track",
    "wrap_function",
    "choice",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "uniform",
    *_LAZY,
    *_SUBMODULES,
]

#: Ray's modules of other libraries' searchers and of schedulers kubetune has not, as a script imports them with
#: ``ray.tune`` replaced by ``kubetune`` → (the package, the Ray class the module holds).
_RAY_MODULES = {
    **{
        f"kubetune.{package}.{module}": (f"kubetune.{package}", name)
        for package in ("search", "suggest")
        for module, name in {
            "hyperopt": "HyperOptSearch",
            "bayesopt": "BayesOptSearch",
            "ax": "AxSearch",
            "hebo": "HEBOSearch",
            "nevergrad": "NevergradSearch",
            "zoopt": "ZOOptSearch",
            "skopt": "SkOptSearch",
            "dragonfly": "DragonflySearch",
            "sigopt": "SigOptSearch",
            "flaml": "BlendSearch",
        }.items()
    },
    "kubetune.schedulers.resource_changing_scheduler": ("kubetune.schedulers", "ResourceChangingScheduler"),
}


class _RayModules(importlib.abc.MetaPathFinder):
    """Importing one of :data:`_RAY_MODULES` raises ``ModuleNotFoundError`` with why kubetune has not its class
    and what to use instead (the class's own refusal); consulted after every other finder."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _RAY_MODULES:
            return None
        package, name = _RAY_MODULES[fullname]
        try:
            getattr(importlib.import_module(package), name)
        except NotImplementedError as exc:
            raise ModuleNotFoundError(f"No module named {fullname!r}: {exc}", name=fullname) from None
        return None


sys.meta_path.append(_RayModules())


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    elif name in _UNSUPPORTED:
        raise unsupported(name, *_UNSUPPORTED[name])
    else:
        raise AttributeError(f"module 'kubetune' has no attribute {name!r}")
    globals()[name] = value
    return value
