"""Ray Tune's result analysis over an experiment's object storage: ``ExperimentAnalysis`` and ``ResultGrid``.

Owns reading a finished (or running) experiment back from storage, with no cluster: the trials' last
results, configs, errors, histories and committed checkpoints, as Ray Tune's ``ExperimentAnalysis``
(the 0.8–1.x object ``tune.run`` returns) and ``ResultGrid``/``Result`` (Ray 2.x, ``Tuner.fit``).
Callers: the SDK (``kubetune.run`` returns an :class:`ExperimentAnalysis`, ``Tuner.fit`` a
:class:`ResultGrid`), the ``kubetune analysis`` command, and users directly::

    analysis = ExperimentAnalysis("s3://bucket/kubetune/my-team/digits", "mean_accuracy", "max",
                                  storage_endpoint="http://minio:9000")
    analysis.best_config, analysis.dataframe().sort_values("mean_accuracy")

What it reads (docs/architecture.md, "Object storage layout"): each trial's directory
``<root>/<namespace>/<experiment>/<uid[:8]>/<trial>/`` with ``params.json``, ``result.json`` (one Ray
result per line, as :mod:`kubetune.runtime.results` writes it), ``error.txt`` of a failed attempt, and
the checkpoints committed by :mod:`kubetune.checkpoint_store` (read only through it). Storage is reached only
through :mod:`kubetune.storage`.

Loading is one recursive listing of the experiment, then one ``GET`` of each trial's ``result.json``
(plus ``error.txt`` of failed trials, and ``params.json`` only where no result carries the config) on 16
threads. Only each file's last line is parsed then; a trial's whole history is parsed the first time
something needs it (``dataframe`` with a mode, scopes other than ``last``, ``trial_dataframes``,
checkpoints' metric values). pandas (the ``sdk`` extra) is imported only by the methods that return
frames, so the module imports in a trial pod without it.

Where kubetune differs from Ray: a trial's ``trial_id`` is its name (the operator sets Ray's
``trial_id`` result field to it too), and ``str(trial)`` the display name its ``trial_name_creator`` gave
(``Trial.status.displayName``, which the SDK passes as ``display_names``), else that name; trial paths and
checkpoint locations are storage URIs; Ray's running mean for the ``avg`` scope (which divides by
``training_iteration``) is the plain mean of the reported values, and ``max``/``min`` of the ``all`` scope ignore
NaN values instead of depending on where they fall.
"""

from __future__ import annotations

import json
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Mapping

from kubetune.checkpoint_store import StoredCheckpoint, list_checkpoints
from kubetune.resultkeys import finite_number, flatten, is_multi_objective, is_number, non_dominated, objectives
from kubetune.runtime.results import PROGRESS_FILE, RESULT_FILE
from kubetune.search.sample import parse_space
from kubetune.search.variants import find_domains
from kubetune.storage import Storage, join_uri, open_storage

__all__ = ["ExperimentAnalysis", "Result", "ResultGrid", "StoredCheckpoint", "TrialRecord", "changed_trials"]

log = logging.getLogger(__name__)

PARAMS_FILE = "params.json"
ERROR_FILE = "error.txt"
#: Files that make a directory a trial directory.
TRIAL_FILES = frozenset({PARAMS_FILE, RESULT_FILE, PROGRESS_FILE, ERROR_FILE})
#: Threads fetching trial files while loading.
FETCH_WORKERS = 16
TERMINATED = "TERMINATED"
ERROR = "ERROR"
SCOPES = ("all", "last", "avg", "last-5-avg", "last-10-avg")
TRAINING_ITERATION = "training_iteration"
_MISSING = object()


def _pandas():
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("dataframes need pandas: pip install 'kubetune[sdk]'") from exc
    return pandas


def _lookup(result: Mapping, key: str) -> Any:
    """``result[key]``, else the nested value a flattened ``a/b`` key names (Ray's ``unflattened_lookup``);
    :data:`_MISSING` when neither exists."""
    value = result.get(key, _MISSING)
    if value is _MISSING and "/" in key:
        value = result
        for part in key.split("/"):
            if not isinstance(value, Mapping) or part not in value:
                return _MISSING
            value = value[part]
    return value


def _parse_results(data: bytes, uri: str) -> list[dict]:
    """The results in ``result.json`` bytes, in order; a line that does not parse is skipped with a warning."""
    lines = [line for line in data.splitlines() if line.strip()]
    try:
        rows = json.loads(b"[" + b",".join(lines) + b"]")  # one call: ~30% faster than one per line
    except ValueError:
        rows = []
        for number, line in enumerate(lines, 1):
            try:
                rows.append(json.loads(line))
            except ValueError:
                log.warning("%s: line %d is not JSON; skipped", uri, number)
    return [row for row in rows if isinstance(row, dict)]


def _last_result(data: bytes, uri: str) -> dict:
    """The last result in ``result.json`` bytes, parsing only the last line unless it is broken; {} if none."""
    tail = data.rstrip().rpartition(b"\n")[2]
    if not tail:
        return {}
    try:
        row = json.loads(tail)
        if isinstance(row, dict):
            return row
    except ValueError:
        pass
    rows = _parse_results(data, uri)
    return rows[-1] if rows else {}


def _values_at(config: dict, paths: list[tuple]) -> dict[str, Any]:
    """``{"a/b": config["a"]["b"], ...}`` for each path that ``config`` has."""
    out = {}
    for path in paths:
        node: Any = config
        try:
            for part in path:
                node = node[part]
        except (KeyError, IndexError, TypeError):
            continue
        out["/".join(str(part) for part in path)] = node
    return out


class TrialRecord:
    """One trial as read from storage: what Ray's ``Trial`` offers to analysis code.

    Attributes:
        trial_id: the trial's name (``<experiment>-<index:05d>``), also its directory's name.
        path: URI of the trial directory; ``logdir`` is the same (Ray's name).
        config: the trial's config (the last result's ``config``, else ``params.json``; {} if neither).
        last_result: the last line of ``result.json``; {} before the first result.
        error: the failure message (``error.txt`` or the SDK's ``trial_errors``), or None.
        status: ``"ERROR"`` when ``error`` is set, else ``"TERMINATED"``.
        evaluated_params: the searched values of ``config`` keyed by path joined with ``/`` (Ray's
            ``Trial.evaluated_params``): those at the domains and grids of the parameter space; every
            value of ``config`` when the space is not known (``ExperimentAnalysis`` without ``param_space``).
        storage: the :class:`kubetune.storage.Storage` the trial directory is read from.
        custom_trial_name: the display name the experiment's ``trial_name_creator`` gave (Ray's attribute), or
            None; ``str(trial)`` is it when set, else ``trial_id``.
    """

    __slots__ = (
        "trial_id",
        "path",
        "config",
        "last_result",
        "error",
        "evaluated_params",
        "storage",
        "custom_trial_name",
    )

    def __init__(self, trial_id: str, path: str, config: dict, last_result: dict, error: str | None, storage: Storage):
        self.trial_id = trial_id
        self.path = path
        self.config = config
        self.last_result = last_result
        self.error = error
        self.evaluated_params = flatten(config)
        self.storage = storage
        self.custom_trial_name: str | None = None

    def has_checkpoint(self) -> bool:
        """Whether the trial has a committed checkpoint (Ray's ``Trial.has_checkpoint()``); one listing of storage."""
        committed, _ = list_checkpoints(self.storage, self.path)
        return bool(committed)

    @property
    def logdir(self) -> str:
        return self.path

    @property
    def status(self) -> str:
        return ERROR if self.error is not None else TERMINATED

    def __str__(self) -> str:
        return self.custom_trial_name or self.trial_id

    def __repr__(self) -> str:
        return f"TrialRecord({self.trial_id!r}, status={self.status})"


def _in_trial_folder(uri: str, path: str) -> tuple[str, str] | None:
    """``(trial name, the object's path in its folder)`` of an object ``uri`` under ``<path>/<trial>/``; None for
    an object elsewhere (beside the trial folders, say)."""
    prefix = path.rstrip("/") + "/"
    trial, sep, rest = uri.removeprefix(prefix).partition("/")
    return (trial, rest) if sep and uri.startswith(prefix) else None


def _trial_stamps(listed: Mapping[str, Any], path: str) -> dict[str, dict[str, Any]]:
    """``{trial name: {object's path in the trial folder: stamp}}`` of the objects ``listed`` in ``path``'s trial
    folders."""
    found: dict[str, dict[str, Any]] = {}
    for uri, stamp in listed.items():
        where = _in_trial_folder(uri, path)
        if where is not None:
            found.setdefault(where[0], {})[where[1]] = stamp
    return found


def changed_trials(before: Mapping[str, Any], after: Mapping[str, Any], experiment_path: str) -> set[str] | None:
    """The names of the trials whose objects differ between two listings of ``Storage.stamps``.

    Args:
        before, after: ``{uri: stamp}`` of the experiment's folder, then and now.
        experiment_path: the folder's URI (the ``<uid8>`` folder: a trial's objects are ``<it>/<trial>/<file>``).

    Returns:
        The trial folders' names where an object was added, removed or written again; None when an object outside
        them did (``pbt_global.txt``, say), which may change what every trial shows.
    """
    names: set[str] = set()
    for uri in set(before) ^ set(after) | {uri for uri in before.keys() & after.keys() if before[uri] != after[uri]}:
        where = _in_trial_folder(uri, experiment_path)
        if where is None:
            return None
        names.add(where[0])
    return names


def _resolve(
    storage: Storage, path: str, listed: Mapping[str, tuple[float, str]] | None = None
) -> tuple[str, dict[str, set[str]], dict[str, tuple[float, str]]]:
    """Return ``(uid folder URI, {trial name: names of its trial files}, {uri: stamp})`` for an experiment or uid
    folder, the stamps those of ``storage.stamps`` (the folder's objects, listed before anything is read): the
    caller's ``listed``, when it has just listed ``path``, else listed here.

    Raises:
        FileNotFoundError: no object under ``path``.
        ValueError: objects, but no trial directory at either depth.
    """
    base = join_uri(path)
    listed = dict(listed) if listed is not None else storage.stamps(base)
    uris = list(listed)
    if not uris:
        raise FileNotFoundError(f"no objects under {base}: expected <root>/<namespace>/<experiment>[/<uid>]")
    direct: dict[str, set[str]] = {}
    nested: dict[str, dict[str, set[str]]] = {}
    for uri in uris:
        parts = uri[len(base) + 1 :].split("/")
        if len(parts) == 2 and parts[1] in TRIAL_FILES:
            direct.setdefault(parts[0], set()).add(parts[1])
        elif len(parts) == 3 and parts[2] in TRIAL_FILES:
            nested.setdefault(parts[0], {}).setdefault(parts[1], set()).add(parts[2])
    if direct:
        return base, direct, listed
    if not nested:
        raise ValueError(f"{base} holds no trial directory (<trial>/{RESULT_FILE} or <uid>/<trial>/{RESULT_FILE})")
    if len(nested) == 1:
        uid = next(iter(nested))
    else:
        newest: dict[str, float] = {}
        for uri, (mtime, _) in listed.items():
            folder = uri[len(base) + 1 :].split("/", 1)[0]
            newest[folder] = max(newest.get(folder, -math.inf), mtime)
        uid = max(nested, key=lambda name: newest.get(name, -math.inf))
        log.info(
            "%s holds %d experiment folders (%s); reading the newest, %s",
            base,
            len(nested),
            ", ".join(sorted(nested)),
            uid,
        )
    return join_uri(base, uid), nested[uid], listed


class ExperimentAnalysis:
    """Analyze an experiment's results from storage (Ray Tune's ``ExperimentAnalysis``).

    Args:
        experiment_path: ``<root>/<namespace>/<experiment>/<uid8>`` (one run of the Experiment), or
            ``<root>/<namespace>/<experiment>``: then its single ``<uid8>`` folder; if an Experiment of
            that name was deleted and created again there are several, and the one with the most
            recently written object is read (logged). ``s3://`` or ``file:///`` URIs; a path without a
            scheme is a local directory.
        default_metric: metric of ``best_*`` and the default of the ``metric`` arguments; a list for
            a multi-objective experiment (``spec.metric`` a list): then there is no default, the
            methods that compare trials need ``metric`` and ``mode`` for one objective, and
            :attr:`pareto_front` gives the trials no other dominates.
        default_mode: ``"min"`` or ``"max"``, likewise (a list, one per metric, with a list of metrics).
        storage_endpoint, storage_region: S3 endpoint and region (:func:`kubetune.storage.open_storage`).
        trial_errors: trial name -> failure message, as the SDK knows them (``Trial.status.message`` of
            failed Trials). When given, it alone says which trials failed (an ``error.txt`` stays behind
            when a retry then succeeded), and its trials are listed even if they wrote nothing. When
            None, a trial failed if it has an ``error.txt``, whose text is the error.
        param_space: the Experiment's ``spec.config`` (or an SDK space): which config values each
            trial's ``evaluated_params`` holds (the SDK passes it).
        display_names: trial name -> display name (``Trial.status.displayName``, what the experiment's
            ``trial_name_creator`` gave), as the SDK knows them: each such trial's ``custom_trial_name`` and
            ``str()``. Storage does not hold them: without it, ``str(trial)`` is the trial's name.
        previous: an earlier reading of the same folder (a live view's last one): a trial whose objects
            are listed with the same stamps (``Storage.stamps``) as that reading listed them is taken from it,
            not read again (its error from ``trial_errors`` when given). None: every trial is read.
        listed: ``Storage.stamps(experiment_path)`` as the caller has just listed it (a live view that listed the
            folder to see whether anything changed), so that the folder is not listed twice; None: listed here.

    Attributes:
        experiment_path: URI of the ``<uid8>`` folder read.
        default_metric, default_mode: as given; None for several objectives.
        objectives: ``(metrics, modes)`` of a multi-objective experiment, else None.
        storage: the :class:`kubetune.storage.Storage` read.
        param_space: as given (None when not).
        trials: the :class:`TrialRecord` of each trial, by name (creation order for the operator's names).

    Raises:
        FileNotFoundError: nothing is stored under ``experiment_path`` (and no ``trial_errors``).
        ValueError: objects but no trial directory there, ``default_mode`` not min/max (or, with a list
            of metrics, not a list of them of the same length), a bad URI.
    """

    def __init__(
        self,
        experiment_path: str,
        default_metric: str | None = None,
        default_mode: str | None = None,
        *,
        storage_endpoint: str | None = None,
        storage_region: str | None = None,
        trial_errors: Mapping[str, str] | None = None,
        param_space: Any = None,
        display_names: Mapping[str, str] | None = None,
        previous: ExperimentAnalysis | None = None,
        listed: Mapping[str, tuple[float, str]] | None = None,
    ):
        self.objectives = None
        objective = (default_metric, default_mode)
        if is_multi_objective(default_metric) or is_multi_objective(default_mode):
            self.objectives = objectives(default_metric, default_mode)
            default_metric = default_mode = None
        if default_mode and default_mode not in ("min", "max"):
            raise ValueError("`default_mode` has to be None or one of [min, max]")
        self.default_metric = default_metric
        self.default_mode = default_mode
        self.param_space = param_space
        if "://" not in experiment_path:
            experiment_path = Path(experiment_path).resolve().as_uri()
        self.storage = open_storage(experiment_path, storage_endpoint, storage_region)
        self._source = (*objective, storage_endpoint, storage_region, trial_errors, display_names)
        try:
            self.experiment_path, files, self._listed = _resolve(self.storage, experiment_path, listed)
        except FileNotFoundError:
            if not trial_errors:
                raise
            self.experiment_path, files, self._listed = join_uri(experiment_path), {}, {}  # none wrote anything
        self._rows: dict[str, list[dict]] = {}
        self._stats: dict[str, dict[str, dict[str, float]]] = {}
        self._frames: dict[str, Any] = {}
        kept = self._unchanged(previous)

        def load(name: str) -> tuple[TrialRecord, bytes | None]:
            if name in kept:
                return kept[name]
            have, uri = files.get(name, set()), join_uri(self.experiment_path, name)
            data = self.storage.get_bytes(join_uri(uri, RESULT_FILE)) if RESULT_FILE in have else b""
            last = _last_result(data, join_uri(uri, RESULT_FILE))
            config = last.get("config")
            if not isinstance(config, dict):
                config = json.loads(self.storage.get_bytes(join_uri(uri, PARAMS_FILE))) if PARAMS_FILE in have else {}
            if trial_errors is not None:
                error = trial_errors.get(name)
            elif ERROR_FILE in have:
                error = self.storage.get_bytes(join_uri(uri, ERROR_FILE)).decode("utf-8", errors="replace")
            else:
                error = None
            return TrialRecord(name, uri, config, last, error, self.storage), data

        names = sorted(set(files) | set(trial_errors or ()))
        with ThreadPoolExecutor(max_workers=FETCH_WORKERS) as pool:
            loaded = list(pool.map(load, names))
        self.trials: list[TrialRecord] = [trial for trial, _ in loaded]
        self._raw: dict[str, bytes] = {trial.trial_id: data for trial, data in loaded if data is not None}
        for trial, data in loaded:
            if data is None:  # kept from ``previous``, its results parsed there already
                self._rows[trial.trial_id] = list(previous._rows[trial.trial_id])
        for trial in self.trials:
            trial.custom_trial_name = (display_names or {}).get(trial.trial_id)
        if param_space is not None:
            paths = [path for path, _ in find_domains(parse_space(param_space))]
            for trial in self.trials:
                trial.evaluated_params = _values_at(trial.config, paths)

    def _unchanged(self, previous: ExperimentAnalysis | None) -> dict[str, tuple[TrialRecord, bytes | None]]:
        """The trials of ``previous`` whose objects this reading listed as ``previous`` did, as ``load`` returns
        them: a new record, with the bytes of its results, or None where ``previous`` parsed them already."""
        if previous is None or previous.experiment_path != self.experiment_path:
            return {}
        now, then = (
            _trial_stamps(self._listed, self.experiment_path),
            _trial_stamps(previous._listed, previous.experiment_path),
        )
        *_, trial_errors, _ = self._source  # (metric, mode, endpoint, region, trial_errors, display_names)
        kept = {}
        for old in previous.trials:
            name = old.trial_id
            stamps = now.get(name)
            if stamps is None or stamps != then.get(name):
                continue
            raw, rows = previous._raw.get(name), previous._rows.get(name)
            if raw is None and rows is None:
                continue
            error = trial_errors.get(name) if trial_errors is not None else old.error
            kept[name] = TrialRecord(name, old.path, old.config, old.last_result, error, self.storage), raw
        return kept

    def reread(self, listed: Mapping[str, tuple[float, str]] | None = None) -> ExperimentAnalysis:
        """The same experiment read again from storage, as it is now (what a live view refreshes from).

        Args:
            listed: ``Storage.stamps`` of :attr:`experiment_path` as the caller has just listed it; None: listed
                again.

        Returns:
            A new analysis of :attr:`experiment_path` (the ``<uid8>`` folder this one read, even when a newer one
            appeared beside it since) with this one's objective, endpoint, region, ``trial_errors``,
            ``param_space`` and ``display_names``, this one its ``previous`` (the trials whose objects did not
            change are not read again); this one is left as it was.

        Raises:
            FileNotFoundError, ValueError: as the constructor.
        """
        metric, mode, endpoint, region, trial_errors, display_names = self._source
        return ExperimentAnalysis(
            self.experiment_path,
            metric,
            mode,
            storage_endpoint=endpoint,
            storage_region=region,
            trial_errors=trial_errors,
            param_space=self.param_space,
            display_names=display_names,
            previous=self,
            listed=listed,
        )

    # -- validation (Ray's messages) ---------------------------------------------------------------

    def _several_objectives(self) -> None:
        if self.objectives is not None:
            metrics, modes = self.objectives
            raise ValueError(
                f"This experiment has several objectives (metric={list(metrics)!r}, mode={list(modes)!r}): "
                f"pass `metric` and `mode` for one of them, e.g. metric={metrics[0]!r}, mode={modes[0]!r}, "
                "or use `pareto_front` for the trials no other dominates."
            )

    def _validate_metric(self, metric: str | None) -> str:
        if not metric:
            self._several_objectives()
        if not metric and not self.default_metric:
            raise ValueError(
                "No `metric` has been passed and `default_metric` has not been set. "
                "Please specify the `metric` parameter."
            )
        return metric or self.default_metric

    def _validate_mode(self, mode: str | None) -> str:
        if not mode:
            self._several_objectives()
        if not mode and not self.default_mode:
            raise ValueError(
                "No `mode` has been passed and `default_mode` has not been set. Please specify the `mode` parameter."
            )
        if mode and mode not in ("min", "max"):
            raise ValueError("If set, `mode` has to be one of [min, max]")
        return mode or self.default_mode

    def _require_defaults(self, what: str, alternative: str) -> None:
        self._several_objectives()
        if not self.default_metric or not self.default_mode:
            raise ValueError(
                f"To fetch the `{what}`, pass a `metric` and `mode` parameter to `tune.run()`. "
                f"Alternatively, use {alternative} to set the metric and mode explicitly."
            )

    def _default_best_trial(self, what: str, alternative: str) -> TrialRecord:
        self._require_defaults(what, alternative)
        trial = self.get_best_trial(self.default_metric, self.default_mode)
        if trial is None:
            raise ValueError(
                f"No best trial found. Please check if you specified the correct default metric "
                f"({self.default_metric}) and mode ({self.default_mode})."
            )
        return trial

    # -- trials and their histories ----------------------------------------------------------------

    def _trial(self, trial: TrialRecord | str) -> TrialRecord:
        if isinstance(trial, TrialRecord):
            return trial
        if isinstance(trial, str):
            for record in self.trials:
                if trial in (record.trial_id, record.path):
                    return record
            raise ValueError(f"no trial named {trial!r} or at that path in {self.experiment_path}")
        raise ValueError("trial should be a TrialRecord, a trial name or a trial path")

    def _history(self, trial: TrialRecord) -> list[dict]:
        """Every result of ``trial``, oldest first (parsed on first use)."""
        rows = self._rows.get(trial.trial_id)
        if rows is None:
            rows = _parse_results(self._raw.pop(trial.trial_id, b""), join_uri(trial.path, RESULT_FILE))
            self._rows[trial.trial_id] = rows
        return rows

    def _metric_stats(self, metric: str) -> dict[str, dict[str, float]]:
        """trial name -> Ray's ``metric_analysis[metric]`` (last, avg, last-5-avg, last-10-avg, max, min),
        for the trials that reported a number for ``metric``."""
        stats = self._stats.get(metric)
        if stats is None:
            stats = {}
            for trial in self.trials:
                values = [v for v in (_lookup(row, metric) for row in self._history(trial)) if is_number(v)]
                if not values:
                    continue
                real = [v for v in values if not math.isnan(v)]
                stats[trial.trial_id] = {
                    "last": values[-1],
                    "avg": sum(values) / len(values),
                    "last-5-avg": sum(values[-5:]) / len(values[-5:]),
                    "last-10-avg": sum(values[-10:]) / len(values[-10:]),
                    "max": max(real) if real else math.nan,
                    "min": min(real) if real else math.nan,
                }
            self._stats[metric] = stats
        return stats

    def _score(self, trial: TrialRecord, metric: str, statistic: str) -> float | None:
        if statistic == "last":
            value = _lookup(trial.last_result, metric)
            if is_number(value):
                return value  # the last line reports it: no need to parse the history
        stats = self._metric_stats(metric).get(trial.trial_id)
        return stats[statistic] if stats else None

    def _best_row(self, trial: TrialRecord, metric: str | None, mode: str | None) -> dict | None:
        """The row ``dataframe`` shows for ``trial``: the last result, or with a mode the first result whose
        ``metric`` is extreme (pandas' ``idxmax``/``idxmin``: NaN skipped). None when there is none."""
        if not mode:
            return trial.last_result or None
        rows = self._history(trial)
        values = [(i, _lookup(row, metric)) for i, row in enumerate(rows)]
        numbers = [(i, v) for i, v in values if is_number(v) and not math.isnan(v)]
        if numbers:
            pick = max if mode == "max" else min
            return rows[pick(numbers, key=lambda item: item[1])[0]]
        if any(v is not _MISSING for _, v in values):
            log.warning("Non-numerical value(s) encountered for %s in %s; trial left out", metric, trial.path)
            return None
        return rows[-1] if rows else None

    def _trial_dataframe(self, trial: TrialRecord):
        frame = self._frames.get(trial.trial_id)
        if frame is None:
            frame = _pandas().DataFrame([flatten(row) for row in self._history(trial)])
            self._frames[trial.trial_id] = frame
        return frame

    def _frame_by_trial(self, results: list[tuple[str, dict]]):
        """One row per ``(trial name, result)``, flattened, indexed by ``trial_id`` (Ray's ``from_records``)."""
        pd = _pandas()
        rows = []
        for _, result in results:
            row = flatten(result)
            row.pop("trial_id", None)
            rows.append(row)
        return pd.DataFrame(rows, index=pd.Index([name for name, _ in results], name="trial_id"))

    # -- Ray's API ---------------------------------------------------------------------------------

    @property
    def results(self) -> dict[str, dict]:
        """trial name -> last result."""
        return {trial.trial_id: trial.last_result for trial in self.trials}

    @property
    def results_df(self):
        """The last result of every trial, flattened with ``/`` (``config/lr``), indexed by ``trial_id``."""
        return self._frame_by_trial([(trial.trial_id, trial.last_result) for trial in self.trials])

    @property
    def configs(self) -> dict[str, dict]:
        """trial path -> config; same as :meth:`get_all_configs`."""
        return self.get_all_configs()

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict]:
        """trial path -> config; with ``prefix``, flattened under ``config/`` (``{"config/lr": 0.1}``)."""
        return {trial.path: flatten({"config": trial.config}) if prefix else trial.config for trial in self.trials}

    @property
    def trial_dataframes(self) -> dict:
        """trial path -> DataFrame of every result of that trial (columns flattened with ``/``).

        Builds a frame per trial (seconds for thousands of trials); :meth:`dataframe` does not need them.
        """
        return {trial.path: self._trial_dataframe(trial) for trial in self.trials}

    def metric_history(self, trial: TrialRecord | str, metric: str) -> list[tuple[int, float]]:
        """``(training_iteration, value)`` of each result of ``trial`` that reports a finite number for ``metric``.

        Args:
            trial: a :class:`TrialRecord`, a trial name or a trial path.
            metric: result key (``a/b`` for nested ones).

        Returns:
            Pairs in increasing ``training_iteration``, on the trial's last lineage: a result whose iteration is
            not above the one before starts the trial again from there (a restore of an earlier checkpoint, the
            trial's own or a PBT donor's, where the file still holds the results written after it), so the
            earlier results from that iteration on are left out. Results without an integer iteration are left
            out. [] when none.

        Raises:
            ValueError: no such trial.
        """
        out: dict[int, float] = {}
        last = None
        for row in self._history(self._trial(trial)):
            step = row.get(TRAINING_ITERATION)
            if not isinstance(step, int) or isinstance(step, bool):
                continue
            if last is not None and step <= last:
                out = {s: v for s, v in out.items() if s < step}
            last = step
            value = finite_number(_lookup(row, metric))
            if value is not None:
                out[step] = value
        return sorted(out.items())

    def plot(self, kind: str = "learning_curves", metric: str | None = None, mode: str | None = None, ax: Any = None):
        """Draw the experiment with matplotlib (:mod:`kubetune.sdk.plots`); in a notebook the figure shows inline.

        Args:
            kind: ``"learning_curves"`` (``metric`` against ``training_iteration``, one line per trial; stopped
                and failed trials marked), ``"parallel_coordinates"`` (one line per trial across its searched
                parameters to its value) or ``"importance"`` (each searched parameter's importance, Optuna's
                PED-ANOVA, as Optuna Dashboard computes it).
            metric, mode: default the experiment's (``default_metric``, ``default_mode``).
            ax: the matplotlib ``Axes`` to draw on; default a new figure's.

        Returns:
            The ``Axes`` drawn on.

        Raises:
            ValueError: an unknown ``kind``; no metric or mode here nor as default, a bad mode.
            ImportError: matplotlib or Optuna is not installed (``pip install 'kubetune[views]'``).
        """
        from kubetune.sdk.plots import plot

        return plot(self, kind, metric, mode, ax)

    def dataframe(self, metric: str | None = None, mode: str | None = None):
        """One row per trial: its last result or, with ``metric`` and ``mode``, its best result.

        Columns are the result's keys flattened with ``/`` (``a/b``), the config as ``config/<key>``, and
        ``logdir`` (the trial's URI). The defaults are deliberately not used (Ray: the best result would
        silently replace the last one). Trials without results are left out, and so are trials whose
        ``metric`` values are all NaN or not numbers (with a warning). Source: Ray 1.x/2.x ``dataframe``.

        Raises:
            ValueError: ``mode`` is not min/max, or a ``mode`` without a ``metric``.
        """
        if mode and mode not in ("min", "max"):
            raise ValueError("If set, `mode` has to be one of [min, max]")
        if mode and not metric:
            raise ValueError(
                "If a `mode` is passed to `ExperimentAnalysis.dataframe()`, you'll also have to pass a `metric`!"
            )
        rows = []
        for trial in self.trials:
            row = self._best_row(trial, metric, mode)
            if row is not None:
                flat = flatten(row)
                flat.update(flatten({"config": trial.config}))
                flat["logdir"] = trial.path
                rows.append(flat)
        return _pandas().DataFrame(rows)

    def get_best_trial(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last", filter_nan_and_inf: bool = True
    ) -> TrialRecord | None:
        """The trial whose ``metric`` is best across trials (Ray's ``get_best_trial``).

        Args:
            metric: result key (``a/b`` for nested ones); default ``default_metric``.
            mode: ``"min"`` or ``"max"``; default ``default_mode``.
            scope: what each trial is compared by: ``last`` (its last reported value), ``avg`` (mean of all
                its values), ``last-5-avg``/``last-10-avg`` (mean of its last 5 or 10), ``all`` (its best
                value by ``mode``, NaN ignored).
            filter_nan_and_inf: leave out trials whose score is NaN or infinite.

        Returns:
            The best trial, the first of equal ones; None (with a warning) when no trial has a score.

        Raises:
            ValueError: no metric or mode here nor as default, a bad mode or scope.
        """
        metric = self._validate_metric(metric)
        mode = self._validate_mode(mode)
        if scope not in SCOPES:
            raise ValueError(
                f"ExperimentAnalysis: attempting to get best trial for metric {metric} for scope "
                f'{scope} not in ["all", "last", "avg", "last-5-avg", "last-10-avg"]. If you '
                "didn't pass a `metric` parameter to `tune.run()`, you have to pass one when fetching "
                "the best trial."
            )
        best, best_score = None, None
        for trial in self.trials:
            score = self._score(trial, metric, mode if scope == "all" else scope)
            if score is None or (filter_nan_and_inf and not math.isfinite(score)):
                continue
            if best is None or (mode == "max" and score > best_score) or (mode == "min" and score < best_score):
                best, best_score = trial, score
        if best is None:
            log.warning("Could not find best trial. Did you pass the correct `metric` parameter?")
        return best

    @property
    def pareto_front(self) -> list[TrialRecord]:
        """The trials of a multi-objective experiment that no other dominates (at least as good in every
        objective by its last reported value, better in one), in trial order, as the Experiment's
        ``status.paretoFront`` chooses them: trials that failed, or whose last value of an objective is
        missing, NaN or infinite, take no part.

        Raises:
            ValueError: the experiment has one objective (no ``objectives``).
        """
        if self.objectives is None:
            raise ValueError("pareto_front: this experiment has one objective; use get_best_trial(metric, mode)")
        metrics, modes = self.objectives
        points = []
        for trial in self.trials:
            values = [finite_number(_lookup(trial.last_result, m)) for m in metrics]
            if trial.error is None and None not in values:
                points.append((trial, values))
        return non_dominated(points, modes)

    def get_best_config(self, metric: str | None = None, mode: str | None = None, scope: str = "last") -> dict | None:
        """The config of :meth:`get_best_trial`, or None. Raises as it does."""
        best = self.get_best_trial(metric, mode, scope)
        return best.config if best else None

    def get_best_logdir(self, metric: str | None = None, mode: str | None = None, scope: str = "last") -> str | None:
        """The path (URI) of :meth:`get_best_trial`, or None. Raises as it does."""
        best = self.get_best_trial(metric, mode, scope)
        return best.path if best else None

    def get_trial_checkpoints_paths(self, trial: TrialRecord | str, metric: str | None = None) -> list[tuple[str, Any]]:
        """``(checkpoint URI, metric value)`` of each committed checkpoint of ``trial``, oldest first.

        The value is the one the result of the checkpoint's iteration (``training_iteration``) holds in
        ``result.json``, NaN if that result lacks it; checkpoints without such a result are left out (Ray
        1.x joins checkpoints and results on the iteration).

        Args:
            trial: a :class:`TrialRecord`, a trial name or a trial path.
            metric: default ``default_metric``, else ``training_iteration``.

        Raises:
            ValueError: no such trial.
        """
        trial = self._trial(trial)
        metric = metric or self.default_metric or TRAINING_ITERATION
        by_iteration = {row.get(TRAINING_ITERATION): row for row in self._history(trial)}
        committed, _ = list_checkpoints(self.storage, trial.path)
        out = []
        for ref in committed:
            row = by_iteration.get(ref.iteration)
            if row is not None:
                value = _lookup(row, metric)
                out.append((ref.uri, math.nan if value is _MISSING else value))
        return out

    def get_last_checkpoint(
        self, trial: TrialRecord | str | None = None, metric: str = TRAINING_ITERATION, mode: str = "max"
    ) -> StoredCheckpoint | None:
        """The newest committed checkpoint (highest ``training_iteration``) of ``trial``, downloaded now;
        without ``trial``, of the best trial by ``metric`` and ``mode`` (Ray 2.x's defaults: the trial
        that ran longest).

        Raises:
            As :meth:`get_best_checkpoint`.
        """
        trial = trial if trial is not None else self.get_best_trial(metric, mode)
        if trial is None:
            return None
        return self.get_best_checkpoint(trial, TRAINING_ITERATION, "max")

    def get_best_checkpoint(
        self, trial: TrialRecord | str, metric: str | None = None, mode: str | None = None
    ) -> StoredCheckpoint | None:
        """The committed checkpoint of ``trial`` whose result is best by ``metric``, downloaded now.

        Values are those of :meth:`get_trial_checkpoints_paths`; NaN, infinite and non-numeric ones are left
        out, and the oldest of equal ones wins (Ray).

        Args:
            trial: a :class:`TrialRecord`, a trial name or a trial path.
            metric: default ``default_metric``, else ``training_iteration``.
            mode: default ``default_mode``.

        Returns:
            The checkpoint, its files in a new temporary directory; None (logged) when there is none.

        Raises:
            ValueError: no mode here nor as default, a bad mode, no such trial, a checkpoint incomplete.
            FileNotFoundError: the checkpoint was deleted meanwhile (retention of a running trial).
        """
        metric = metric or self.default_metric or TRAINING_ITERATION
        mode = self._validate_mode(mode)
        candidates = [
            (uri, value)
            for uri, value in self.get_trial_checkpoints_paths(trial, metric)
            if is_number(value) and math.isfinite(value)
        ]
        if not candidates:
            log.error("No checkpoints have been found for trial %s.", trial)
            return None
        sign = -1 if mode == "max" else 1
        checkpoint = StoredCheckpoint(self.storage, min(candidates, key=lambda item: sign * item[1])[0])
        checkpoint.path  # noqa: B018 - download now, so that errors surface here as in Ray
        return checkpoint

    @property
    def best_trial(self) -> TrialRecord | None:
        """:meth:`get_best_trial` by the defaults. Raises ValueError without them."""
        self._require_defaults("best_trial", "the `get_best_trial(metric, mode)` method")
        return self.get_best_trial(self.default_metric, self.default_mode)

    @property
    def best_config(self) -> dict | None:
        """:meth:`get_best_config` by the defaults. Raises ValueError without them."""
        self._require_defaults("best_config", "the `get_best_config(metric, mode)` method")
        return self.get_best_config(self.default_metric, self.default_mode)

    @property
    def best_logdir(self) -> str | None:
        """:meth:`get_best_logdir` by the defaults. Raises ValueError without them."""
        self._require_defaults("best_logdir", "the `get_best_logdir(metric, mode, scope)` method")
        return self.get_best_logdir(self.default_metric, self.default_mode)

    @property
    def best_checkpoint(self) -> StoredCheckpoint | None:
        """:meth:`get_best_checkpoint` of the best trial by the defaults.

        Raises:
            ValueError: no defaults, or no best trial.
        """
        trial = self._default_best_trial("best_checkpoint", "the `get_best_checkpoint(trial, metric, mode)` method")
        return self.get_best_checkpoint(trial, self.default_metric, self.default_mode)

    @property
    def best_dataframe(self):
        """The best trial's (by the defaults) DataFrame of all results.

        Raises:
            ValueError: no defaults, or no best trial.
        """
        return self._trial_dataframe(
            self._default_best_trial(
                "best_dataframe", "the `get_best_logdir(metric, mode)` method and look it up in `trial_dataframes`"
            )
        )

    @property
    def best_result(self) -> dict:
        """The last result of the best trial by the defaults.

        Raises:
            ValueError: no defaults, or no best trial.
        """
        return self._default_best_trial("best_result", "`get_best_trial(metric, mode).last_result`").last_result

    @property
    def best_result_df(self):
        """:attr:`best_result` as a one-row DataFrame indexed by ``trial_id``.

        Raises:
            ValueError: no defaults, or no best trial.
        """
        trial = self._default_best_trial("best_result_df", "`get_best_trial(metric, mode).last_result`")
        return self._frame_by_trial([(trial.trial_id, trial.last_result)])


#: What ``repr(Result)`` leaves out of the metrics, as Ray 2.x's (``AUTO_RESULT_KEYS`` and the
#: reporter's ``BLACKLISTED_KEYS``): the fields a trainable's results get without the user's code.
HIDDEN_RESULT_KEYS = frozenset(
    "training_iteration time_total_s episodes_total timesteps_total node_ip hostname pid time_this_iter_s "
    "timestamp experiment_id date time_since_restore iterations_since_restore timesteps_since_restore config "
    "warmup_time done trial_id experiment_tag should_checkpoint".split()
)


class Result:
    """One trial's outcome (Ray 2.x's ``Result``); made by :class:`ResultGrid`.

    Attributes:
        metrics: the last result ({} before the first one).
        config: the trial's config.
        path: URI of the trial directory (Ray gives it without the scheme, next to a filesystem).
        error: ``RuntimeError(message)`` of a failed trial, else None.
    """

    def __init__(self, analysis: ExperimentAnalysis, trial: TrialRecord):
        self._analysis = analysis
        self._trial = trial
        self.metrics = dict(trial.last_result)
        self.config = trial.config
        self.path = trial.path
        self.error = RuntimeError(trial.error) if trial.error is not None else None

    @cached_property
    def checkpoint(self) -> StoredCheckpoint | None:
        """The newest committed checkpoint (listed on first access, downloaded when its ``path`` is read)."""
        committed, _ = list_checkpoints(self._analysis.storage, self.path)
        return StoredCheckpoint(self._analysis.storage, committed[-1].uri) if committed else None

    @cached_property
    def best_checkpoints(self) -> list[tuple[StoredCheckpoint, dict]]:
        """``(checkpoint, result of its iteration)`` for every committed checkpoint, oldest first (the
        ones retention kept); the result is {} when ``result.json`` lacks the iteration."""
        by_iteration = {row.get(TRAINING_ITERATION): row for row in self._analysis._history(self._trial)}
        committed, _ = list_checkpoints(self._analysis.storage, self.path)
        return [
            (StoredCheckpoint(self._analysis.storage, ref.uri), by_iteration.get(ref.iteration, {}))
            for ref in committed
        ]

    @property
    def metrics_dataframe(self):
        """DataFrame of every result of the trial (columns flattened with ``/``)."""
        return self._analysis._trial_dataframe(self._trial)

    def __repr__(self) -> str:
        """Ray 2.x's form: the error's type (when failed), the metrics without the auto-filled keys, the path."""
        shown = {"error": type(self.error).__name__} if self.error is not None else {}
        shown["metrics"] = {k: v for k, v in self.metrics.items() if k not in HIDDEN_RESULT_KEYS}
        shown["path"] = self.path
        fields = ",\n".join(f"  {key}={value!r}" for key, value in shown.items())
        return f"Result(\n{fields}\n)"


class ResultGrid:
    """The trials' :class:`Result` objects and the best of them (Ray 2.x's ``ResultGrid``).

    ``len(grid)``, ``grid[i]`` (trials by name) and iteration give Results, built on access.

    Args:
        experiment_analysis: the loaded experiment.
    """

    def __init__(self, experiment_analysis: ExperimentAnalysis):
        self._analysis = experiment_analysis

    @property
    def experiment_path(self) -> str:
        """URI of the experiment's ``<uid8>`` folder."""
        return self._analysis.experiment_path

    def get_best_result(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last", filter_nan_and_inf: bool = True
    ) -> Result:
        """The Result of :meth:`ExperimentAnalysis.get_best_trial` (same arguments); of an experiment of
        one trial, that trial's, whatever the metric (as Ray).

        Raises:
            ValueError: no metric or mode here nor in the experiment, a bad mode or scope; for an
                experiment with several objectives, no ``metric`` and ``mode`` for one of them.
            RuntimeError: no trial reported a (finite, with ``filter_nan_and_inf``) value of the metric.
        """
        if len(self._analysis.trials) == 1:
            return Result(self._analysis, self._analysis.trials[0])
        if not metric or not mode:
            self._analysis._several_objectives()
        if not metric and not self._analysis.default_metric:
            raise ValueError(
                "No metric is provided. Either pass in a `metric` arg to `get_best_result` or "
                "specify a metric in the `TuneConfig` of your `Tuner`."
            )
        if not mode and not self._analysis.default_mode:
            raise ValueError(
                "No mode is provided. Either pass in a `mode` arg to `get_best_result` or "
                "specify a mode in the `TuneConfig` of your `Tuner`."
            )
        best = self._analysis.get_best_trial(metric, mode, scope, filter_nan_and_inf)
        if best is None:
            message = (
                f"No best trial found for the given metric: {metric or self._analysis.default_metric}. "
                "This means that no trial has reported this metric"
            )
            raise RuntimeError(
                message
                + (
                    ", or all values reported for this metric are NaN. To not ignore NaN "
                    "values, you can set the `filter_nan_and_inf` arg to False."
                    if filter_nan_and_inf
                    else "."
                )
            )
        return Result(self._analysis, best)

    @property
    def pareto_front(self) -> list[Result]:
        """The Results of :attr:`ExperimentAnalysis.pareto_front` (several objectives; raises as it does)."""
        return [Result(self._analysis, trial) for trial in self._analysis.pareto_front]

    def plot(self, kind: str = "learning_curves", metric: str | None = None, mode: str | None = None, ax: Any = None):
        """:meth:`ExperimentAnalysis.plot` of the trials (same arguments, returns and errors)."""
        return self._analysis.plot(kind, metric, mode, ax)

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None):
        """:meth:`ExperimentAnalysis.dataframe` with ``metric=filter_metric, mode=filter_mode``."""
        return self._analysis.dataframe(metric=filter_metric, mode=filter_mode)

    @property
    def errors(self) -> list[RuntimeError]:
        """The errors of the failed trials."""
        return [RuntimeError(t.error) for t in self._analysis.trials if t.error is not None]

    @property
    def num_errors(self) -> int:
        """How many trials failed."""
        return sum(t.status == ERROR for t in self._analysis.trials)

    @property
    def num_terminated(self) -> int:
        """How many trials ended without an error."""
        return sum(t.status == TERMINATED for t in self._analysis.trials)

    def __len__(self) -> int:
        return len(self._analysis.trials)

    def __getitem__(self, i: int) -> Result:
        return Result(self._analysis, self._analysis.trials[i])

    def __iter__(self) -> Iterator[Result]:
        return (Result(self._analysis, trial) for trial in self._analysis.trials)

    def __repr__(self) -> str:
        return f"ResultGrid<{len(self)} trials, {self.num_errors} errors, {self.experiment_path}>"
