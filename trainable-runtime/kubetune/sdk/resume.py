"""Ray 2.x's ``ResumeConfig``: which trials ``Tuner.restore`` resumes, restarts or skips.

Owns :class:`ResumeConfig`, taken by :meth:`kubetune.sdk.tuner.Tuner.restore` (and by its Ray 2.x
keywords ``resume_unfinished``, ``resume_errored``, ``restart_errored``). An Experiment lives in the
cluster: its unfinished trials go on by themselves (they resume from their checkpoints) and its
ended trials keep their outcome, which is Ray's default. Restarting or resuming ended trials, or
skipping unfinished ones, would rewrite what the operator recorded, so only the default is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kubetune.algorithm_spec import unsupported

__all__ = ["ResumeConfig"]


class ResumeType(str, Enum):
    """What to do with a group of trials on restore (Ray's ``ResumeConfig.ResumeType``)."""

    RESUME = "resume"
    RESTART = "restart"
    SKIP = "skip"


@dataclass
class ResumeConfig:
    """Ray 2.x's ``ResumeConfig(finished=SKIP, unfinished=RESUME, errored=SKIP)``.

    Raises:
        NotImplementedError: (from :meth:`check`) anything but the default, with why and what to use.
    """

    ResumeType = ResumeType

    finished: str = ResumeType.SKIP
    unfinished: str = ResumeType.RESUME
    errored: str = ResumeType.SKIP

    def check(self) -> None:
        """Raise for what kubetune cannot honour: anything but Ray's default."""
        wanted = {"finished": ResumeType.SKIP, "unfinished": ResumeType.RESUME, "errored": ResumeType.SKIP}
        for group, default in wanted.items():
            value = ResumeType(getattr(self, group))
            if value != default:
                raise unsupported(
                    f"ResumeConfig({group}={value.value!r})",
                    "an Experiment's trials are Kubernetes objects: unfinished ones go on by themselves and "
                    "ended ones keep their outcome",
                    "a new tune.run with their configs as points_to_evaluate (BasicVariantGenerator)",
                )

    @classmethod
    def from_flags(cls, resume_unfinished: bool = True, resume_errored: bool = False, restart_errored: bool = False):
        """Ray 2.x's ``Tuner.restore`` keywords as a ResumeConfig."""
        errored = ResumeType.RESTART if restart_errored else ResumeType.RESUME if resume_errored else ResumeType.SKIP
        unfinished = ResumeType.RESUME if resume_unfinished else ResumeType.SKIP
        return cls(unfinished=unfinished, errored=errored)
