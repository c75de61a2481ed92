"""Ray's ``ray.tune.schedulers.pbt``: its names from :mod:`kubetune.sdk.schedulers`."""

from kubetune.sdk.schedulers import PopulationBasedTraining, PopulationBasedTrainingReplay

__all__ = ["PopulationBasedTraining", "PopulationBasedTrainingReplay"]
