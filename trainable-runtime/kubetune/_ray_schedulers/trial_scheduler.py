"""Ray's ``ray.tune.schedulers.trial_scheduler``: its names from :mod:`kubetune.schedulers`."""

from kubetune.schedulers import FIFOScheduler, TrialScheduler

__all__ = ["FIFOScheduler", "TrialScheduler"]
