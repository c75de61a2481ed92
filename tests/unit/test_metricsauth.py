"""``/metrics`` behind Kubernetes authentication and authorization (kubetune_operator.metricsauth), over real
HTTP on loopback: which answer each kind of request gets, what the reviews ask, and how long a decision is
cached. The API server's side is a stand-in here that answers the two reviews from a table;
``tests/integration/test_helm.py`` runs the same filter against the real API server with the chart's RBAC."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from kubernetes import client

from devcluster.testkit import ConfigMaps
from kubetune_operator.collector import make_app
from kubetune_operator.metricsauth import ALLOWED_TTL_S, DENIED_TTL_S, MetricsAuth
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings

USERS = {"reader-token": ("system:serviceaccount:monitoring:prometheus", True), "other-token": ("alice", False)}


class ApiServer:
    """Answers TokenReviews from :data:`USERS` and SubjectAccessReviews from their flag; records each review."""

    def __init__(self):
        self.reviews: list[tuple[str, dict]] = []
        self.down = False

    async def call(self, fn, body):
        self.reviews.append((fn.__name__, body))
        if self.down:
            raise client.ApiException(status=503, reason="Service Unavailable")
        if fn.__name__ == "create_token_review":
            user = USERS.get(body["spec"]["token"])
            info = client.V1UserInfo(username=user[0], groups=["system:authenticated"], uid="u1") if user else None
            return client.V1TokenReview(spec={}, status=client.V1TokenReviewStatus(authenticated=bool(user), user=info))
        allowed = any(name == body["spec"]["user"] and ok for name, ok in USERS.values())
        return client.V1SubjectAccessReview(spec={}, status=client.V1SubjectAccessReviewStatus(allowed=allowed))


@pytest.fixture
def clock():
    return [1000.0]


@pytest.fixture
def apiserver():
    return ApiServer()


def scrape(apiserver, clock, *headers):
    """GET /metrics with each of ``headers`` (an Authorization value or None) on one server; the answers."""

    async def go():
        auth = MetricsAuth(client.ApiClient(), apiserver.call, clock=lambda: clock[0])
        server = TestServer(make_app(Registry(Settings(), b"k" * 32, ConfigMaps().write), auth))
        await server.start_server()
        answers = []
        try:
            async with ClientSession() as session:
                for header in headers:
                    if isinstance(header, float):  # a pause on the fake clock
                        clock[0] += header
                        continue
                    sent = {"Authorization": header} if header else {}
                    async with session.get(server.make_url("/metrics"), headers=sent) as r:
                        answers.append((r.status, await r.text()))
        finally:
            await server.close()
        return answers

    return asyncio.run(go())


def test_no_token_401_unknown_token_401_not_allowed_403_allowed_200(apiserver, clock):
    answers = scrape(apiserver, clock, None, "Basic abc", "Bearer nobody", "Bearer other-token", "Bearer reader-token")
    assert [status for status, _ in answers] == [401, 401, 401, 403, 200]
    assert "user 'alice' may not get /metrics" in answers[3][1]
    assert "kubetune_results_total" in answers[4][1] and "kubetune_results_total" not in answers[3][1]
    assert not any("reader-token" in text or "other-token" in text for _, text in answers)
    tr, sar = "create_token_review", "create_subject_access_review"
    assert [kind for kind, _ in apiserver.reviews] == [tr, tr, sar, tr, sar]  # none without a bearer token
    access = apiserver.reviews[-1][1]["spec"]
    assert access["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert (access["user"], access["groups"], access["uid"]) == (
        USERS["reader-token"][0],
        ["system:authenticated"],
        "u1",
    )


def test_decisions_are_cached_briefly_and_failures_not_at_all(apiserver, clock):
    answers = scrape(
        apiserver,
        clock,
        "Bearer reader-token",
        "Bearer other-token",
        "Bearer reader-token",  # both cached: no review
        "Bearer other-token",
        DENIED_TTL_S + 1,
        "Bearer reader-token",  # still cached
        "Bearer other-token",  # asked again
        ALLOWED_TTL_S,
        "Bearer reader-token",  # asked again
    )
    assert [status for status, _ in answers] == [200, 403, 200, 403, 200, 403, 200]
    tokens = [body["spec"]["token"] for kind, body in apiserver.reviews if kind == "create_token_review"]
    assert tokens == ["reader-token", "other-token", "other-token", "reader-token"]
    apiserver.down, apiserver.reviews = True, []
    answers = scrape(apiserver, clock, "Bearer reader-token", "Bearer reader-token")
    assert [status for status, _ in answers] == [500, 500] and len(apiserver.reviews) == 2
