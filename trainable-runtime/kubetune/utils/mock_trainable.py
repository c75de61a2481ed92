"""Ray's path ``ray.tune.utils.mock_trainable``: ``MyTrainableClass``, the toy trainable Ray's example scripts
(``pbt_example.py``, ``async_hyperband_example.py``, ...) tune.

It runs in the trial pod like any class trainable; it needs nothing beyond the standard library.
"""

from __future__ import annotations

import json
import math
import os

from kubetune.runtime.trainable import Trainable

__all__ = ["MyTrainableClass"]

#: The file a checkpoint of :class:`MyTrainableClass` holds in its directory.
CHECKPOINT_FILE = "checkpoint"


class MyTrainableClass(Trainable):
    """A learning curve that rises as a sigmoid: ``episode_reward_mean = height * tanh(timestep / width)``.

    Config:
        width: how many steps the curve takes to rise (1).
        height: the value it rises to (1).

    Its checkpoint is the timestep, as JSON in the checkpoint directory (Ray 2.x's form: ``save_checkpoint``
    returns nothing and ``load_checkpoint`` gets the directory).
    """

    def setup(self, config: dict) -> None:
        """Start at timestep 0."""
        self.timestep = 0

    def step(self) -> dict:
        """One more timestep; report the curve's value there."""
        self.timestep += 1
        value = math.tanh(self.timestep / self.config.get("width", 1)) * self.config.get("height", 1)
        return {"episode_reward_mean": value}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Write the timestep into ``checkpoint_dir``."""
        with open(os.path.join(checkpoint_dir, CHECKPOINT_FILE), "w", encoding="utf-8") as file:
            json.dump({"timestep": self.timestep}, file)

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        """Read the timestep back from ``checkpoint_dir``."""
        with open(os.path.join(checkpoint_dir, CHECKPOINT_FILE), encoding="utf-8") as file:
            self.timestep = json.load(file)["timestep"]
