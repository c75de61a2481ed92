"""Ray's path ``ray.air.integrations.mlflow`` (Ray 2.x): :func:`setup_mlflow`, which the user's trainable calls in
the trial pod to track the trial in MLflow, and :class:`MLflowLoggerCallback`, Ray's driver-side logger, which runs
in the Experiment's driver pod (``kubetune.runtime.driver``).

``from kubetune.integrations.mlflow import setup_mlflow`` is ``from ray.air.integrations.mlflow import setup_mlflow``
under kubetune's import rule (``ray.air.X`` is ``kubetune.X``). ``setup_mlflow`` keeps Ray's signature, defaults and
semantics (``ray/air/integrations/mlflow.py`` and the ``_MLflowLoggerUtil`` it calls): the trial's name is the
default MLflow experiment and run name, the config is logged as the run's parameters, only rank 0 of a gang gets a
run. What differs (``docs/ray-tune.md``, "Trackers"): the run it starts is ended when the trial attempt ends
(FINISHED, or FAILED when the trainable raised), where Ray leaves it running unless the trainable calls
``mlflow.end_run()``. MLflow's client is imported only when ``setup_mlflow`` is called: the trial image needs
``mlflow-skinny`` (or ``mlflow``), ``pip install 'kubetune[mlflow]'``.
"""

from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any

from kubetune.logger import LoggerCallback
from kubetune.resultkeys import flatten
from kubetune.runtime.attempt_end import at_attempt_end
from kubetune.runtime.context import get_context

__all__ = ["MLflowLoggerCallback", "setup_mlflow"]


class _NoopModule:
    """What ``setup_mlflow`` returns on a gang's other ranks: every attribute is itself, every call returns None
    (Ray's ``_NoopModule``), so ``mlflow.log_metric(...)`` does nothing there."""

    def __getattr__(self, item: str) -> _NoopModule:
        return _NoopModule()

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None


def setup_mlflow(
    config: dict | None = None,
    tracking_uri: str | None = None,
    registry_uri: str | None = None,
    experiment_id: str | None = None,
    experiment_name: str | None = None,
    tracking_token: str | None = None,
    artifact_location: str | None = None,
    run_name: str | None = None,
    create_experiment_if_not_exists: bool = False,
    tags: dict | None = None,
    rank_zero_only: bool = True,
) -> ModuleType | _NoopModule:
    """Start this trial's MLflow run and return the ``mlflow`` module, as Ray 2.x's ``setup_mlflow``.

    Called in the trial pod by the user's function trainable (``mlflow = setup_mlflow(config)``, then
    ``mlflow.log_metric(...)``) or ``Trainable.setup``. The MLflow experiment is the first that exists of:
    ``experiment_id`` (default the trial's id, which is its Trial's name), ``MLFLOW_EXPERIMENT_ID``,
    ``experiment_name`` (default the trial's name), ``MLFLOW_EXPERIMENT_NAME``; with
    ``create_experiment_if_not_exists`` the experiment of that name is created when none exists. The run is started
    as the active run of the calling thread (an active run already there is kept, as Ray), named ``run_name``, else
    the experiment name (so the trial's name by default), with ``tags``; ``config`` flattened with ``/``
    (``{"a": {"b": 1}}`` is parameter ``a/b``) is logged as its parameters. The run is ended when the attempt ends:
    FINISHED, or FAILED when the trainable raised (Ray leaves that to ``mlflow.end_run()``, which still works).

    Args:
        config: the trial's config, logged as the run's parameters (each value as its ``str``, at most MLflow's
            6,000 characters).
        tracking_uri: MLflow's tracking URI (``http://mlflow.mlflow.svc:5000``); None: ``MLFLOW_TRACKING_URI``, else
            MLflow's default, a store in the pod's working directory that goes with the pod.
        registry_uri: MLflow's model registry URI; None: MLflow's default.
        experiment_id: the id of an existing MLflow experiment; None: the trial's id.
        experiment_name: the name of the MLflow experiment; None: the trial's name.
        tracking_token: set as ``MLFLOW_TRACKING_TOKEN`` in the pod's environment (bearer token of the server).
        artifact_location: the artifact root of an experiment this call creates.
        run_name: the run's name; None: the experiment's name.
        create_experiment_if_not_exists: create the experiment named ``experiment_name`` when it does not exist.
        tags: the run's tags, ``{name: value}``.
        rank_zero_only: on a gang (``resourcesPerTrial.workers``), only rank 0 starts a run; the other ranks get a
            module whose every function does nothing. False: every rank starts one.

    Returns:
        The ``mlflow`` module with the run active in this thread, or the no-op module on a gang's rank > 0.

    Raises:
        RuntimeError: MLflow's client is not installed.
        ValueError: no experiment of that id or name exists (and ``create_experiment_if_not_exists`` is False, or no
            name is known), Ray's error.
        mlflow.exceptions.MlflowException: the tracking server refused a request or did not answer (after MLflow's
            retries).
    """
    try:
        import mlflow
        from mlflow.exceptions import MlflowException
    except ImportError as exc:
        raise RuntimeError(
            "mlflow was not found: the trial image needs MLflow's client, pip install 'kubetune[mlflow]' "
            "(mlflow-skinny) or mlflow"
        ) from exc

    context = get_context()
    if rank_zero_only and context.get_world_rank() != 0:
        return _NoopModule()
    experiment_id = experiment_id or context.get_trial_id()
    experiment_name = experiment_name or context.get_trial_name()

    if tracking_token:
        os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(registry_uri)
    chosen = _experiment(
        mlflow,
        MlflowException,
        experiment_id,
        experiment_name,
        artifact_location,
        create_experiment_if_not_exists,
    )

    active = mlflow.active_run()
    if active is None:
        active = mlflow.start_run(run_name=run_name or experiment_name, experiment_id=chosen, tags=tags or {})
        at_attempt_end(_RunCloser(mlflow.get_tracking_uri(), active.info.run_id))
    params = flatten(dict(config or {}))
    if params:
        mlflow.log_params(params)
    return mlflow


def _experiment(
    mlflow: ModuleType,
    mlflow_exception: type[Exception],
    experiment_id: str | None,
    experiment_name: str | None,
    artifact_location: str | None,
    create: bool,
) -> str:
    """The id of the experiment to log to, by Ray's rule (:func:`setup_mlflow`)."""
    if experiment_id is None:
        experiment_id = os.environ.get("MLFLOW_EXPERIMENT_ID")
    if experiment_id is not None:
        try:
            return mlflow.get_experiment(experiment_id=experiment_id).experiment_id
        except mlflow_exception:
            pass  # no such id (a trial's name is not an id): try the name
    if experiment_name is None:
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if experiment_name is not None:
        found = mlflow.get_experiment_by_name(name=experiment_name)
        if found is not None:
            return found.experiment_id
    if experiment_name and create:
        return mlflow.create_experiment(name=experiment_name, artifact_location=artifact_location)
    if create:
        raise ValueError(
            f"Experiment with the provided experiment_id: {experiment_id} does not exist and no experiment_name "
            "provided. At least one of these has to be provided."
        )
    raise ValueError(
        f"Experiment with the provided experiment_id: {experiment_id} or experiment_name: {experiment_name} does not "
        "exist. Please create an MLflow experiment and provide either its id or name."
    )


class _RunCloser:
    """Ends the run ``run_id`` of ``tracking_uri`` when the attempt ends, unless the trainable ended it already."""

    def __init__(self, tracking_uri: str, run_id: str):
        self.tracking_uri, self.run_id = tracking_uri, run_id

    def __call__(self, failed: bool) -> None:
        import mlflow

        status = "FAILED" if failed else "FINISHED"
        active = mlflow.active_run()
        if active is not None and active.info.run_id == self.run_id:  # the closing thread's own: MLflow's exit
            mlflow.end_run(status=status)  # handler, which ends its main thread's run, must not end it again
            return
        client = mlflow.MlflowClient(tracking_uri=self.tracking_uri)
        if client.get_run(self.run_id).info.status == "RUNNING":
            client.set_terminated(self.run_id, status=status)

    def __repr__(self) -> str:
        return f"MLflow run {self.run_id} at {self.tracking_uri}"


class MLflowLoggerCallback(LoggerCallback):
    """Ray's ``MLflowLoggerCallback``: one MLflow run per trial, logged from the Experiment's driver pod.

    As Ray's (``ray/air/integrations/mlflow.py``): ``setup`` points MLflow's client at ``tracking_uri`` and picks the
    experiment ``experiment_name`` (else ``MLFLOW_EXPERIMENT_ID``/``MLFLOW_EXPERIMENT_NAME``), created when missing;
    ``log_trial_start`` starts the trial's run, named ``str(trial)`` with the tag ``trial_name`` and ``tags``, and logs
    the config, flattened with ``/``, as its parameters (at the trial's end instead with ``log_params_on_trial_end``);
    ``log_trial_result`` logs every value of the result that ``float()`` takes, flattened, at step
    ``timesteps_total`` or else ``training_iteration``; ``log_trial_end`` ends the run FINISHED, or FAILED for a trial
    that failed. It runs in the driver pod (``kubetune.runtime.driver``), whose image needs MLflow's client
    (``kubetune[mlflow]``). A driver pod that replaces another finds each trial's run again by its ``trial_name`` tag
    instead of starting a second one; a result it is given twice (``kubetune.runtime.driver``'s at-least-once) is
    logged twice at the same step. Where Ray sends each result's metrics as it comes, the metrics of the results the
    driver handles in one step (one answer of the operator's, up to 1,000 events) go in ``log_batch`` calls of up to
    1,000 at the step's end (``on_step_end``), before the driver saves its place, and a trial's before its run ends.

    Args:
        tracking_uri: MLflow's tracking URI (a server the driver pod reaches: ``http://mlflow.mlflow.svc:5000``);
            None: ``MLFLOW_TRACKING_URI`` in the pod (``spec.template.env``).
        registry_uri: MLflow's model registry URI.
        experiment_name: the MLflow experiment of every trial.
        tags: tags of every trial's run.
        tracking_token: MLflow's tracking token (``MLFLOW_TRACKING_TOKEN`` in the driver pod).
        save_artifact: Ray uploads each trial's directory as the run's artifacts; refused: a trial's folder is in the
            experiment's storage, not on the driver's disk.
        log_params_on_trial_end: log the config when the trial ends instead of when it starts.

    Raises:
        ValueError: ``save_artifact=True``.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        registry_uri: str | None = None,
        experiment_name: str | None = None,
        tags: dict | None = None,
        tracking_token: str | None = None,
        save_artifact: bool = False,
        log_params_on_trial_end: bool = False,
    ):
        if save_artifact:
            raise ValueError(
                "save_artifact=True is not supported by kubetune: each trial's folder is in the experiment's storage "
                "(its result.json, progress.csv and checkpoints), not on the driver pod's disk; log files from the "
                "trainable with setup_mlflow() and mlflow.log_artifact"
            )
        self.tracking_uri = tracking_uri
        self.registry_uri = registry_uri
        self.experiment_name = experiment_name
        self.tags = tags
        self.tracking_token = tracking_token
        self.should_save_artifact = save_artifact
        self.log_params_on_trial_end = log_params_on_trial_end

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """Connect to the tracking server and pick (or create) the experiment, as Ray's ``setup``.

        Raises:
            RuntimeError: MLflow's client is not installed in the driver pod's image.
            ValueError: no experiment is named, Ray's error.
        """
        try:
            import mlflow
            from mlflow.exceptions import MlflowException
        except ImportError as exc:
            raise RuntimeError(
                "mlflow was not found: the driver pod's image (the trial image) needs MLflow's client, "
                "pip install 'kubetune[mlflow]'"
            ) from exc
        if self.tracking_token:
            os.environ["MLFLOW_TRACKING_TOKEN"] = self.tracking_token
        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_registry_uri(self.registry_uri)
        self._client = mlflow.MlflowClient(tracking_uri=mlflow.get_tracking_uri(), registry_uri=self.registry_uri)
        self._experiment_id = _experiment(mlflow, MlflowException, None, self.experiment_name, None, create=True)
        self.tags = dict(self.tags or {})
        self._trial_runs: dict[str, str] = {}
        self._pending: dict[str, list] = {}  # run id -> metrics of this step's results, logged at its end

    def _run_id(self, trial: Any) -> str:
        """The run of ``trial``: known, else the one a driver before this one started (tag ``trial_name``), else new."""
        name = str(trial)
        if name not in self._trial_runs:
            quoted = name.replace("'", "\\'")
            found = self._client.search_runs(
                [self._experiment_id], filter_string=f"tags.trial_name = '{quoted}'", max_results=1
            )
            if found:
                self._trial_runs[name] = found[0].info.run_id
            else:
                run = self._client.create_run(
                    self._experiment_id, run_name=name, tags={**self.tags, "trial_name": name}
                )
                self._trial_runs[name] = run.info.run_id
        return self._trial_runs[name]

    def _log_params(self, run_id: str, config: dict) -> None:
        from mlflow.entities import Param

        params = [Param(key, str(value)) for key, value in flatten(dict(config or {})).items()]
        for start in range(0, len(params), 100):  # MLflow's limit per batch
            self._client.log_batch(run_id, params=params[start : start + 100])

    def log_trial_start(self, trial: Any) -> None:
        run_id = self._run_id(trial)
        if not self.log_params_on_trial_end:
            self._log_params(run_id, trial.config)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        from mlflow.entities import Metric

        step = result.get("timesteps_total") or result["training_iteration"]
        now = int(time.time() * 1000)
        metrics = []
        for key, value in flatten(result).items():
            try:
                metrics.append(Metric(key, float(value), now, step))
            except (TypeError, ValueError):
                continue  # Ray logs what float() takes, and leaves the rest out
        self._pending.setdefault(self._run_id(trial), []).extend(metrics)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """Log the metrics of the step's results, in batches (the driver saves its place after this returns)."""
        for run_id in list(self._pending):
            self._flush(run_id)

    def _flush(self, run_id: str) -> None:
        metrics = self._pending.pop(run_id, [])
        for start in range(0, len(metrics), 1000):  # MLflow's limit per batch
            self._client.log_batch(run_id, metrics=metrics[start : start + 1000])

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        run_id = self._run_id(trial)
        self._flush(run_id)
        if self.log_params_on_trial_end:
            self._log_params(run_id, trial.config)
        self._client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")
