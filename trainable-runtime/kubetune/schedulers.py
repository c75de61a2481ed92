"""Ray Tune's trial schedulers as client-side specifications (``tune.schedulers.*``).

Owns the scheduler classes a ported script builds, with Ray 2.x's names, arguments and
defaults; each serializes to the Experiment's ``spec.scheduler`` (:mod:`kubetune.specs`), and the
operator runs the algorithm. Called by users (``from kubetune.schedulers import ASHAScheduler``)
and by :mod:`kubetune.tuner`. Ray's schedulers kubetune lacks raise an error that says why.
"""

from __future__ import annotations

import os

from kubetune.specs import AlgorithmSpec, unsupported_names

#: Ray's submodules (``from kubetune.schedulers.pb2 import PB2``): thin modules in ``kubetune/_ray_schedulers``.
__path__ = [os.path.join(os.path.dirname(__file__), "_ray_schedulers")]

__all__ = [
    "TrialScheduler",
    "FIFOScheduler",
    "AsyncHyperBandScheduler",
    "ASHAScheduler",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "PopulationBasedTrainingReplay",
    "PB2",
    "load_policy",
]


class TrialScheduler(AlgorithmSpec):
    """Base of the scheduler specifications. Subclassing it to write a scheduler is not supported:
    schedulers run in the operator, which never runs user code."""


class FIFOScheduler(TrialScheduler):
    """Runs every trial to its stop criteria (Ray's default scheduler)."""

    name = "fifo"

    def __init__(self):
        super().__init__()


class AsyncHyperBandScheduler(TrialScheduler):
    """Asynchronous Successive Halving (Li et al. 2018, ASHA), Ray's ``AsyncHyperBandScheduler``.

    Args:
        time_attr: result key that measures progress, e.g. ``"training_iteration"``.
        metric: result key to optimize; None uses the experiment's ``metric``.
        mode: ``"min"`` or ``"max"``; None uses the experiment's.
        max_t: trials stop at this ``time_attr``.
        grace_period: no trial stops before this ``time_attr``.
        reduction_factor: keep the top ``1 / reduction_factor`` at each rung.
        brackets: number of brackets.
        stop_last_trials: whether trials reaching ``max_t`` stop.
    """

    name = "asha"

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
    ):
        super().__init__(
            metric,
            mode,
            time_attr=time_attr,
            max_t=max_t,
            grace_period=grace_period,
            reduction_factor=reduction_factor,
            brackets=brackets,
            stop_last_trials=stop_last_trials,
        )


#: Ray's alias.
ASHAScheduler = AsyncHyperBandScheduler


class HyperBandScheduler(TrialScheduler):
    """Synchronous HyperBand (Li et al. 2017) in Ray's bracket order, Ray's ``HyperBandScheduler``.

    Args:
        time_attr: result key that measures progress.
        metric: result key to optimize; None uses the experiment's.
        mode: ``"min"`` or ``"max"``; None uses the experiment's.
        max_t: the most ``time_attr`` a trial gets.
        reduction_factor: ``eta``, the halving rate.
        stop_last_trials: whether trials reaching ``max_t`` stop.
    """

    name = "hyperband"

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: int = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
    ):
        super().__init__(
            metric,
            mode,
            time_attr=time_attr,
            max_t=max_t,
            reduction_factor=reduction_factor,
            stop_last_trials=stop_last_trials,
        )


class MedianStoppingRule(TrialScheduler):
    """The median stopping rule (Golovin et al. 2017, Google Vizier), Ray's ``MedianStoppingRule``.

    Args:
        time_attr: result key that measures progress, e.g. ``"time_total_s"``.
        metric: result key to optimize; None uses the experiment's.
        mode: ``"min"`` or ``"max"``; None uses the experiment's.
        grace_period: no trial stops before this ``time_attr``.
        min_samples_required: peers needed before a trial can stop.
        min_time_slice: must be 0: Ray uses it to pause trials for queued ones, which only Ray's
            runner sees (``docs/ray-tune.md``, porting table).
        hard_stop: stop (True) or pause (False) a trial below the median.

    Raises:
        ValueError: ``min_time_slice`` is not 0.
    """

    name = "median_stopping_rule"

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: float = 0,
        hard_stop: bool = True,
    ):
        if min_time_slice:
            raise ValueError(
                "MedianStoppingRule: min_time_slice is not supported (it pauses trials for queued "
                "ones, which only Ray's own runner sees); leave it at 0"
            )
        super().__init__(
            metric,
            mode,
            time_attr=time_attr,
            grace_period=grace_period,
            min_samples_required=min_samples_required,
            hard_stop=hard_stop,
        )


class PopulationBasedTraining(TrialScheduler):
    """Population Based Training (Jaderberg et al. 2017), Ray's asynchronous ``PopulationBasedTraining``.

    The worst trials restart from the best ones' checkpoints with explored configs (the operator's
    ``pbt`` scheduler; see ``docs/ray-tune.md`` for where it differs from Ray).

    Args:
        time_attr: result key of progress.
        metric: result key to optimize; None uses the experiment's.
        mode: ``"min"`` or ``"max"``; None uses the experiment's.
        perturbation_interval: perturb at most every this much ``time_attr``.
        burn_in_period: no perturbation before this ``time_attr``.
        hyperparam_mutations: key → list of values, a domain (``tune.uniform(...)``) or a nested dict
            of those. Functions are user code the operator does not run: refused.
        quantile_fraction: top and bottom fraction, 0..0.5.
        resample_probability: 0..1.
        perturbation_factors: factors of a perturbed number.
        custom_explore_fn: must be None (user code).
        log_config: accepted; each exploit is in the Trial's ``status.perturbations`` and a
            ``TrialPerturbed`` event.
        require_attrs: as Ray's.
        synch: must be False.
        seed: kubetune's: seeds the donor and explore choices (a restarted operator decides the same).

    Raises:
        ValueError: a function among the mutations, ``custom_explore_fn`` or ``synch``.
    """

    name = "pbt"

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: dict | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple = (1.2, 0.8),
        custom_explore_fn=None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        seed: int | None = None,
    ):
        from kubetune.search.sample import space_spec

        if custom_explore_fn is not None:
            raise ValueError(
                "PopulationBasedTraining: custom_explore_fn is user code, which the operator does not "
                "run; express the mutations in hyperparam_mutations"
            )
        if synch:
            raise ValueError("PopulationBasedTraining: synch=True is not supported (kubetune runs PBT asynchronously)")
        if callable(hyperparam_mutations) or any(
            callable(v) and not hasattr(v, "to_spec") for v in (hyperparam_mutations or {}).values()
        ):
            raise ValueError(
                "PopulationBasedTraining: functions in hyperparam_mutations are user code, which the "
                "operator does not run; use a list or a domain such as tune.uniform(0, 1)"
            )
        super().__init__(
            metric,
            mode,
            time_attr=time_attr,
            perturbation_interval=perturbation_interval,
            burn_in_period=burn_in_period,
            hyperparam_mutations=space_spec(hyperparam_mutations or {}, "hyperparam_mutations"),
            quantile_fraction=quantile_fraction,
            resample_probability=resample_probability,
            perturbation_factors=list(perturbation_factors),
            require_attrs=require_attrs,
            seed=seed,
        )
        self.log_config = log_config


class PB2(TrialScheduler):
    """Population Based Bandits (Parker-Holder et al. 2020), Ray's asynchronous ``PB2``: PBT whose new configs
    are chosen by a Gaussian-process bandit within ``hyperparam_bounds`` (the operator's ``pb2`` scheduler; it
    computes each choice in a worker process; see ``docs/ray-tune.md`` for where it differs from Ray).

    Args:
        time_attr: result key of progress.
        metric: result key to optimize; None uses the experiment's.
        mode: ``"min"`` or ``"max"``; None uses the experiment's.
        perturbation_interval: perturb at most every this much ``time_attr``.
        hyperparam_bounds: key → ``[low, high]``, or a nested dict of those; a key a trial's config lacks
            starts at a value drawn uniformly from its bounds.
        quantile_fraction: top and bottom fraction, 0..0.5.
        log_config: accepted; each exploit is in the Trial's ``status.perturbations``, a ``TrialPerturbed``
            event and ``pbt_policy_<trial>.txt``.
        require_attrs: as Ray's.
        synch: must be False.
        custom_explore_fn: must be None (user code).
        seed: kubetune's: seeds the donor choices and the explore steps' random starts.

    Raises:
        ValueError: ``custom_explore_fn``, ``synch``, or no ``hyperparam_bounds``.
    """

    name = "pb2"

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: dict | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn=None,
        seed: int | None = None,
    ):
        if custom_explore_fn is not None:
            raise ValueError("PB2: custom_explore_fn is user code, which the operator does not run")
        if synch:
            raise ValueError("PB2: synch=True is not supported (kubetune runs PB2 asynchronously)")
        if not hyperparam_bounds:
            raise ValueError("PB2: hyperparam_bounds must be specified, e.g. {'lr': [1e-4, 1e-1]}")
        super().__init__(
            metric,
            mode,
            time_attr=time_attr,
            perturbation_interval=perturbation_interval,
            hyperparam_bounds=hyperparam_bounds,
            quantile_fraction=quantile_fraction,
            require_attrs=require_attrs,
            seed=seed,
        )
        self.log_config = log_config


def load_policy(text: str) -> tuple[dict, list[list]]:
    """Read a ``pbt_policy_<trial>.txt`` as Ray's replay does: follow the chain of exploits back from the last
    line; return ``(the first config, [[step, config], ...])``.

    Raises:
        ValueError: no line, or a line that is not Ray's ``[trial, donor, step, donor step, donor config,
            new config]``.
    """
    import json

    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines or not all(isinstance(x, list) and len(x) == 6 for x in lines):
        raise ValueError(
            "not a PBT policy file: expected lines [trial, donor, step, donor step, donor config, new config]"
        )
    policy, last_new, initial = [], None, None
    for old_tag, new_tag, _, new_step, old_config, new_config in reversed(lines):
        if last_new is not None and old_tag != last_new:
            break  # the chain of exploits ends here
        last_new, initial = new_tag, old_config
        policy.append([new_step, new_config])
    return initial, list(reversed(policy))


class PopulationBasedTrainingReplay(TrialScheduler):
    """Replays one PBT trial's policy on a new trial (Ray's ``PopulationBasedTrainingReplay``).

    The run gets the policy's first config (``num_samples`` must be 1); at each step of the policy the
    trial goes on from its own checkpoint with that step's config (the operator's ``pbt_replay``).

    Args:
        policy_file: a ``pbt_policy_<trial>.txt``: a local path, or its ``s3://``/``file://`` URI in the
            experiment's storage (read with this process's credentials and ``$AWS_ENDPOINT_URL_S3``).

    Attributes:
        config: the policy's first config, which the run uses as its config.

    Raises:
        ValueError: not a policy file.
        FileNotFoundError: no such file.
    """

    name = "pbt_replay"

    def __init__(self, policy_file: str):
        import os

        if "://" in policy_file:
            from kubetune.storage import open_storage

            parent, _, name = policy_file.rpartition("/")
            storage = open_storage(parent, os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
            text = storage.get_bytes(policy_file).decode()
        else:
            with open(policy_file) as f:
                text = f.read()
        self.config, policy = load_policy(text)
        super().__init__(policy=policy)


__getattr__ = unsupported_names(
    __name__,
    {
        "HyperBandForBOHB": (
            "BOHB's searcher is not available",
            "HyperBandScheduler with OptunaSearch(prune_early_stopped=True)",
        ),
        "ResourceChangingScheduler": (
            "a trial's pod resources are fixed when the pod is created",
            "resources_per_trial",
        ),
    },
)
