"""PBT perturbation: carrying out the exploits a population-based scheduler decided.

Owns :class:`Perturbation` (no state of its own: the exploits waiting are the journaled decisions') and what a
perturbation shows: the trial's explored config, the donor's checkpoint it restores, its ``status.perturbations``
(the newest :data:`MAX_PERTURBATIONS_KEPT`), the policy line of a PBT replay, and the ``TrialPerturbed`` and
``ExploreFailed`` events. Called by the controller's pass
(:meth:`kubetune_operator.controller.ExperimentController.plan`) before free slots go to other trials. Pure.
"""

from __future__ import annotations

from kubetune.checkpoint_store import checkpoint_uri

from . import status as st
from .decisions import JournaledDecisions
from .plan import Plan, now_iso
from .spec_intake import SpecIntake
from .trial_admission import TrialAdmission
from .trial_book import TERMINAL, TrialBook
from .trial_lifecycle import TrialLifecycle

#: PBT perturbations kept in a Trial's ``status.perturbations`` (the newest).
MAX_PERTURBATIONS_KEPT = 10
#: The message of a trial paused for a PB2 exploit whose config is still being chosen.
EXPLORING_MESSAGE = "PB2 is choosing the config this trial continues with (a Gaussian-process bandit step)"


class Perturbation:
    """Carries out one Experiment's PBT exploits.

    Args:
        intake, book, decisions, lifecycle, admission: the spec in force, the trials, the journaled decisions
            (the exploits), the lifecycle (new attempts) and the admission (free slots).
    """

    def __init__(
        self,
        intake: SpecIntake,
        book: TrialBook,
        decisions: JournaledDecisions,
        lifecycle: TrialLifecycle,
        admission: TrialAdmission,
    ):
        self.intake, self.book, self.decisions, self.lifecycle, self.admission = (
            intake,
            book,
            decisions,
            lifecycle,
            admission,
        )

    def perturb(self, plan: Plan, now: float, stop_reason: str | None, suspended: bool) -> None:
        """Carry out the PBT exploits of trials now paused for them: the explored config, the donor's
        checkpoint to restore, a new attempt (docs/ray-tune.md, PBT)."""
        for name, exploit in list(self.decisions.exploits.items()):
            trial = self.book.trials.get(name)
            if trial is None or trial.phase in TERMINAL or trial.attempt > exploit["attempt"]:
                # ended, or carried out before a restart; its pods call the user functions still
                self.decisions.exploit_done(name, trial is not None and trial.phase not in TERMINAL)
                continue
            if exploit["config"] is None:  # PB2 has yet to choose it
                if trial.phase == "Paused" and trial.status.get("reason") != "Exploring":
                    self.lifecycle.set(trial, now, reason="Exploring", message=EXPLORING_MESSAGE)
                continue
            if trial.phase != "Paused" or stop_reason or suspended or self.book.active() >= self.admission.limit():
                continue
            self.decisions.exploit_done(name, True)  # its pods call the user explore functions, if any
            uri = checkpoint_uri(self.intake.trial_dir(exploit["donor"]), exploit["iteration"])
            in_pod = exploit.get("explore") or {}
            by_pod = set(exploit["config"]) if in_pod.get("customExploreFn") else set()
            by_pod |= {r["path"][0] for r in in_pod.get("resample") or ()}  # chosen by the pod: shown once reported
            changed = sorted(
                k
                for k in set(exploit["config"]) | set(exploit["oldConfig"])
                if exploit["config"].get(k) != exploit["oldConfig"].get(k) or k in by_pod
            )
            record = {
                "donor": exploit["donor"],
                "iteration": exploit["iteration"],
                "time": now_iso(now),
                "operations": exploit["operations"],
                "oldConfig": {k: exploit["oldConfig"].get(k) for k in changed},
                "newConfig": {k: exploit["config"].get(k) for k in changed},
            }
            trial.config, trial.restore_from = dict(exploit["config"]), uri
            trial.pbt_policy = (
                None
                if exploit["donor"] == trial.name or not exploit.get("logConfig", True)
                else [  # a replay's own steps: no policy
                    trial.name,
                    exploit["donor"],
                    exploit.get("trialIteration", 0),
                    exploit["iteration"],
                    exploit["donorConfig"],
                    exploit["config"],
                ]
            )
            lineage = (trial.status.get("perturbations") or [])[-(MAX_PERTURBATIONS_KEPT - 1) :] + [record]
            self.lifecycle.set(
                trial,
                now,
                phase="Pending",
                reason="Perturbed",
                attempt=trial.attempt + 1,
                message=None,
                config=trial.config,
                restoreFrom=uri,
                perturbations=lineage,
                iteration=exploit["iteration"],
                checkpoint={"uri": uri, "iteration": exploit["iteration"]},
            )
            shown = {k: "(chosen in the pod)" if k in by_pod else repr(record["newConfig"][k]) for k in changed}
            explored = ", ".join(f"{k} {record['oldConfig'][k]!r} -> {shown[k]}" for k in changed)
            if exploit.get("error"):
                plan.events.append(
                    (
                        trial.name,
                        "Warning",
                        "ExploreFailed",
                        st.truncate_message(
                            f"PB2's explore step failed, the donor's config is kept: {exploit['error']}", 900
                        ),
                    )
                )
            plan.events.append(
                (
                    trial.name,
                    "Normal",
                    "TrialPerturbed",
                    f"exploit: restoring {exploit['donor']} at iteration {exploit['iteration']}; "
                    f"explore: {explored or 'config unchanged'}",
                )
            )
            self.lifecycle.create_pod(plan, trial, now)
