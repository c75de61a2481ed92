"""Kubernetes API calls of the operator, run in a thread pool off kopf's event loop.

Called by the Experiment daemon (``handlers.py``) to carry out a
:class:`kubetune_operator.plan.Plan`, and at startup for the collector's
key Secret. Creates treat 409 AlreadyExists as success (names are
deterministic) when the object found is ours (:class:`NameTaken` otherwise: an object of another owner is
never used); responses are read as plain JSON, not client models.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from kubernetes import client, config

from .builders import controller_uid
from .gang import PODGROUP_API
from .journal import LABEL_STATE, Write
from .labels import (
    API_VERSION,
    EXPERIMENT_KIND,
    EXPERIMENT_PLURAL,
    GROUP,
    LABEL_EXPERIMENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    TRIAL_PLURAL,
    VERSION,
    label_value,
)
from .plan import Plan, created_event
from .tokens import key_from_secret_data, key_secret_data, new_key

log = logging.getLogger("kubetune.kube")
_FAILED = object()
#: HTTP statuses of a create the API server refused for what it contains (not for load or quota).
_INVALID = (400, 422)
#: The component the operator's events come from (``kubectl describe``'s "From"; kopf's are set to it too).
EVENT_COMPONENT = "kubetune-operator"


def _strict_json(body: dict) -> dict:
    """``body``, checked to be JSON the API server can decode: no NaN or infinity, which Python's ``json`` writes
    and Go's refuses (one such value made every later patch of the object fail).

    Raises:
        ValueError: it holds one; the patch is not sent.
    """
    try:
        json.dumps(body, allow_nan=False)
    except ValueError:
        raise ValueError("not sent: it holds a NaN or infinite number, which JSON cannot carry") from None
    return body


def end_event_name(experiment_uid: str) -> str:
    """The name of the Event that announces the end of the Experiment with ``experiment_uid``: one name per
    Experiment, so a second post (after a restart, or a retried pass) is refused as AlreadyExists."""
    return f"{experiment_uid}.experiment-end"


class NameTaken(Exception):
    """A Trial or pod to create exists under its name and is not ours: another controller owns it, or none
    does (an earlier Experiment of the same name deleted with ``--cascade=orphan`` left it). It is never
    used; the message says what to do."""


def _check_ours(kind: str, existing: dict, manifest: dict) -> None:
    """Raise :class:`NameTaken` unless ``existing`` (found under ``manifest``'s name) has ``manifest``'s controller."""
    theirs, ours = controller_uid(existing), controller_uid(manifest)
    if theirs != ours:
        meta = manifest["metadata"]
        owner = f"the {kind} is controlled by uid {theirs}" if theirs else f"the {kind} has no owner (orphaned)"
        raise NameTaken(
            f"{kind} {meta['name']} already exists and is not this Experiment's ({owner}; kubetune never adopts "
            f"it): delete it (kubectl delete {kind.lower()} {meta['name']} -n {meta['namespace']}; an earlier "
            f"Experiment of this name deleted with --cascade=orphan leaves its Trials) or use another name"
        )


def api_message(exc: Exception) -> str:
    """What the API server said, for conditions and events: its ``Status`` message (e.g. ``trials.kubetune.io
    "x" is forbidden: exceeded quota ...``) when it sent one, else the HTTP reason or the error itself."""
    body = getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    return message or getattr(exc, "reason", None) or str(exc)


def _drain(response) -> None:
    """Read a raw response to its end, so urllib3 returns the connection to its pool (an unread one is
    dropped, and the next call pays a new TLS handshake)."""
    response.data  # noqa: B018 - reading it is the point


class Kube:
    """A thread-pooled Kubernetes client (in-cluster config, else ``$KUBECONFIG``)."""

    def __init__(self, workers: int = 16):
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(client_configuration=cfg)
        cfg.connection_pool_maxsize = workers * 2
        api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._podgroups: bool | None = None
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")

    async def call(self, fn, *args, **kwargs):
        """Run the blocking ``fn(*args, **kwargs)`` on the pool and return its result (or raise its error)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    # ----- trials and pods -----------------------------------------------------------------
    def _create_trial(self, manifest: dict) -> str:
        ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        try:
            resp = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, TRIAL_PLURAL, manifest, _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            resp = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, TRIAL_PLURAL, name, _preload_content=False
            )
            _check_ours("Trial", json.loads(resp.data), manifest)
        return json.loads(resp.data)["metadata"]["uid"]

    def list_trials(
        self, namespace: str, experiment: str, uid: str, token: str | None = None, limit: int = 500
    ) -> tuple[list[dict], str | None]:
        """One page of the Trials of ``experiment`` (by the experiment label) owned by the Experiment with
        ``uid``, as dicts, and the token of the next page (None after the last one).

        Trials of an earlier Experiment of the same name (still being garbage-collected) are left out.
        Pages keep a restart with 10,000 Trials from holding them all as JSON at once.
        """
        kwargs = {"_continue": token} if token else {}
        resp = self.custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            TRIAL_PLURAL,
            label_selector=f"{LABEL_EXPERIMENT}={label_value(experiment)}",
            limit=limit,
            _preload_content=False,
            **kwargs,
        )
        page = json.loads(resp.data)
        return (
            [
                t
                for t in page["items"]
                if any(ref.get("uid") == uid for ref in t["metadata"].get("ownerReferences") or ())
            ],
            page["metadata"].get("continue") or None,
        )

    # ----- the journal (kubetune_operator.journal) ---------------------------------------
    def list_journal(self, namespace: str, experiment: str) -> list[dict]:
        """The journal ConfigMaps labelled with ``experiment``, as dicts (owners are checked by the journal)."""
        selector = f"{LABEL_EXPERIMENT}={label_value(experiment)},{LABEL_STATE}"
        resp = self.core.list_namespaced_config_map(namespace, label_selector=selector, _preload_content=False)
        return json.loads(resp.data)["items"]

    def write_journal_sync(self, namespace: str, write: Write) -> None:
        """Carry out ``write`` (see :class:`kubetune_operator.journal.Write`).

        Raises:
            kubernetes.client.ApiException: a create or patch was refused.
        """
        patches = []  # a create the API server had carried out already (a retry) becomes a patch of its data
        for manifest in write.creates:
            try:
                _drain(self.core.create_namespaced_config_map(namespace, manifest, _preload_content=False))
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
                patches.append((manifest["metadata"]["name"], manifest["data"]))
        for name, data in patches + write.patches:
            _drain(self.core.patch_namespaced_config_map(name, namespace, {"data": data}, _preload_content=False))
        for name in write.deletes:
            try:
                _drain(self.core.delete_namespaced_config_map(name, namespace, _preload_content=False))
            except client.ApiException as exc:
                if exc.status != 404:
                    log.warning("journal: cannot delete ConfigMap %s/%s: %s", namespace, name, exc.reason)

    async def write_journal(self, namespace: str, write: Write) -> None:
        """:meth:`write_journal_sync` on the pool (the registry's journal writer)."""
        await self.call(self.write_journal_sync, namespace, write)

    def _create_owned(self, kind: str, create, find, manifest: dict) -> None:
        """Create ``manifest`` with ``create(namespace, body)``. After a 409, ``find(namespace, field_selector)``
        lists the object of that name (a list by name: the operator may not get such objects) and
        :func:`_check_ours` raises :class:`NameTaken` unless it is this Trial's: the same attempt's, from an
        earlier pass, is; an earlier Trial's of that name, not yet collected, is not (a Service of it would select
        this attempt's pods, and the garbage collector would delete it under them)."""
        ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        try:
            _drain(create(ns, manifest))
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            found = find(ns, f"metadata.name={name}")
            for existing in json.loads(found.data)["items"]:
                _check_ours(kind, existing, manifest)

    def _create_pod(self, manifest: dict) -> None:
        self._create_owned(
            "Pod",
            lambda ns, body: self.core.create_namespaced_pod(ns, body, _preload_content=False),
            lambda ns, selector: self.core.list_namespaced_pod(ns, field_selector=selector, _preload_content=False),
            manifest,
        )

    def _create_secret(self, manifest: dict) -> None:
        try:
            _drain(
                self.core.create_namespaced_secret(manifest["metadata"]["namespace"], manifest, _preload_content=False)
            )
        except client.ApiException as exc:
            if exc.status != 409:  # the same attempt's Secret from an earlier pass: the same token
                raise

    def _create_service(self, manifest: dict) -> None:
        self._create_owned(
            "Service",
            lambda ns, body: self.core.create_namespaced_service(ns, body, _preload_content=False),
            lambda ns, selector: self.core.list_namespaced_service(ns, field_selector=selector, _preload_content=False),
            manifest,
        )

    def _create_podgroup(self, manifest: dict) -> None:
        group, version, plural = PODGROUP_API
        self._create_owned(
            "PodGroup",
            lambda ns, body: self.custom.create_namespaced_custom_object(
                group, version, ns, plural, body, _preload_content=False
            ),
            lambda ns, selector: self.custom.list_namespaced_custom_object(
                group, version, ns, plural, field_selector=selector, _preload_content=False
            ),
            manifest,
        )

    def _delete_gang_objects(self, namespace: str, name: str) -> None:
        """Delete the headless Service and the PodGroup (if any) of an ended gang's attempt."""
        group, version, plural = PODGROUP_API
        calls = [lambda: self.core.delete_namespaced_service(name, namespace, _preload_content=False)]
        if self.serves_podgroups():
            calls.append(
                lambda: self.custom.delete_namespaced_custom_object(
                    group, version, namespace, plural, name, _preload_content=False
                )
            )
        for call in calls:
            try:
                _drain(call())
            except client.ApiException as exc:
                if exc.status != 404:
                    raise

    def serves_podgroups(self) -> bool:
        """Whether the API server serves the scheduler's PodGroups (``scheduling.k8s.io/v1alpha2``); asked once."""
        if self._podgroups is None:
            group, version, plural = PODGROUP_API
            try:
                response = self.core.api_client.call_api(
                    f"/apis/{group}/{version}", "GET", auth_settings=["BearerToken"], _preload_content=False
                )
                served = json.loads(response.data).get("resources") or []
                self._podgroups = any(r.get("name") == plural for r in served)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
                self._podgroups = False
        return self._podgroups

    def _delete_secret(self, namespace: str, name: str) -> None:
        try:
            _drain(self.core.delete_namespaced_secret(name, namespace, _preload_content=False))
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _delete_pod(self, namespace: str, name: str, grace: int) -> None:
        try:
            _drain(
                self.core.delete_namespaced_pod(
                    name, namespace, body={"gracePeriodSeconds": grace}, _preload_content=False
                )
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _patch_trial_status(self, namespace: str, name: str, patch: dict) -> None:
        _drain(
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, TRIAL_PLURAL, name, _strict_json({"status": patch}), _preload_content=False
            )
        )

    def announce_end(self, experiment: dict, type_: str, reason: str, message: str) -> None:
        """Post the Event that announces the end of ``experiment`` (named :func:`end_event_name`), once.

        Raises:
            kubernetes.client.ApiException: the API server refused it (not for AlreadyExists: posted before).
        """
        meta = experiment["metadata"]
        now = datetime.now(timezone.utc).isoformat()
        body = {
            "metadata": {"name": end_event_name(meta["uid"]), "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": EXPERIMENT_KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": message[:1000],
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": EVENT_COMPONENT,
            "action": reason,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": now,
            "count": 1,
        }
        try:
            _drain(self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False))
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def patch_experiment_status(self, namespace: str, name: str, patch: dict) -> None:
        """Merge-patch the Experiment's status subresource.

        Raises:
            kubernetes.client.ApiException: the patch was refused.
        """
        _drain(
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                EXPERIMENT_PLURAL,
                name,
                _strict_json({"status": patch}),
                _preload_content=False,
            )
        )

    async def execute(self, ctl, plan: Plan) -> list[str]:
        """Carry out ``plan`` for controller ``ctl``: trials first (pods need their uids), then the rest at once.

        Returns:
            Error messages of calls that failed (the next pass retries them); never raises for API errors.
        """
        ns, errors = ctl.namespace, []
        if ctl.deleting:  # deleted while this pass planned: nothing more is created
            plan.create_trials, plan.create_pods = [], []

        async def attempt(what, fn, *args):
            try:
                return await self.call(fn, *args)
            except Exception as exc:  # noqa: BLE001 - reported, then retried by the next pass
                errors.append(f"{what}: {api_message(exc)}")
                if isinstance(exc, NameTaken):
                    ctl.name_taken(args[0]["metadata"]["name"], str(exc))
                if fn == self._create_pod and getattr(exc, "status", None) in _INVALID:
                    ctl.pod_rejected(
                        f"the API server refused trial pod {args[0]['metadata']['name']}: {api_message(exc)}"
                    )
                return _FAILED

        uids = await asyncio.gather(
            *(attempt(f"create trial {m['metadata']['name']}", self._create_trial, m) for m in plan.create_trials)
        )
        for manifest, uid in zip(plan.create_trials, uids):
            ctl.trial_created(manifest["metadata"]["name"], None if uid is _FAILED else uid)
        if _FAILED in uids:  # the plan's TrialsCreated event names only the Trials now created
            created = [m["metadata"]["name"] for m, uid in zip(plan.create_trials, uids) if uid is not _FAILED]
            plan.events = [e for e in plan.events if e[2] != "TrialsCreated"]
            if created:
                plan.events.append(created_event(created))

        # pods, deletions and statuses are independent of one another: one round of calls
        async def create_attempt(manifest):  # the token Secret first: the pod reads it when it starts
            name = manifest["metadata"]["name"]
            if await attempt(f"create token Secret {name}", self._create_secret, plan.token_secrets[name]) is _FAILED:
                return _FAILED
            gang = plan.gangs.get(name)
            if gang is not None:  # its Service, PodGroup and workers, then the head: a head means a whole gang
                objects = [
                    attempt(f"create Service {gang.service['metadata']['name']}", self._create_service, gang.service)
                ]
                if gang.podgroup is not None:
                    objects.append(
                        attempt(
                            f"create PodGroup {gang.podgroup['metadata']['name']}", self._create_podgroup, gang.podgroup
                        )
                    )
                if _FAILED in await asyncio.gather(*objects):
                    return _FAILED
                workers = [attempt(f"create pod {w['metadata']['name']}", self._create_pod, w) for w in gang.workers]
                if _FAILED in await asyncio.gather(*workers):
                    return _FAILED
            created = await attempt(f"create pod {name}", self._create_pod, manifest)
            if created is not _FAILED:
                ctl.pod_accepted(name, *([gang.service["metadata"]["name"]] if gang is not None else []))
            return created

        async def status_attempt(name, patch):  # its failure is the trial's, and may stop counting as an error
            try:
                await self.call(self._patch_trial_status, ns, name, patch)
                ctl.status_written(name)
            except Exception as exc:  # noqa: BLE001 - reported, then retried by a later pass
                return api_message(exc)
            return None

        pods = [create_attempt(m) for m in plan.create_pods]
        deletes = [attempt(f"delete pod {name}", self._delete_pod, ns, name, grace) for name, grace in plan.delete_pods]
        statuses = [
            (name, status_attempt(name, patch)) for name, patch in plan.trial_status.items() if name in ctl.trials
        ]
        # A terminal Experiment status ends its daemon: it goes out only after every Trial's last status.
        final = (plan.experiment_status or {}).get("phase") in ("Succeeded", "Failed")
        exp = (
            [attempt("experiment status", self.patch_experiment_status, ns, ctl.name, plan.experiment_status)]
            if plan.experiment_status and not final
            else []
        )
        outcomes = await asyncio.gather(*pods, *deletes, *(c for _, c in statuses), *exp)
        for manifest, outcome in zip(plan.create_pods, outcomes):
            if outcome is _FAILED:  # ask again on the next pass
                ctl.pod_not_created(manifest["metadata"]["name"])
        status_outcomes = outcomes[len(pods) + len(deletes) :]
        unwritten = {name: error for (name, _), error in zip(statuses, status_outcomes) if error is not None}
        known = {name for name in unwritten if ctl.unwritable(name)}  # in this plan's Degraded condition already
        for name, error in unwritten.items():
            ctl.status_write_failed(name, error)
            if not ctl.unwritable(name):  # an unwritable trial holds up nothing: its condition and event say it
                errors.append(f"status of trial {name}: {error}")
        if exp and status_outcomes[-1] is _FAILED:
            ctl.status_write_failed(None)
        # Ended pods and their tokens go only once their trial's status holds their outcome (a restart must
        # not read the deletion of a finished pod as a disruption), and before a terminal Experiment
        # status, which ends the daemon.
        secrets = [
            (name, attempt(f"delete token Secret {name}", self._delete_secret, ns, name))
            for name, trial in plan.collect_secrets
            if trial not in unwritten
        ]
        collected = await asyncio.gather(
            *(c for _, c in secrets),
            *(
                attempt(f"delete ended pod {pod}", self._delete_pod, ns, pod, 0)
                for pod, trial in plan.collect_pods
                if trial not in unwritten
            ),
        )
        await asyncio.gather(
            *(
                attempt(f"delete Service and PodGroup {name}", self._delete_gang_objects, ns, name)
                for name, trial in plan.collect_gangs
                if trial not in unwritten
            )
        )
        kept = {name for (name, _), outcome in zip(secrets, collected) if outcome is _FAILED}
        ctl.secrets_not_deleted(kept | {name for name, trial in plan.collect_secrets if trial in unwritten})
        if final:  # announced first: the terminal status stops the daemon, maybe in the middle of what follows it
            if set(unwritten) - known or (
                plan.end_event
                and await attempt("end event", self.announce_end, ctl.experiment, *plan.end_event) is _FAILED
            ):
                ctl.status_write_failed(None)
            elif (
                await attempt("experiment status", self.patch_experiment_status, ns, ctl.name, plan.experiment_status)
                is _FAILED
            ):
                ctl.status_write_failed(None)
        return errors

    # ----- the collector's key -------------------------------------------------------------
    def load_or_create_key(self, namespace: str, name: str) -> bytes:
        """Read the HMAC key from Secret ``namespace/name``, creating the Secret with a new key if absent.

        Raises:
            kubernetes.client.ApiException: the Secret cannot be read or created (e.g. RBAC, no namespace).
        """
        try:
            secret = json.loads(self.core.read_namespaced_secret(name, namespace, _preload_content=False).data)
            return key_from_secret_data(secret.get("data") or {})
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
            "data": key_secret_data(new_key()),
        }
        try:
            _drain(self.core.create_namespaced_secret(namespace, body, _preload_content=False))
        except client.ApiException as exc:
            if exc.status != 409:  # another replica won the race: read theirs
                raise
        return self.load_or_create_key(namespace, name)
