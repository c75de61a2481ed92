"""Kubernetes authentication and authorization of ``GET /metrics``, as controller-runtime's secure metrics
(``filters.WithAuthenticationAndAuthorization``) and kube-rbac-proxy do it.

Owns :class:`MetricsAuth`, made by the startup handler (``handlers.py``) when ``metrics.auth`` is
``kubernetes`` and called by the collector's ``/metrics`` route (``collector.py``) before it answers. The
request's bearer token goes to the API server in a TokenReview (``authentication.k8s.io/v1``); the user it
names, with its groups, uid and extra, in a SubjectAccessReview (``authorization.k8s.io/v1``) of verb ``get``
on the non-resource URL ``/metrics``, which RBAC grants through a ClusterRole such as the chart's
``<fullname>-metrics-reader``. Answers: no token or one the API server does not authenticate, 401; a user
RBAC does not allow, 403; a review that fails (the API server unreachable), 500, as controller-runtime.
Decisions are cached by the token's SHA-256 for :data:`ALLOWED_TTL_S` (allowed) or :data:`DENIED_TTL_S`
(401 and 403); failures are not cached. Tokens are never logged or kept.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Awaitable, Callable, NamedTuple

from kubernetes import client

log = logging.getLogger("kubetune.metricsauth")
#: How long an allowed token is let in without asking the API server again, seconds (controller-runtime: 60
#: for authentication, 300 for allowed authorizations).
ALLOWED_TTL_S = 60.0
#: How long a refused token (401, 403) is refused without asking again, seconds (controller-runtime: 30).
DENIED_TTL_S = 10.0
#: Most tokens whose decision is cached; the oldest goes first.
CACHE_SIZE = 1024
PATH, VERB = "/metrics", "get"

#: Runs a blocking call off the event loop and returns its result (:meth:`kubetune_operator.kube.Kube.call`).
Call = Callable[..., Awaitable]


class Decision(NamedTuple):
    """What :meth:`MetricsAuth.check` decided.

    Attributes:
        status: 200 (let in), 401, 403 or 500.
        message: why not, for the response body (empty for 200); names the user, never the token.
    """

    status: int
    message: str = ""


class MetricsAuth:
    """TokenReview and SubjectAccessReview of ``/metrics`` requests, with a short cache.

    Args:
        api: the operator's Kubernetes API client (its credentials may create both reviews).
        call: runs a blocking client call off the event loop.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, api: client.ApiClient, call: Call, clock: Callable[[], float] = time.monotonic):
        self.authn = client.AuthenticationV1Api(api)
        self.authz = client.AuthorizationV1Api(api)
        self.call = call
        self.clock = clock
        self._cache: dict[str, tuple[float, Decision]] = {}  # sha256(token) -> (expires at, decision)

    async def check(self, authorization: str | None) -> Decision:
        """Decide on a request with this ``Authorization`` header (None: none sent)."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Decision(401, "Unauthorized: a bearer token is required")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            decision = await self._review(token)
        except Exception as exc:  # noqa: BLE001 - the API server's failure is the request's 500, not the server's
            log.warning("/metrics: the access review failed: %s: %s", type(exc).__name__, getattr(exc, "reason", exc))
            return Decision(500, "the access review failed; retry")
        self._cache.pop(key, None)
        if len(self._cache) >= CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = (now + (ALLOWED_TTL_S if decision.status == 200 else DENIED_TTL_S), decision)
        return decision

    async def _review(self, token: str) -> Decision:
        """Ask the API server.

        Raises:
            kubernetes.client.ApiException: a review could not be created (urllib3 errors too).
        """
        review = await self.call(
            self.authn.create_token_review,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.status
        if not status or not status.authenticated or not status.user:
            return Decision(401, "Unauthorized: the token is not valid")
        user = status.user
        access = await self.call(
            self.authz.create_subject_access_review,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.username,
                    "groups": user.groups,
                    "uid": user.uid,
                    "extra": user.extra,
                    "nonResourceAttributes": {"path": PATH, "verb": VERB},
                },
            },
        )
        if access.status and access.status.allowed:
            return Decision(200)
        return Decision(403, f"Forbidden: user {user.username!r} may not {VERB} {PATH}")
