"""Ray's path ``ray.air.integrations.wandb`` (Ray 2.x): :func:`setup_wandb`, which the user's trainable calls in the
trial pod to track the trial in Weights & Biases, and :class:`WandbLoggerCallback`, Ray's driver-side logger, which
the Experiment's driver pod calls (``kubetune.runtime.driver``) for every trial.

``from kubetune.integrations.wandb import setup_wandb`` is ``from ray.air.integrations.wandb import setup_wandb``
under kubetune's import rule (``ray.air.X`` is ``kubetune.X``). ``setup_wandb`` keeps Ray's signature, defaults and
semantics (``ray/air/integrations/wandb.py``): the run's id is the trial's id, its name the trial's name, its group
the experiment's name, its config the trial's config; only rank 0 of a gang gets a run. What differs
(``docs/ray-tune.md``, "Trackers"): no API key is asked for when W&B runs offline or disabled (``WANDB_MODE`` or
``mode=``), since W&B needs none then; a gang's other ranks get W&B's own no-op run (``wandb.init(mode="disabled")``)
where Ray returns ``RunDisabled``, which newer W&B releases keep only as a stub whose methods are None; Ray's
``WANDB_*_HOOK`` variables are not read; the run is finished when the trial attempt ends (exit code 1 when the
trainable raised). W&B is imported only when ``setup_wandb`` is called: the trial image needs ``wandb``,
``pip install 'kubetune[wandb]'``.
"""

from __future__ import annotations

import json
import os
import warnings
from numbers import Number
from typing import Any

from kubetune.logger import LoggerCallback
from kubetune.resultkeys import flatten
from kubetune.runtime.attempt_end import at_attempt_end
from kubetune.runtime.context import get_context

__all__ = ["WandbLoggerCallback", "setup_wandb"]

#: Ray's environment variables: the API key (W&B's own), the default project and group.
WANDB_ENV_VAR = "WANDB_API_KEY"
WANDB_PROJECT_ENV_VAR = "WANDB_PROJECT_NAME"
WANDB_GROUP_ENV_VAR = "WANDB_GROUP_NAME"
#: W&B modes that reach no server, so need no API key.
_KEYLESS_MODES = ("offline", "disabled", "dryrun")


def setup_wandb(
    config: dict | None = None,
    api_key: str | None = None,
    api_key_file: str | None = None,
    rank_zero_only: bool = True,
    **kwargs: Any,
) -> Any:
    """Start this trial's W&B run and return it (a ``wandb.Run``), as Ray 2.x's ``setup_wandb``.

    Called in the trial pod by the user's function trainable (``run = setup_wandb(config, project="p")``, then
    ``run.log({...})`` or ``wandb.log({...})``) or ``Trainable.setup``. ``wandb.init`` is called with Ray's
    arguments: ``id`` the trial's id (its Trial's name), ``name`` the trial's name, ``group`` the experiment's name,
    ``project`` from ``WANDB_PROJECT_NAME`` when not given, ``config`` the trial's config (values W&B cannot store
    as JSON become numbers or strings), ``resume=True``, ``reinit=True``, ``allow_val_change=True``; ``kwargs`` win
    over all of them (``trial_id`` and ``trial_name`` set the id and name). A ``"wandb"`` dict in ``config`` is Ray's
    deprecated way to pass them (a ``DeprecationWarning``): it is taken out of the config and passed on. With
    ``WANDB_MODE=offline`` the run is written under ``WANDB_DIR`` (default the working directory) for ``wandb sync``.
    The run is finished when the attempt ends, with exit code 1 when the trainable raised.

    Args:
        config: the trial's config, logged as the run's config.
        api_key: W&B's API key, set as ``WANDB_API_KEY``.
        api_key_file: a file whose first line is the API key (``~`` expanded).
        rank_zero_only: on a gang (``resourcesPerTrial.workers``), only rank 0 starts a run; the other ranks get W&B's
            disabled run, whose methods do nothing. False: every rank starts one.
        **kwargs: passed to ``wandb.init``, over the defaults above.

    Returns:
        The run ``wandb.init`` returned.

    Raises:
        RuntimeError: W&B is not installed.
        ValueError: both ``api_key`` and ``api_key_file`` given, or (online) no API key in the arguments,
            ``WANDB_API_KEY`` or W&B's stored login (Ray's errors).
        OSError: ``api_key_file`` cannot be read.
    """
    try:
        import wandb
    except ImportError as exc:
        raise RuntimeError("wandb was not found: the trial image needs it, pip install 'kubetune[wandb]'") from exc

    context = get_context()
    if rank_zero_only and context.get_world_rank() != 0:
        return wandb.init(mode="disabled")
    init_kwargs: dict[str, Any] = {
        "trial_id": kwargs.get("trial_id") or context.get_trial_id(),
        "trial_name": kwargs.get("trial_name") or context.get_trial_name(),
        "group": kwargs.get("group") or context.get_experiment_name(),
    }
    init_kwargs.update(kwargs)
    trial_id, trial_name = init_kwargs.pop("trial_id"), init_kwargs.pop("trial_name")
    if init_kwargs["group"] is None:  # outside a trial: WANDB_GROUP_NAME or the config's group, below, decide
        del init_kwargs["group"]

    config = dict(config or {})
    from_config = dict(config.pop("wandb", None) or {})
    if from_config:
        warnings.warn(
            "Passing a `wandb` key in the config dict is deprecated and will raise an error in the future. Please "
            "pass the actual arguments to `setup_wandb()` instead.",
            DeprecationWarning,
            stacklevel=2,
        )
    api_key_file = api_key_file or from_config.pop("api_key_file", None)
    api_key = api_key or from_config.pop("api_key", None)
    mode = init_kwargs.get("mode") or from_config.get("mode") or os.environ.get("WANDB_MODE")
    _set_api_key(wandb, api_key_file and os.path.expanduser(api_key_file), api_key, mode)
    from_config["project"] = from_config.get("project") or os.environ.get(WANDB_PROJECT_ENV_VAR)
    from_config["group"] = from_config.get("group") or os.environ.get(WANDB_GROUP_ENV_VAR)

    arguments: dict[str, Any] = {
        "id": trial_id,
        "name": trial_name,
        "resume": True,
        "reinit": True,
        "allow_val_change": True,
        "config": _loggable(config),
        **from_config,
        **init_kwargs,
    }
    run = wandb.init(**arguments)
    at_attempt_end(_RunFinisher(run))
    return run


def _set_api_key(wandb: Any, api_key_file: str | None, api_key: str | None, mode: str | None) -> None:
    """Set ``WANDB_API_KEY`` from the key or its file, or check W&B has one (Ray's rule; none needed offline)."""
    if api_key_file:
        if api_key:
            raise ValueError("Both WandB `api_key_file` and `api_key` set.")
        with open(api_key_file) as fp:
            api_key = fp.readline().strip()
    if api_key:
        os.environ[WANDB_ENV_VAR] = api_key
        return
    if os.environ.get(WANDB_ENV_VAR) or (mode or "").lower() in _KEYLESS_MODES:
        return
    try:
        if wandb.login(prompt=False, verify=False):  # a stored login (`wandb login`, .netrc), without asking the server
            return
    except TypeError:  # W&B before login(prompt=...): Ray's check
        wandb.ensure_configured()
        if wandb.api.api_key:
            return
    except Exception:  # noqa: BLE001 - W&B's own errors when there is no login: the error below says what to do
        pass
    raise ValueError(
        f"No WandB API key found. Either set the {WANDB_ENV_VAR} environment variable, pass `api_key` or "
        "`api_key_file` to setup_wandb(), run `wandb login` in the image, or set WANDB_MODE=offline"
    )


def _loggable(value: Any) -> Any:
    """``value`` with what W&B cannot store as JSON replaced by a number or a string (Ray's ``_clean_log``)."""
    if isinstance(value, dict):
        return {key: _loggable(item) for key, item in value.items()}
    if isinstance(value, (list, set)):
        return [_loggable(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_loggable(item) for item in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        text = str(value)
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


class _RunFinisher:
    """Finishes a W&B run when the attempt ends (exit code 1 when it failed; nothing when it is finished already) and
    tears W&B's service down, which writes what it holds."""

    def __init__(self, run: Any):
        self.run = run

    def __call__(self, failed: bool) -> None:
        import wandb

        self.run.finish(exit_code=1 if failed else 0)
        # finish() returns before W&B's service has written the run's last records (offline: its .wandb file); its
        # teardown waits for them, which W&B's exit handler does too, but a gang's pod leaves with os._exit, past it
        wandb.teardown()

    def __repr__(self) -> str:
        return f"W&B run {getattr(self.run, 'id', '?')}"


class WandbLoggerCallback(LoggerCallback):
    """Ray's ``WandbLoggerCallback``: one W&B run per trial, logged from the Experiment's driver pod.

    As Ray's (``ray/air/integrations/wandb.py``): ``setup`` sets the API key (``api_key`` or ``api_key_file``, else
    ``WANDB_API_KEY`` or W&B's stored login; none asked for offline), takes the project from ``WANDB_PROJECT_NAME``
    when not given (``ValueError`` without one) and the group from ``WANDB_GROUP_NAME``; ``log_trial_start`` starts the
    trial's run with ``id`` the trial's id, ``name`` ``str(trial)``, ``group`` the experiment's name when none is
    given, ``config`` the trial's config (without ``callbacks``, ``excludes``, and what W&B cannot store as JSON made a
    number or a string); ``log_trial_result`` logs the flattened result at ``step=training_iteration``, leaving out
    ``done``, ``should_checkpoint``, ``excludes``, ``config`` (unless ``log_config``) and what is not a number or a W&B
    media value, and puts Ray's ``AUTO_CONFIG_KEYS`` (``trial_id``, ``hostname``, ``pid``, ...) in the run's config;
    ``log_trial_end`` finishes the run. ``kwargs`` go to ``wandb.init`` over those arguments.

    What differs (docs/ray-tune.md, the ``WandbLoggerCallback`` row): Ray starts one logging process per trial, as
    W&B expects; the driver pod holds every trial's run in its one process (``reinit="create_new"``, W&B's way since
    0.19.10). Ray passes ``resume=False``; here ``resume="allow"``, so a driver pod that took over from one that died
    starts the runs its predecessor left open again under their ids (online, W&B resumes each; offline, each pod
    writes a folder of its own for ``wandb sync``), and logs again the results of an event the predecessor handled but
    had not saved its place after (at least once, as every driver-pod callback). ``upload_checkpoints`` is refused
    (``ValueError``): a checkpoint lives in the experiment's storage, not in a folder of the driver pod. W&B writes
    under ``dir=`` or ``WANDB_DIR``, else the driver pod's working directory, which goes with the pod: offline, give a
    ``dir`` on a volume to ``wandb sync`` from. The driver pod's image (the trial image) needs ``wandb``:
    ``pip install 'kubetune[wandb]'``.

    Args:
        project: the W&B project.
        group: the W&B group; None: ``WANDB_GROUP_NAME``, else the experiment's name.
        api_key_file: a file holding the API key.
        api_key: the API key.
        excludes: result keys (and config keys) not to log.
        log_config: log the result's ``config`` with each result.
        upload_checkpoints: refused when True (see above).
        save_checkpoints: Ray's older name of ``upload_checkpoints``.
        upload_timeout: Ray's seconds to wait for uploads at the end (each run's ``finish`` waits for its own here).
        video_kwargs: passed to ``wandb.Video`` by Ray for arrays it turns into videos; kept for the signature.
        image_kwargs: passed to ``wandb.Image`` by Ray for arrays it turns into images; kept for the signature.
        **kwargs: passed to ``wandb.init``.

    Raises:
        ValueError: ``upload_checkpoints`` (or ``save_checkpoints``) is True.
    """

    #: Result keys never logged (Ray's).
    _exclude_results = ["done", "should_checkpoint"]
    #: Result keys put in the run's config instead of its history (Ray's).
    AUTO_CONFIG_KEYS = ["trial_id", "experiment_tag", "node_ip", "experiment_id", "hostname", "pid", "date"]

    def __init__(
        self,
        project: str | None = None,
        group: str | None = None,
        api_key_file: str | None = None,
        api_key: str | None = None,
        excludes: list[str] | None = None,
        log_config: bool = False,
        upload_checkpoints: bool = False,
        save_checkpoints: bool = False,
        upload_timeout: int = 1800,
        video_kwargs: dict | None = None,
        image_kwargs: dict | None = None,
        **kwargs: Any,
    ):
        if save_checkpoints:
            warnings.warn(
                "`save_checkpoints` is deprecated. Use `upload_checkpoints` instead.", DeprecationWarning, stacklevel=2
            )
            upload_checkpoints = True
        if upload_checkpoints:
            raise ValueError(
                "upload_checkpoints=True is not supported by kubetune: each trial's checkpoints are in the "
                "experiment's storage, not in a folder of the driver pod; log them from the trainable "
                "(setup_wandb, then run.log_artifact)"
            )
        self.project = project
        self.group = group
        self.api_key_file = api_key_file
        self.api_key = api_key
        self.excludes = excludes or []
        self.log_config = log_config
        self.upload_checkpoints = False
        self.upload_timeout = upload_timeout
        self.video_kwargs = video_kwargs or {}
        self.image_kwargs = image_kwargs or {}
        self.kwargs = kwargs
        self._runs: dict[str, tuple[Any, list[str]]] = {}

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """Set the API key and pick the project and group, as Ray's ``setup``.

        Raises:
            RuntimeError: W&B is not installed in the driver pod's image.
            ValueError: no project is named; both ``api_key`` and ``api_key_file``; online without a key.
        """
        try:
            import wandb
        except ImportError as exc:
            raise RuntimeError(
                "wandb was not found: the driver pod's image (the trial image) needs it, pip install 'kubetune[wandb]'"
            ) from exc
        mode = self.kwargs.get("mode") or os.environ.get("WANDB_MODE")
        _set_api_key(wandb, self.api_key_file and os.path.expanduser(self.api_key_file), self.api_key, mode)
        self.project = self.project or os.environ.get(WANDB_PROJECT_ENV_VAR)
        if not self.project:
            raise ValueError(
                f"Please pass the project name as argument or through the {WANDB_PROJECT_ENV_VAR} environment variable."
            )
        self.group = self.group or os.environ.get(WANDB_GROUP_ENV_VAR)
        self._runs = {}

    def log_trial_start(self, trial: Any) -> None:
        import wandb

        if trial.trial_id in self._runs:  # Ray keeps a trial's logger when the trial is restarted
            return
        config = {key: value for key, value in trial.config.items() if key != "callbacks" and key not in self.excludes}
        exclude = self._exclude_results + self.excludes + ([] if self.log_config else ["config"])
        arguments: dict[str, Any] = {
            "id": trial.trial_id,
            "name": str(trial),
            "resume": "allow",
            "reinit": "create_new",
            "allow_val_change": True,
            "group": self.group or trial.experiment_dir_name,
            "project": self.project,
            "config": _loggable(config),
            **self.kwargs,
        }
        self._runs[trial.trial_id] = (wandb.init(**arguments), exclude)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial.trial_id not in self._runs:
            self.log_trial_start(trial)
        run, exclude = self._runs[trial.trial_id]
        log, config_update = _split_result(result, exclude, self.AUTO_CONFIG_KEYS)
        run.config.update(config_update, allow_val_change=True)
        run.log(log, step=log.get("training_iteration"))

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        run, _ = self._runs.pop(trial.trial_id, (None, None))
        if run is not None:
            run.finish()  # Ray's logging process calls wandb.finish(), with no exit code, errors or not

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        """Finish the runs of trials that never ended (Ray waits for its logging processes here)."""
        for trial_id in list(self._runs):
            self._runs.pop(trial_id)[0].finish()


def _split_result(result: dict, exclude: list[str], to_config: list[str]) -> tuple[dict, dict]:
    """Ray's ``_handle_result``: ``(what to log, what to put in the run's config)`` of a result, flattened with
    ``/``; a key is left out (or put in the config) when it or a key it is nested under is listed; what is logged is a
    number (a one-element array's), a W&B media value or a list of images or videos."""
    import wandb

    def listed(key: str, keys: list[str]) -> bool:
        return any(key == item or key.startswith(item + "/") for item in keys)

    config_update = _loggable(dict(result.get("config") or {}))
    log = {}
    for key, value in flatten(result).items():
        if listed(key, exclude):
            continue
        if listed(key, to_config):
            config_update[key] = _loggable(value)
            continue
        if getattr(value, "size", None) == 1 and callable(getattr(value, "item", None)):
            value = value.item()  # a one-element numpy array
        if isinstance(value, (Number, wandb.sdk.data_types.base_types.wb_value.WBValue)):
            log[key] = value
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], (wandb.Image, wandb.Video)):
            log[key] = value
    config_update.pop("callbacks", None)
    return log, config_update
