"""Ray's ``ray.tune.schedulers.trial_scheduler``: its names from :mod:`kubetune.sdk.schedulers`."""

from kubetune.sdk.schedulers import FIFOScheduler, TrialScheduler

__all__ = ["FIFOScheduler", "TrialScheduler"]
