"""The pod watch's cache rules (kubetune_operator.podwatch), without a cluster: a full list replaces a
scope's pods whole, events add, change and remove pods, and every change wakes the Experiment it is
about. The list and watch themselves run against the real API server in every integration test."""

from __future__ import annotations

import asyncio
import json
import time

from kubetune_operator.labels import LABEL_ATTEMPT, LABEL_EXPERIMENT, LABEL_TRIAL
from kubetune_operator.podview import pod_view
from kubetune_operator.podwatch import TOMBSTONE_S, PodWatch


def body(ns: str, exp: str, trial: str, phase: str = "Running") -> dict:
    return {
        "metadata": {
            "name": f"{trial}-0",
            "namespace": ns,
            "labels": {LABEL_EXPERIMENT: exp, LABEL_TRIAL: trial, LABEL_ATTEMPT: "0"},
        },
        "status": {"phase": phase},
    }


def watch_with_log(namespaces=()):
    woken = []
    return PodWatch(None, namespaces, lambda ns, exp, ended: woken.append((ns, exp, ended))), woken


def listed(*pods: dict) -> dict:
    out: dict = {}
    for pod in pods:
        out.setdefault((pod["metadata"]["namespace"], pod["metadata"]["labels"][LABEL_EXPERIMENT]), {})[
            pod["metadata"]["name"]
        ] = pod_view(pod)
    return out


def test_a_list_replaces_its_scope_and_wakes_old_and_new_experiments():
    pw, woken = watch_with_log()
    pw._replace(None, listed(body("a", "e1", "t1"), body("a", "e2", "t2")))
    assert set(pw.pods("a", "e1")) == {"t1-0"} and set(pw.pods("a", "e2")) == {"t2-0"}
    woken.clear()
    pw._replace(None, listed(body("a", "e1", "t3")))  # a relist after a 410: e2's pod went meanwhile
    assert set(pw.pods("a", "e1")) == {"t3-0"}
    assert pw.pods("a", "e2") == {}
    assert sorted(woken) == [("a", "e1", True), ("a", "e2", True)]  # a relist may have missed an end


def test_events_add_change_and_delete():
    pw, woken = watch_with_log()
    pw._replace(None, {})
    pw._apply(None, "ADDED", ("a", "e"), pod_view(body("a", "e", "t1", "Pending")))
    pw._apply(None, "MODIFIED", ("a", "e"), pod_view(body("a", "e", "t1", "Succeeded")))
    assert pw.pods("a", "e")["t1-0"].phase == "Succeeded"
    pw._apply(None, "MODIFIED", ("a", "e"), pod_view(body("a", "e", "t1", "Succeeded")))  # e.g. a label edit
    pw._apply(None, "DELETED", ("a", "e"), pod_view(body("a", "e", "t1", "Succeeded")))
    assert [(v.name, v.phase, v.gone) for v in pw.pods("a", "e").values()] == [("t1-0", "Succeeded", True)]
    # a slot is freed when the pod ends, and when it goes; not when an ended pod changes again
    assert woken == [("a", "e", False), ("a", "e", True), ("a", "e", False), ("a", "e", True)]
    pods = pw.pods("a", "e")
    pods["x"] = None  # a copy: the caller cannot change the cache
    assert set(pw.pods("a", "e")) == {"t1-0"}


def evicted(ns: str, exp: str, trial: str) -> dict:
    """A trial pod the Eviction API ended: ``DisruptionTarget`` set, deletion begun, still Running."""
    pod = body(ns, exp, trial)
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    return pod


def test_a_deleted_pod_keeps_its_last_state_for_a_while_unless_it_comes_back():
    pw, _ = watch_with_log()
    pw._replace(None, {})
    t0 = time.monotonic()  # pods() expires on the clock too
    pw._apply(None, "ADDED", ("a", "e"), pod_view(body("a", "e", "t1")), now=t0 + 0.0)
    pw._apply(None, "DELETED", ("a", "e"), pod_view(evicted("a", "e", "t1")), now=t0 + 1.0)
    gone = pw.pods("a", "e")["t1-0"]
    assert (gone.gone, gone.deleting, gone.phase, gone.disruption) == (True, True, "Running", "EvictionByEvictionAPI")
    pw._apply(None, "DELETED", ("a", "e"), pod_view(body("a", "e", "t2")), now=t0 + 2.0)
    pw._apply(None, "ADDED", ("a", "e"), pod_view(body("a", "e", "t2")), now=t0 + 3.0)  # the same name again
    pw._apply(None, "ADDED", ("a", "x"), pod_view(body("a", "x", "t3")), now=t0 + 1.5 + TOMBSTONE_S)
    assert set(pw.pods("a", "e")) == {"t2-0"} and not pw.pods("a", "e")["t2-0"].gone
    pw._apply(None, "DELETED", ("a", "e"), pod_view(body("a", "e", "t2")), now=t0 + 4.0 + TOMBSTONE_S)
    pw._apply(None, "MODIFIED", ("a", "x"), pod_view(body("a", "x", "t3")), now=t0 + 5.0 + 2 * TOMBSTONE_S)
    assert pw.pods("a", "e") == {} and ("a", "e") not in pw._scope_of


def test_synced_only_after_every_scope_is_listed():
    async def run():
        pw, _ = watch_with_log(("a", "b"))
        pw._replace("a", listed(body("a", "e", "t1")))
        first = await pw.synced(0.01)
        pw._replace("b", {})
        return first, await pw.synced(0.01)

    assert asyncio.run(run()) == (False, True)


def test_a_scope_relist_keeps_the_other_scopes_pods():
    pw, _ = watch_with_log(("a", "b"))
    pw._replace("a", listed(body("a", "e", "t1")))
    pw._replace("b", listed(body("b", "e", "t2")))
    pw._replace("a", {})
    assert pw.pods("a", "e") == {} and set(pw.pods("b", "e")) == {"t2-0"}


def test_a_pod_whose_kubetune_labels_do_not_parse_is_ignored_with_one_warning(caplog):
    """A pod with kubetune's managed-by label whose attempt, rank or trial label was edited or removed: the list
    goes on without it (before, its ``int()`` failed the whole list, which was retried in a loop)."""
    edited, ranked, unlabelled = body("a", "e", "t2"), body("a", "e", "t3"), body("a", "e", "t4")
    edited["metadata"]["labels"][LABEL_ATTEMPT] = "zero"
    ranked["metadata"]["labels"]["kubetune.io/rank"] = "head"
    del unlabelled["metadata"]["labels"][LABEL_TRIAL]
    for i, pod in enumerate((edited, ranked, unlabelled)):
        pod["metadata"]["uid"] = f"uid-{i}"
    page = {"items": [body("a", "e", "t1"), edited, ranked, unlabelled], "metadata": {"resourceVersion": "7"}}

    class Core:
        def list_namespaced_pod(self, namespace, **kwargs):
            return type("Response", (), {"data": json.dumps(page)})()

    pw = PodWatch(Core(), ("a",), lambda *args: None)
    with caplog.at_level("WARNING", logger="kubetune.podwatch"):
        for _ in range(2):
            pods, version = pw._list("a")
            assert (set(pods[("a", "e")]), version) == ({"t1-0"}, "7")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3, warnings  # once per pod, not once per list
    assert "ignoring pod a/t2-0" in warnings[0] and "invalid literal for int()" in warnings[0]
