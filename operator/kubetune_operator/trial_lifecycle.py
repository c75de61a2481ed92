"""The trial lifecycle: what happens to a trial as its pods run and end.

Owns :class:`TrialLifecycle`: the phase changes of a trial's status (:meth:`TrialLifecycle.set` stamps start and
completion times), a pod's end read from its termination message (:mod:`kubetune_operator.podinput`) and decided by
the lifecycle table (:mod:`kubetune_operator.lifecycle`: done, paused, retried from the latest checkpoint, failed
after ``failure.maxFailures``), the pods (and gangs, token Secrets) to create and delete, the ended attempts'
objects to collect, and what it asked for recently (pods created in the last 30 s, Secrets asked to go). Called by
the controller's pass (:meth:`kubetune_operator.controller.ExperimentController.plan`), the PBT perturbation and
the admission of trials (new pods), and by ``kube.py`` through the controller (creates that failed). Pure: it
returns what to do in the pass's :class:`~kubetune_operator.plan.Plan`.
"""

from __future__ import annotations

from typing import Any, Mapping

from kubetune.env import OUTCOME_COMPLETED, OUTCOME_PAUSED, OUTCOME_STOPPED, STALL_REASONS
from kubetune.stop_criteria import should_stop

from . import status as st
from .builders import build_pod, build_token_secret, token_secret_name, trial_object
from .decisions import JournaledDecisions
from .gang import build_gang, gang_name, world_size
from .labels import label_value, pod_name
from .lifecycle import STOP_REASON, transition
from .plan import Plan, now_iso
from .podinput import parse_outcome
from .podview import WAITING_CAUSES, PodView
from .settings import Settings
from .spec_intake import SpecIntake
from .tokens import mint_token
from .trial_book import TERMINAL, TrialBook, TrialState

#: Trial messages of the retries whose cause the runtime reported (the others carry the pod's message).
_RETRY_MESSAGES = {
    "Terminated": "the trial was terminated before it finished, after a final checkpoint",
    "Fenced": "the collector refused the attempt's token; it stopped at once",
}
#: Why a container ended, by the kubelet's termination reason, when the runtime could not say (it was killed).
_KILLED_MESSAGES = {
    "OOMKilled": "the container went over its memory limit and the kernel killed it (OOMKilled, exit code 137); "
    "give trials more memory (spec.resourcesPerTrial.memory)",
}
_NO_RUNTIME_MESSAGE = " without the runtime's message"
#: Longest the outcome of a container trial's ended pod waits for its output to be read to its end (seconds): past
#: it, the trial ends on the results read (an event says so).
OUTPUT_WAIT_S = 60.0
#: Back-off before a gang that timed out partly scheduled is created again: the first value, doubled per
#: timeout in a row, up to the second (seconds).
GANG_BACKOFF_S = (10.0, 300.0)


class TrialLifecycle:
    """The lifecycle of one Experiment's trials, pass by pass.

    Args:
        intake: the spec in force; book: the trials; decisions: told when a trial ends.
        settings: the operator's settings; key: the collector's HMAC key (trial tokens).
    """

    def __init__(
        self, intake: SpecIntake, book: TrialBook, decisions: JournaledDecisions, settings: Settings, key: bytes
    ):
        self.intake, self.book, self.decisions, self.settings, self.key = intake, book, decisions, settings, key
        self.created_pods: dict[str, float] = {}  # pod name -> when it was asked for
        self.secrets_deleted: set[str] = set()  # token Secrets of ended attempts asked to go (not kept across restarts)
        self.output_read: dict[str, set[str]] = {}  # container-trial pods -> readers that read their output to its end
        self.ended_at: dict[str, float] = {}  # ended container-trial pods waiting for that -> when first seen ended
        self.output_errors: dict[str, str] = {}  # container-trial pods -> why their log could not be read, last

    def readers(self) -> set[str]:
        """Who reads a container trial's output: ``log`` (the operator's log stream, ``StdOut``) or ``sidecar``
        (kubetune's sidecar: the other kinds), and the sidecar too where it saves the checkpoint folder."""
        container = self.intake.spec.container
        if container is None:
            return set()
        return ({"sidecar"} if container.sidecar else set()) | (set() if container.sidecar_reads_metrics else {"log"})

    def read_to_end(self, pod: str, reader: str) -> None:
        """``reader`` read the output of container-trial pod ``pod`` to its end: once all :meth:`readers` did, its
        outcome may follow."""
        self.output_read.setdefault(pod, set()).add(reader)

    def read_by(self, pod: str, reader: str | None = None) -> bool:
        """Whether ``reader`` (None: every one of :meth:`readers`) read the output of pod ``pod`` to its end."""
        done = self.output_read.get(pod, set())
        return reader in done if reader is not None else self.readers() <= done

    def output_unreadable(self, pod: str, error: str) -> bool:
        """Why the log of container-trial pod ``pod`` could not be read, for the ``OutputNotRead`` event; returns
        whether it was the last error already."""
        known = self.output_errors.get(pod) == error
        self.output_errors[pod] = error
        return known

    def _output_pending(self, plan: Plan, trial: TrialState, pod: PodView, now: float) -> bool:
        """Whether the outcome of container-trial pod ``pod``, ended, waits for its output to be read to its end.

        The sidecar's part is read from the pod's status once the sidecar ended, since its last batch reached an
        operator that may have restarted since (the collector's word lives in memory, the pod's status does not):
        it exits 0 only once that batch, marked ``done``, was committed. One that ended otherwise sends nothing
        more: the trial ends on what was taken, and an event says so. The log is read again by a restarted
        operator, so its wait starts again with it."""
        if pod.sidecar_exit is not None and not self.read_by(pod.name, "sidecar"):
            self.read_to_end(pod.name, "sidecar")
            if pod.sidecar_exit != 0:
                plan.events.append(
                    (
                        trial.name,
                        "Warning",
                        "OutputNotRead",
                        f"the metrics sidecar of pod {pod.name} ended with exit code {pod.sidecar_exit} before its "
                        f"last batch was taken; the trial ends on the {trial.status.get('iteration') or 0} result(s) "
                        "taken",
                    )
                )
        if self.read_by(pod.name) or pod.restore_failed:  # read, or nothing ran that could write
            return False
        since = self.ended_at.setdefault(pod.name, now)
        if now - since < OUTPUT_WAIT_S:
            return True
        plan.events.append(
            (
                trial.name,
                "Warning",
                "OutputNotRead",
                f"the output of pod {pod.name} was not read to its end within {OUTPUT_WAIT_S:.0f} s of its end; "
                f"the trial ends on the {trial.status.get('iteration') or 0} result(s) read"
                + (
                    f"; reading it failed with {self.output_errors[pod.name]}" if pod.name in self.output_errors else ""
                ),
            )
        )
        return False

    def _container_decision(self, trial: TrialState) -> str | None:
        """``stop`` or ``pause`` when the scheduler or a stopper decided so for a container trial's current attempt
        (its pod, which hears no answer, is deleted), else None."""
        applied = self.decisions.applied.get(trial.name)
        if applied is None or applied.attempt != trial.attempt or applied.decision not in ("stop", "pause"):
            return None
        return applied.decision

    def pod_not_created(self, name: str) -> None:
        """The create of pod ``name`` failed or was not sent: ask for it again next pass."""
        self.created_pods.pop(name, None)

    def secrets_not_deleted(self, names: set[str]) -> None:
        """The token Secrets ``names`` were not deleted (or their trial's status not written first): ask again."""
        self.secrets_deleted -= names

    def reconcile(
        self, plan: Plan, pods: Mapping[str, PodView], lingering: Mapping[str, int], stop_reason: str | None, now: float
    ) -> None:
        """Compare each open trial with its current attempt's pod (``pods``: folded by gang) and add to ``plan``
        what follows: the pod's end (done, paused, retried, failed), a pod to create, a pod or gang to delete
        (the Experiment stops or is suspended, a gang timed out), the trial's new phase and reason.

        Args:
            lingering: ``{trial label: newest attempt}`` of gang members still Pending or Running
                (:meth:`lingering`): a trial's next gang waits for them to go.
            stop_reason: why the whole Experiment is ending, or None.
        """
        suspended = self.intake.spec.suspend
        grace = self.settings.trials.termination_grace_period_s
        for trial in sorted(self.book.open.values(), key=lambda t: t.index):
            if trial.phase in TERMINAL or trial.uid is None:
                continue
            pod = pods.get(pod_name(trial.name, trial.attempt))
            if pod is not None and pod.owner_uid and pod.owner_uid != trial.uid:
                pod = None  # an earlier Trial's pod of the same name, still being garbage-collected
            if pod is not None:
                self.created_pods.pop(pod.name, None)
            pod_active = pod is not None and not pod.gone and pod.phase in ("Pending", "Running")
            if (stop_reason or suspended) and pod_active:
                self.delete_attempt(plan, pod, grace)
                continue
            container = self.intake.spec.container is not None
            if container and pod_active and self._container_decision(trial):
                self.delete_attempt(plan, pod, grace)  # what the runtime does on the answer, for a container
            if pod is not None and pod.phase == "Pending" and self._gang_timed_out(plan, trial, pod, now):
                continue
            if pod is not None and (pod.phase in TERMINAL or pod.gone):  # a pod deleted while it ran ended too
                if container and trial.phase != "Paused" and self._output_pending(plan, trial, pod, now):
                    if pod.lingering:  # other containers hold the pod, and the metrics sidecar's last read with it
                        self.delete_attempt(plan, pod, grace)
                    continue  # its last lines may still be on their way
                self.output_read.pop(pod.name, None)
                self.ended_at.pop(pod.name, None)
                self.output_errors.pop(pod.name, None)
                if trial.phase != "Paused":  # a paused trial's attempt ended before: its outcome is recorded
                    self._pod_ended(plan, trial, pod, stop_reason, now)
                self.delete_attempt(plan, pod, grace)  # a gang's members still running
                pod = None
                if trial.phase in TERMINAL:
                    continue
            if stop_reason:
                self.finish(plan, trial, stop_reason, now, "stopped before it ran" if trial.phase == "Pending" else "")
                continue
            if suspended:
                if trial.phase != "Paused":
                    self.set(trial, now, phase="Paused", reason="Suspended", message=None)
                continue
            if trial.phase == "Paused":
                if trial.status.get("reason") != "Suspended":
                    continue  # scheduler-paused: resumed below when a slot frees
                self.set(trial, now, phase="Pending", reason="Resumed", attempt=trial.attempt + 1, message=None)
                plan.events.append((trial.name, "Normal", "TrialResumed", "resuming from the latest checkpoint"))
            if (
                pod is None
                and trial.status.get("podName") == pod_name(trial.name, trial.attempt)
                and trial.phase == "Running"
            ):
                if self.intake.spec.container is not None and self._container_decision(trial):
                    # deleted on its stop or pause (durable before the delete), its end unseen: an operator
                    # restarted since lists no such pod. It ended on that decision; nothing more can be read of it
                    gone = PodView(pod_name(trial.name, trial.attempt), trial.name, trial.attempt, "Failed", gone=True)
                    self._pod_ended(plan, trial, gone, stop_reason, now)
                    if trial.phase in TERMINAL or trial.phase == "Paused":
                        continue
                else:
                    self.disrupted(plan, trial, "PodDeleted", "the trial's pod disappeared", now)
            if pod is None:
                if self._may_create(trial, lingering, now):
                    self.create_pod(plan, trial, now)
                if trial.phase != "Pending":
                    self.set(trial, now, phase="Pending")
            elif pod.phase == "Running" and trial.phase != "Running" and not pod.deleting:
                stalled = trial.status.get("reason") in STALL_REASONS  # its runtime said so before this pass
                changes = {} if stalled else {"reason": "Running", "message": None}
                self.set(trial, now, phase="Running", scheduleTimeouts=None, nextAttemptTime=None, **changes)
                running = f"its {pod.gang.total} pods are" if pod.gang else f"pod {pod.name} is"
                plan.events.append((trial.name, "Normal", "TrialStarted", f"{running} running"))
            elif pod.phase == "Pending" and pod.waiting and trial.status.get("reason") != pod.waiting[0]:
                reason, message = pod.waiting
                self.set(trial, now, reason=reason, message=st.truncate_message(message, 1024))
                plan.events.append((trial.name, "Warning", "TrialWaiting", f"pod {pod.name}: {reason}: {message}"))
            elif pod.phase == "Pending" and not pod.waiting and trial.status.get("reason") in WAITING_CAUSES:
                self.set(trial, now, reason="Starting", message=None)  # the cause went away
            if pod is not None and pod.gang:
                members = {"ready": pod.gang.ready, "total": pod.gang.total}
                if trial.status.get("gang") != members:
                    self.set(trial, now, gang=members)

    def token(self, trial: str, attempt: int) -> str:
        """The collector bearer token of ``trial``'s ``attempt`` (see :func:`kubetune_operator.tokens.mint_token`)."""
        return mint_token(self.key, self.intake.namespace, trial, attempt, self.book.trials[trial].uid or "")

    def stalled(self, trial: str, stall: dict | None) -> None:
        """What stalls ``trial``'s current attempt, as its runtime reports it with each batch (``{"reason",
        "message"}``, a reason of ``kubetune.env.STALL_REASONS``; None: nothing): the Trial's ``status.reason``
        and ``message`` while it lasts, summed up in the Experiment's ``TrialsStalled`` condition (with a
        Warning event when it turns True)."""
        state = self.book.trials.get(trial)
        if state is None or state.phase in TERMINAL or state.phase == "Paused":
            return
        if stall is not None:
            message = st.truncate_message(stall["message"], 1024)
            if (state.status.get("reason"), state.status.get("message")) != (stall["reason"], message):
                state.status.update(reason=stall["reason"], message=message)
                state.dirty = state.phase_changed = True  # written in the next pass, not at the next interval
        elif state.status.get("reason") in STALL_REASONS:
            state.status["reason"] = "Running" if state.phase == "Running" else "Starting"
            state.status.pop("message", None)
            state.dirty = state.phase_changed = True

    def set(self, trial: TrialState, now: float, **changes: Any) -> None:
        """Apply ``changes`` to the trial's status (None removes a key), stamping start/completion times."""
        if "phase" in changes and changes["phase"] != trial.phase:
            trial.phase_changed = True
            if changes["phase"] == "Running":
                trial.status.setdefault("startTime", now_iso(now))
            if changes["phase"] in TERMINAL:
                trial.status["completionTime"] = now_iso(now)
        for key, value in changes.items():
            if value is None:
                trial.status.pop(key, None)
            else:
                trial.status[key] = value
        trial.dirty = True

    def disrupted(self, plan: Plan, trial: TrialState, reason: str, message: str, now: float) -> None:
        """Retry an attempt Kubernetes ended (eviction, preemption, drain, deletion, a SIGTERM the trial did
        not ask for) from the latest checkpoint, without counting it against ``failure.maxFailures``, as a
        Job's ``podFailurePolicy`` ignores ``DisruptionTarget``."""
        self.set(trial, now, phase="Pending", reason=reason, message=message, attempt=trial.attempt + 1)
        plan.events.append(
            (
                trial.name,
                "Warning",
                "TrialDisrupted",
                f"attempt {trial.attempt - 1} ended by {reason}: {message}; retrying from the latest "
                "checkpoint (not counted as a failure)",
            )
        )

    def _fail_attempt(self, plan: Plan, trial: TrialState, reason: str, message: str, now: float) -> None:
        failures = int(trial.status.get("failures") or 0) + 1
        max_failures = self.intake.spec.failure.max_failures
        message = st.truncate_message(message or reason, st.MAX_TRIAL_MESSAGE_BYTES)
        if 0 <= max_failures < failures:  # -1: retry without limit
            self.set(trial, now, phase="Failed", reason=reason, message=message, failures=failures)
            plan.events.append(
                (
                    trial.name,
                    "Warning",
                    "TrialFailed",
                    f"attempt {trial.attempt} failed ({reason}); no retries left: {message[-300:]}",
                )
            )
            self.decisions.end(trial, "error")
        else:
            self.set(
                trial,
                now,
                phase="Pending",
                reason="Retrying",
                message=message,
                failures=failures,
                attempt=trial.attempt + 1,
            )
            limit = "unlimited" if max_failures < 0 else max_failures
            plan.events.append(
                (
                    trial.name,
                    "Warning",
                    "TrialRetried",
                    f"attempt {trial.attempt - 1} failed ({reason}); retry {failures} of {limit} "
                    "from the latest checkpoint",
                )
            )

    def finish(self, plan: Plan, trial: TrialState, reason: str, now: float, message: str = "") -> None:
        """End ``trial`` Succeeded for ``reason`` and tell the scheduler and searcher."""
        self.set(trial, now, phase="Succeeded", reason=reason, message=message or None)
        plan.events.append(
            (trial.name, "Normal", "TrialSucceeded", f"{reason} at iteration {trial.status.get('iteration')}")
        )
        self.decisions.end(trial, "complete" if reason == "Completed" else "remove")

    def _pod_ended(self, plan: Plan, trial: TrialState, pod: PodView, stop_reason: str | None, now: float) -> None:
        outcome, refused = (
            parse_outcome(pod.message, self.intake.trial_dir(trial.name))
            if pod.phase == "Succeeded" and self.intake.spec.container is None
            else ({}, [])
        )
        if refused:
            plan.events.append(
                (
                    trial.name,
                    "Warning",
                    "OutcomeRefused",
                    st.truncate_message(f"pod {pod.name}'s termination message: left out: {'; '.join(refused)}", 900),
                )
            )
        kind = outcome.get("outcome")
        end = "Succeeded" if pod.phase == "Succeeded" else "Disrupted" if pod.disruption or pod.deleting else "Failed"
        if self.intake.spec.container is not None:  # no runtime says how it ended: the operator knows
            decided = self._container_decision(trial)
            if decided:
                end, kind = "Succeeded", OUTCOME_STOPPED if decided == "stop" else OUTCOME_PAUSED
                if decided == "stop" and self._met_stop(trial):  # as a runtime that stops on spec.stop completes
                    kind = OUTCOME_COMPLETED
            elif end == "Succeeded" and not trial.status.get("iteration"):
                self._fail_attempt(plan, trial, "MetricMissing", self._no_metric_message(pod), now)
                return
            elif end == "Succeeded":
                kind = OUTCOME_COMPLETED
        result = outcome.get("result")
        if result is not None and (result.get("training_iteration") or 0) > (trial.status.get("iteration") or 0):
            self.book.show_result(trial, result)  # its last results never reached this operator (it was down)
        checkpoint, iteration = outcome.get("checkpoint"), outcome.get("iteration")
        if checkpoint is not None and (iteration or 0) > ((trial.status.get("checkpoint") or {}).get("iteration") or 0):
            trial.status["checkpoint"] = {"uri": checkpoint, "iteration": iteration}
        situation = "stopping" if stop_reason else "suspending" if self.intake.spec.suspend else "running"
        step = transition(end, kind, situation)
        reason = stop_reason if step.reason == STOP_REASON else step.reason
        if step.pod_reason:
            reason = (pod.disruption if end != "Failed" else pod.reason) or reason
        if step.action == "complete" or step.action == "finish":
            self.finish(plan, trial, reason, now)
        elif step.action == "pause":
            self.set(trial, now, phase="Paused", reason=reason, message=None)
        elif step.action == "retry":
            self.disrupted(
                plan,
                trial,
                reason,
                st.truncate_message(
                    _RETRY_MESSAGES.get(step.reason, "") or pod.message or "the trial's pod was deleted", 300
                ),
                now,
            )
        elif step.reason == "NoOutcome":
            self._fail_attempt(
                plan,
                trial,
                reason,
                "the trial's process exited 0 without the runtime's outcome "
                "(is the pod's command `python -m kubetune.runtime`?)",
                now,
            )
        else:
            self._fail_attempt(
                plan,
                trial,
                reason,
                pod.message
                or _KILLED_MESSAGES.get(reason)
                or f"exit code {pod.exit_code}{_NO_RUNTIME_MESSAGE if self.intake.spec.container is None else ''}; "
                f"`kubectl logs {pod.name}` shows what the program printed",
                now,
            )

    def _met_stop(self, trial: TrialState) -> bool:
        """Whether the result ``trial`` was stopped at (:attr:`Applied.stopped_at`, not a later one its pod printed
        before it heard) meets ``spec.stop`` or says ``done``: the trial ended as done, not stopped early (Ray's
        ``Trial.should_stop``)."""
        applied = self.decisions.applied.get(trial.name)
        last = applied.stopped_at if applied is not None and applied.stopped_at else trial.status.get("lastResult")
        return bool((last or {}).get("done")) or should_stop(last or {}, self.intake.spec.stop)[0]

    def _no_metric_message(self, pod: PodView) -> str:
        spec = self.intake.spec
        metrics = spec.metric if isinstance(spec.metric, tuple) else (spec.metric,)
        collector = spec.container
        return (
            f"the container exited 0 and no line of its output reported {' and '.join(metrics)} "
            f"(metricsCollector: {collector.kind}, format {collector.format}"
            f"{', custom metricsFormat' if collector.metrics_format else ''}); "
            f"`kubectl logs {pod.name}` shows what it printed"
        )

    def delete_attempt(self, plan: Plan, pod: PodView, grace: int) -> None:
        """Delete the attempt's pod, or every member of its gang still Pending or Running."""
        if pod.gang is not None:
            plan.delete_pods.extend((name, grace) for name in pod.gang.active)
        elif not pod.deleting and not pod.gone and (pod.phase in ("Pending", "Running") or pod.lingering):
            plan.delete_pods.append((pod.name, grace))

    def lingering(self, pods: Mapping[str, PodView]) -> dict[str, int]:
        """``{trial label: newest attempt}`` of gang members still Pending or Running, deleting or not."""
        lingering: dict[str, int] = {}
        for view in pods.values():
            if view.rank is not None and not view.gone and view.phase in ("Pending", "Running"):
                lingering[view.trial] = max(lingering.get(view.trial, -1), view.attempt)
        return lingering

    def _may_create(self, trial: TrialState, lingering: Mapping[str, int], now: float) -> bool:
        """Whether the trial's next gang may be created now: not before the pods of its earlier attempts
        are gone (a gang's resources are never held twice), nor during the back-off of a timed-out gang."""
        if lingering.get(label_value(trial.name), trial.attempt) < trial.attempt:
            return False
        after = trial.status.get("nextAttemptTime")
        return not after or st.parse_time(after).timestamp() <= now

    def _gang_timed_out(self, plan: Plan, trial: TrialState, pod: PodView, now: float) -> bool:
        """The operator's own all-or-nothing rule: a gang with some members scheduled and others not for
        longer than ``workers.scheduleTimeoutSeconds`` (since its first member was bound to a node: time spent
        waiting for admission, all members unbound, does not count) is deleted whole,
        so that what its scheduled pods hold is free for others, and retried as the next attempt after a
        back-off (10 s doubling per timeout in a row, at most 5 min); not counted as a failure."""
        timeout = self.intake.spec.workers_schedule_timeout_s
        gang = pod.gang
        if gang is None or not timeout or not 0 < gang.scheduled < gang.total or not gang.scheduled_at:
            return False
        waited = now - st.parse_time(gang.scheduled_at).timestamp()
        if waited < timeout:
            return False
        self.delete_attempt(plan, pod, 0)
        timeouts = int(trial.status.get("scheduleTimeouts") or 0) + 1
        backoff = min(GANG_BACKOFF_S[0] * 2 ** (timeouts - 1), GANG_BACKOFF_S[1])
        message = (
            f"only {gang.scheduled} of the gang's {gang.total} pods were scheduled after {waited:.0f} s "
            f"(workers.scheduleTimeoutSeconds {timeout}); deleted them all to free their nodes, retrying in "
            f"{backoff:.0f} s"
        )
        self.set(
            trial,
            now,
            phase="Pending",
            reason="GangTimeout",
            message=message,
            attempt=trial.attempt + 1,
            scheduleTimeouts=timeouts,
            nextAttemptTime=now_iso(now + backoff),
        )
        plan.events.append((trial.name, "Warning", "GangTimeout", message))
        return True

    def collect(self, plan: Plan, pods: Mapping[str, PodView]) -> None:
        """For ended pods whose outcome the Trial's status now holds (an earlier attempt's pod, or the
        current attempt's once the trial ended or paused; never one of an attempt newer than the status
        knows): delete the attempt's token Secret, and the pod as ``spec.podRetentionPolicy`` says."""
        for pod in pods.values():
            if pod.phase not in ("Succeeded", "Failed") and not pod.gone:
                continue
            trial = self.book.by_label.get(pod.trial)
            if trial is None or trial.uid is None or pod.owner_uid not in (None, trial.uid):
                continue
            if pod.attempt < trial.attempt or (
                pod.attempt == trial.attempt and (trial.phase in TERMINAL or trial.phase == "Paused")
            ):
                head = pod_name(trial.name, pod.attempt)
                secret = token_secret_name(head, trial.uid)
                if secret not in self.secrets_deleted:
                    self.secrets_deleted.add(secret)
                    plan.collect_secrets.append((secret, trial.name))
                    if pod.rank is not None:
                        plan.collect_gangs.append((gang_name(head), trial.name))
                if self.intake.spec.pod_retention.deletes(pod.phase) and not pod.deleting:
                    plan.collect_pods.append((pod.name, trial.name))

    def create_pod(self, plan: Plan, trial: TrialState, now: float) -> None:
        """Ask for the pod of the trial's current attempt, unless asked for in the last 30 s (index lag)."""
        name = pod_name(trial.name, trial.attempt)
        if now - self.created_pods.get(name, -1e9) < 30:
            return
        self.created_pods[name] = now
        pod = self._pod(trial)
        spec = self.intake.experiment["spec"]
        if world_size(spec) > 1:
            podgroups = self.settings.trials.gang_scheduling == "podgroup"
            plan.gangs[name] = build_gang(pod, spec["resourcesPerTrial"], podgroups)
        plan.create_pods.append(pod)
        plan.token_secrets[name] = build_token_secret(
            pod, self._trial_object(trial), self.token(trial.name, trial.attempt)
        )
        if trial.status.get("podName") != name:
            self.set(trial, now, podName=name)
        trial.phase_changed |= not trial.written  # a new Trial's first status goes out with its first pod

    def _trial_object(self, trial: TrialState) -> dict:
        return trial_object(
            self.intake.namespace,
            trial.name,
            trial.uid,
            trial.index,
            trial.config,
            trial.tag,
            trial.status.get("displayName"),
        )

    def _pod(self, trial: TrialState) -> dict:
        return build_pod(
            self.intake.experiment,
            self._trial_object(trial),
            trial.attempt,
            self.settings,
            restore_from=trial.restore_from,
            pbt_policy=trial.pbt_policy,
            pbt_explore=self.decisions.pod_explores.get(trial.name),
        )
