"""Ray Tune's trial schedulers as client-side specifications (``tune.schedulers.*``).

Owns the scheduler classes a ported script builds, with Ray 2.x's names, arguments and
defaults; each serializes to the Experiment's ``spec.scheduler`` (:mod:`kubetune.algorithm_spec`), and the
operator runs the algorithm. Called by users through Ray's path :mod:`kubetune.schedulers`
(``from kubetune.schedulers import ASHAScheduler``) and by :mod:`kubetune.sdk.tuner`.
Ray's schedulers kubetune lacks raise an error that says why. The operator's classes state the same
defaults (``tests/unit/test_ray_defaults.py`` fails when the two differ).
"""

from __future__ import annotations

from kubetune.algorithm_spec import AlgorithmSpec, unsupported_names

__all__ = [
    "TrialScheduler",
    "FIFOScheduler",
    "AsyncHyperBandScheduler",
    "ASHAScheduler",
    "HyperBandScheduler",
    "HyperBandForBOHB",
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


class HyperBandForBOHB(HyperBandScheduler):
    """HyperBand as BOHB runs it, Ray's ``HyperBandForBOHB``: a band's brackets fill from the largest down, a
    trial at its rung pauses until its whole bracket is there, and each rung result teaches ``TuneBOHB``
    (:class:`kubetune.search.bohb.TuneBOHB`) at that budget. Same arguments as :class:`HyperBandScheduler`.
    """

    name = "hyperband_bohb"


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
    """Population Based Training (Jaderberg et al. 2017), Ray's ``PopulationBasedTraining``.

    The worst trials restart from the best ones' checkpoints with explored configs (the operator's
    ``pbt`` scheduler; see ``docs/ray-tune.md`` for where it differs from Ray). Functions (in
    ``hyperparam_mutations`` or ``custom_explore_fn``) are user code: :func:`kubetune.run` and ``Tuner``
    pickle them to the experiment's storage, and the exploited trial's pod calls them.

    Args:
        time_attr: result key of progress.
        metric: result key to optimize; None uses the experiment's.
        mode: ``"min"`` or ``"max"``; None uses the experiment's.
        perturbation_interval: perturb at most every this much ``time_attr``.
        burn_in_period: no perturbation before this ``time_attr``.
        hyperparam_mutations: key → list of values, a domain (``tune.uniform(...)``), a function of no
            argument (``lambda: random.uniform(1e-4, 1e-1)``) or a nested dict of those.
        quantile_fraction: top and bottom fraction, 0..0.5.
        resample_probability: 0..1.
        perturbation_factors: factors of a perturbed number.
        custom_explore_fn: ``f(config) -> config``, applied after the built-in perturbations, or None.
        log_config: whether exploited trials write ``pbt_policy_<trial>.txt`` and ``pbt_global.txt``.
        require_attrs: as Ray's: a result without ``time_attr`` or the metric fails the run.
        synch: Ray's synchronous PBT: trials wait at each perturbation interval for the whole population.
        seed: kubetune's: seeds the donor and explore choices (a restarted operator decides the same).

    Raises:
        ValueError: a ``tune.sample_from`` among the mutations (as Ray), neither mutations nor
            ``custom_explore_fn``, or a value that is not a list, dict, domain or function.
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
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError(
                "You must specify at least one of `hyperparam_mutations` or `custom_explore_fn` to use PBT."
            )
        if custom_explore_fn is not None and not callable(custom_explore_fn):
            raise ValueError("PopulationBasedTraining: custom_explore_fn must be a function f(config) -> config")
        self._mutations, self._custom_explore_fn = hyperparam_mutations or {}, custom_explore_fn
        _mutations_spec(self._mutations, "hyperparam_mutations", lambda function: {})  # checked now
        super().__init__(
            metric,
            mode,
            time_attr=time_attr,
            perturbation_interval=perturbation_interval,
            burn_in_period=burn_in_period,
            quantile_fraction=quantile_fraction,
            resample_probability=resample_probability,
            perturbation_factors=list(perturbation_factors),
            log_config=None if log_config else False,
            require_attrs=require_attrs,
            synch=True if synch else None,
            seed=seed,
        )
        self.log_config = log_config

    def to_spec(self, on_function=None) -> dict:
        """Return ``spec.scheduler``; ``on_function`` gives the JSON standing for a function
        (:meth:`kubetune.shipping.FunctionPickles.marker`).

        Raises:
            ValueError: a function without ``on_function`` (it must be shipped to the trial pods).
        """
        from kubetune.search.sample import Function

        def ship(function: Function) -> dict:
            if on_function is None:
                raise ValueError(
                    "PopulationBasedTraining: its functions run in the trial pods; give the scheduler to "
                    "kubetune.run or Tuner, which ship them to the experiment's storage"
                )
            return on_function(function)

        spec = super().to_spec()
        if self._mutations:
            spec["params"]["hyperparam_mutations"] = _mutations_spec(self._mutations, "hyperparam_mutations", ship)
        if self._custom_explore_fn is not None:
            spec["params"]["custom_explore_fn"] = ship(Function(self._custom_explore_fn))
        return spec


def _mutations_spec(mutations: dict, path: str, ship) -> dict:
    """``hyperparam_mutations`` in its JSON form: lists and domains as :func:`kubetune.search.sample.space_spec`
    writes them, each function as ``ship(Function(f))`` gives it (Ray's checks and messages)."""
    from kubetune.search.sample import Domain, Function, space_spec

    spec = {}
    for key, value in mutations.items():
        where = f"{path}.{key}"
        if isinstance(value, Function):
            raise ValueError(
                "arbitrary tune.sample_from objects are not supported for `hyperparam_mutation` values."
                "You must use other built in primitives like tune.uniform, tune.loguniform, etc."
            )
        if isinstance(value, dict):
            spec[key] = _mutations_spec(value, where, ship)
        elif isinstance(value, (list, tuple, Domain)):
            spec[key] = space_spec(value, where)
        elif callable(value):
            spec[key] = ship(Function(value))
        else:
            raise ValueError(
                "`hyperparam_mutation` values must be either a List, Tuple, Dict, a tune search space object, "
                f"or a callable; {where} is a {type(value).__name__}"
            )
    return spec


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
        log_config: whether exploited trials write ``pbt_policy_<trial>.txt`` and ``pbt_global.txt`` (each
            exploit is in the Trial's ``status.perturbations`` and a ``TrialPerturbed`` event either way).
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
            log_config=None if log_config else False,
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


#: Ray's schedulers kubetune has not: name → (why, what to use); also raised by Ray's path :mod:`kubetune.schedulers`.
UNSUPPORTED = {
    "ResourceChangingScheduler": (
        "a trial's pod resources are fixed when the pod is created",
        "resources_per_trial",
    ),
}

__getattr__ = unsupported_names(__name__, UNSUPPORTED)
