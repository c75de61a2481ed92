"""Ray's ``ray.tune.schedulers.pbt``: its names from :mod:`kubetune.schedulers`."""

from kubetune.schedulers import PopulationBasedTraining, PopulationBasedTrainingReplay

__all__ = ["PopulationBasedTraining", "PopulationBasedTrainingReplay"]
