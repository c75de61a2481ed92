"""PB2's explore step: the GP-bandit choice of a new config (Parker-Holder et al., "Provably Efficient Online
Hyperparameter Optimization with Population-Based Bandits", NeurIPS 2020), as Ray Tune 2.x ``schedulers/pb2.py``
and ``pb2_utils.py`` compute it.

Owns :func:`select` (one explore step, a pure function of its job), the time-varying squared-exponential kernel
(:class:`TimeVaryingSquaredExp`, Bogunovic et al., "Time-Varying Gaussian Process Bandit Optimization", AISTATS
2016) and the UCB acquisition. The Gaussian process is scikit-learn's. Called by
:mod:`kubetune_operator.explore_pool` in a worker process (a step fits several GPs: 0.1 s to minutes), never on the
operator's event loop; :class:`kubetune_operator.schedulers.pb2.PB2` makes the jobs and takes the outcomes.

The data are rows ``[trial, time, [hyperparameter values], reward]`` (reward: the metric, sign-adjusted so that
higher is better), one per perturbation-time result. A step:

1. sorts the rows by time (stably), differences reward and time within each (trial, config) group, keeps
   steps with a positive time change: ``y`` is the reward change per unit of time, ``R_before`` the reward at
   the start of the step; the last 1,000 steps are kept;
2. chooses how many of the most recent steps to fit (all below 200; above, by the log marginal likelihood of
   GPs fitted to the last 200, 210, ... steps), normalizes time and ``R_before`` by their range and the
   hyperparameters by their bounds, standardizes ``y`` (clipped to ±2);
3. fits a GP to ``y``, and a second one with the configs chosen since the last new time as pseudo-points
   (``y`` = 0: they lower the variance there, so concurrent steps do not choose the same config);
4. maximizes UCB = mean(GP 1) + sqrt(0.2 + max(0, log(0.4 n))) * variance(GP 2) over the hyperparameters,
   time and ``R_before`` fixed at the donor's last step, by L-BFGS-B from 10 uniformly random starts.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import Hyperparameter, Kernel

__all__ = ["TimeVaryingSquaredExp", "select", "steps"]

#: Steps kept (Ray: the last 1,000 rows of its frame).
MAX_STEPS = 1000
#: Below this many steps all are fitted; above, the window is chosen in increments of ``WINDOW_STEP``.
MIN_WINDOW, WINDOW_STEP = 200, 10
#: Random starts of the acquisition's optimizer, and its iteration and evaluation limits.
ACQUISITION_STARTS, ACQUISITION_MAXITER = 10, 200


class TimeVaryingSquaredExp(Kernel):
    """``variance * exp(-|x - x'|^2 / lengthscale) * (1 - epsilon) ** (|t - t'| / 2)``: column 0 of the input
    is time, the rest the features (Ray's ``TV_SquaredExp``). Hyperparameters in that order, fitted in log
    space within ``(1e-5, 1e5)``, ``(1e-5, 1e5)`` and ``(1e-5, 0.5)``."""

    def __init__(self, variance: float = 1.0, lengthscale: float = 1.0, epsilon: float = 0.1):
        self.variance, self.lengthscale, self.epsilon = variance, lengthscale, epsilon

    _BOUNDS = ((1e-5, 1e5), (1e-5, 1e5), (1e-5, 0.5))

    @property
    def hyperparameters(self) -> list[Hyperparameter]:
        names = ("variance", "lengthscale", "epsilon")
        return [Hyperparameter(name, "numeric", bounds) for name, bounds in zip(names, self._BOUNDS)]

    @property
    def theta(self) -> np.ndarray:
        return np.log([self.variance, self.lengthscale, self.epsilon])

    @theta.setter
    def theta(self, theta: np.ndarray) -> None:
        self.variance, self.lengthscale, self.epsilon = np.exp(theta)

    @property
    def bounds(self) -> np.ndarray:
        return np.log(np.array(self._BOUNDS, dtype=float))

    def __call__(self, X, Y=None, eval_gradient=False):
        X = np.atleast_2d(X)
        Y = X if Y is None else np.atleast_2d(Y)
        epsilon = min(max(self.epsilon, 1e-5), 0.5)
        half_time = np.abs(X[:, :1] - Y[:, :1].T) / 2
        decay = (1 - epsilon) ** half_time
        sq_dist = ((X[:, None, 1:] - Y[None, :, 1:]) ** 2).sum(axis=-1)
        K = self.variance * np.exp(-sq_dist / self.lengthscale) * decay
        if not eval_gradient:
            return K
        # d K / d log(hyperparameter), in the order of ``theta``
        return K, np.dstack([K, K * sq_dist / self.lengthscale, -K * half_time * epsilon / (1 - epsilon)])

    def diag(self, X):
        return np.full(np.atleast_2d(X).shape[0], self.variance, dtype=float)

    def is_stationary(self) -> bool:
        return False


def _scale(data: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``data`` mapped to 0..1 by the per-column minimum and maximum of ``reference``."""
    low, high = np.min(reference, axis=0), np.max(reference, axis=0)
    return (data - low) / (high - low + 1e-8)


def _standardize(y: np.ndarray) -> np.ndarray:
    return np.clip((y - y.mean()) / (y.std() + 1e-8), -2, 2)


def _fit(X: np.ndarray, y: np.ndarray) -> GaussianProcessRegressor:
    def gp(alpha: float) -> GaussianProcessRegressor:
        return GaussianProcessRegressor(kernel=TimeVaryingSquaredExp(), optimizer="fmin_l_bfgs_b", alpha=alpha)

    try:
        return gp(1e-10).fit(X, y)
    except np.linalg.LinAlgError:  # duplicate points: a little jitter on the diagonal (see docs/ray-tune.md)
        return gp(1e-3).fit(X, y)


def _design(X: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Normalize time and ``R_before`` by their range in ``X``, hyperparameters by ``bounds`` (2 x d)."""
    limits = np.hstack([np.vstack([X[:, :2].min(axis=0), X[:, :2].max(axis=0)]), bounds])
    return _scale(X, limits)


def _window(X: np.ndarray, y: np.ndarray, bounds: np.ndarray) -> int:
    """How many of the most recent steps to fit: all below ``MIN_WINDOW``, else the window (200, 210, ...)
    whose GP has the highest log marginal likelihood."""
    if len(X) < MIN_WINDOW:
        return len(X)
    lengths = range(MIN_WINDOW, len(X) + 1, WINDOW_STEP)
    scores = [
        _fit(_design(X[-n:], bounds), _standardize(y[-n:]).reshape(-1, 1)).log_marginal_likelihood_value_
        for n in lengths
    ]
    return lengths[int(np.argmax(scores))]


def _ucb(mean_gp: GaussianProcessRegressor, var_gp: GaussianProcessRegressor, x: np.ndarray, fixed: np.ndarray):
    kappa = math.sqrt(0.2 + max(0.0, math.log(0.4 * len(mean_gp.X_train_))))
    point = np.concatenate([fixed, x])[None, :]
    _, std = var_gp.predict(point, return_std=True)
    return float(np.ravel(mean_gp.predict(point))[0]) + kappa * float(np.ravel(std)[0]) ** 2


def steps(rows: list[list]) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The reward-change steps of ``rows`` (module docstring, step 1).

    Args:
        rows: ``[trial, time, [values], reward]`` in the order they were recorded.

    Returns:
        ``(X, y, trials, rewards)``: X is n x (2 + d) ``[time, R_before, values...]``, y the reward change per
        unit of time, ``trials`` and ``rewards`` each step's trial and reward at its end; the last
        ``MAX_STEPS``, in time order. Non-finite steps are left out.
    """
    ordered = sorted(range(len(rows)), key=lambda i: rows[i][1])  # stable: ties keep their recorded order
    last: dict[tuple, tuple[float, float]] = {}
    X, y, trials, rewards = [], [], [], []
    for i in ordered:
        trial, time, values, reward = rows[i]
        group = (trial, *values)
        before = last.get(group)
        last[group] = (time, reward)
        if before is None or not time - before[0] > 0:
            continue
        change = (reward - before[1]) / (time - before[0])
        if math.isfinite(change) and math.isfinite(before[1]):
            X.append([time, before[1], *values])
            y.append(change)
            trials.append(trial)
            rewards.append(reward)
    width = 2 + (len(rows[0][2]) if rows else 0)
    X_, y_ = np.array(X, dtype=float).reshape(-1, width), np.array(y, dtype=float)
    return X_[-MAX_STEPS:], y_[-MAX_STEPS:], trials[-MAX_STEPS:], np.array(rewards[-MAX_STEPS:], dtype=float)


def select(job: dict[str, Any]) -> dict[str, Any]:
    """One PB2 explore step.

    Args:
        job: ``{"rows": [[trial, time, [values], reward], ...]`` (the data up to the exploit, in order),
            ``"bounds": [[low, high], ...]`` (one per value), ``"donor"`` (the trial exploited),
            ``"current": [[values], ...] | None`` (configs chosen since the data's latest time),
            ``"seed": int`` (the random starts of the acquisition's optimizer)}.

    Returns:
        ``{"values": [float, ...], "time": t, "reward": r}``: the chosen values (rounded to float32, as Ray's)
        and the donor's last step's time and reward; ``{"values": None}`` when the donor has no step yet (Ray
        then keeps the donor's config).

    Raises:
        ValueError, numpy.linalg.LinAlgError: data scikit-learn cannot fit (the caller keeps the donor's config).
    """
    with warnings.catch_warnings():  # a hyperparameter at its bound is normal here, not news for the operator's log
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _select(job)


def _select(job: dict[str, Any]) -> dict[str, Any]:
    X, y, trials, rewards = steps(job["rows"])
    mine = [i for i, trial in enumerate(trials) if trial == job["donor"]]
    if not mine:
        return {"values": None}
    donor_step = X[mine[-1]]
    bounds = np.array(job["bounds"], dtype=float).T  # 2 x d: lows, highs
    length = _window(X, y, bounds)
    X, y = X[-length:], y[-length:]
    design, target = _design(X, bounds), _standardize(y).reshape(-1, 1)
    fixed = _scale(donor_step[:2], X[:, :2])
    mean_gp = _fit(design, target)
    var_gp = mean_gp
    if job.get("current"):
        chosen = _scale(np.array(job["current"], dtype=float), bounds)
        pseudo = np.hstack([np.tile(fixed, (len(chosen), 1)), chosen])
        targets = np.vstack([target, np.zeros((len(chosen), 1))])
        var_gp = _fit(np.vstack([design, pseudo]), targets)
    rng = np.random.RandomState(job["seed"])
    dims = bounds.shape[1]
    best, best_value = None, -math.inf
    for _ in range(ACQUISITION_STARTS):
        start = rng.uniform(0, 1, dims)
        found = minimize(
            lambda x: -_ucb(mean_gp, var_gp, x, fixed),
            start,
            bounds=[(0, 1)] * dims,
            method="L-BFGS-B",
            options={"maxiter": ACQUISITION_MAXITER, "maxfun": ACQUISITION_MAXITER},
        )
        value = _ucb(mean_gp, var_gp, found.x, fixed)
        if best is None or value > best_value:
            best, best_value = found.x, value
    low, high = bounds.min(axis=0), bounds.max(axis=0)
    values = (np.clip(best, 0, 1) * (high - low) + low).astype(np.float32)
    return {"values": [float(v) for v in values], "time": float(donor_step[0]), "reward": float(rewards[mine[-1]])}
