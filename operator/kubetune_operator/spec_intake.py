"""Spec intake: what the operator makes of a version of an Experiment's spec, and the spec in force.

Owns :class:`SpecIntake`: the Experiment object and its typed spec (:class:`ExperimentSpec`) in force, the
metric and mode, the warnings about the parameter space, and :meth:`SpecIntake.parse`, which turns a new
version into a searcher, a scheduler and stoppers or refuses it (:class:`InvalidSpec`: a bad parameter space,
searcher or scheduler parameters, missing storage, a field over :mod:`kubetune.limits`, a pod template that
breaks the operator's Pod Security level). Called by the controller
(:meth:`kubetune_operator.controller.ExperimentController.update`); the other parts of the controller read the
spec in force from it. Pure: no API calls.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, NamedTuple

from kubetune.limits import check_spec_sizes
from kubetune.search import parse_space, space_warnings

from .algorithms import create_scheduler, create_searcher
from .builders import experiment_trial_dir, sample_pod
from .builtin_stoppers import Stoppers, create_stoppers
from .experiment_spec import ExperimentSpec
from .podsecurity import violations
from .schedulers.base import TrialScheduler
from .searchers.base import Searcher
from .settings import Settings


class InvalidSpec(ValueError):
    """An Experiment spec the schema accepted but the operator cannot run (message says why)."""


class ParsedSpec(NamedTuple):
    """What a version of the spec makes: its typed spec, and the searcher, scheduler and stoppers it chooses."""

    spec: ExperimentSpec
    searcher: Searcher
    scheduler: TrialScheduler
    stoppers: Stoppers


class SpecIntake:
    """The spec in force of one Experiment, and the parsing of new versions of it.

    Args:
        settings: the operator's settings (default storage, Pod Security level).
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.experiment: Mapping = {}
        self.spec: ExperimentSpec | None = None
        self.metric: str | tuple[str, ...] | None = None
        self.mode: str | tuple[str, ...] | None = None
        #: Likely mistakes in spec.config that are valid as constants; the validate handler posts them as events.
        self.warnings: list[str] = []

    @property
    def name(self) -> str:
        """The Experiment's name."""
        return self.experiment["metadata"]["name"]

    @property
    def namespace(self) -> str:
        """The Experiment's namespace."""
        return self.experiment["metadata"]["namespace"]

    def parse(self, experiment: Mapping) -> ParsedSpec:
        """The typed spec of ``experiment`` and the searcher, scheduler and stoppers it chooses (new objects: the
        spec in force does not change).

        Raises:
            InvalidSpec: the spec cannot be run.
        """
        try:
            check_spec_sizes(experiment.get("spec") or {})  # the limits the CRD states; only kubetune enforces them
            model = ExperimentSpec.parse(experiment.get("spec") or {})
            metric, mode = model.metric, model.mode
            parse_space(model.config)
            seed = model.search_algorithm.seed
            if seed is None:  # stable across restarts and spec edits: a function of the Experiment's uid
                uid = experiment["metadata"].get("uid") or experiment["metadata"]["name"]
                seed = int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big")
            searcher = create_searcher(
                model.search_algorithm.name,
                model.config,
                metric,
                mode,
                num_samples=model.num_samples,
                seed=seed,
                **model.search_algorithm.params,
            )
            # several objectives go to the searcher alone (experiment_spec.py allows fifo, no metric-less stoppers)
            single = (None, None) if model.multi_objective else (metric, mode)
            scheduler = create_scheduler(model.scheduler.name, *single, **model.scheduler.params)
            stoppers = create_stoppers(model.stoppers, *single)
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidSpec(str(exc)) from exc
        except ImportError as exc:
            raise InvalidSpec(f"the operator cannot load what the spec chooses: {exc}") from exc
        if not (model.storage_uri or self.settings.storage.default_uri or model.container):
            raise InvalidSpec(  # a container trial stores nothing yet: its results are read from its log
                "spec.storage.uri is required (the operator has no default storage)"
            )
        self._check_pod(experiment)
        return ParsedSpec(model, searcher, scheduler, stoppers)

    def accept(self, experiment: Mapping, spec: ExperimentSpec) -> bool:
        """Make ``experiment`` (whose typed spec is ``spec``) the version in force; whether its metric or mode
        differs from the previous one's (then the trials are ranked anew)."""
        changed = (spec.metric, spec.mode) != (self.metric, self.mode)
        self.warnings = space_warnings(spec.config)
        self.experiment = experiment
        self.spec, self.metric, self.mode = spec, spec.metric, spec.mode
        return changed

    def trial_dir(self, trial: str) -> str:
        """The storage folder URI of ``trial`` (:func:`kubetune_operator.builders.experiment_trial_dir`)."""
        return experiment_trial_dir(self.experiment, self.settings, trial)

    def _check_pod(self, experiment: Mapping) -> None:
        """Build a sample trial pod: the spec's template must make a valid one that meets the operator's
        Pod Security level (``trials.pod_security_level``)."""
        try:
            pod = sample_pod(experiment, self.settings)
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidSpec(f"no trial pod can be made of this spec: {exc}") from exc
        level = self.settings.trials.pod_security_level
        broken = violations(pod, level)
        if broken:
            raise InvalidSpec(
                f"spec.template makes trial pods break the {level!r} Pod Security level, the loosest "
                f"this operator allows (its trials.pod_security_level setting): {'; '.join(broken)}"
            )
