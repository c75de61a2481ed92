"""kopf's state on an Experiment stays small whatever the Experiment's size (issue 22.3): the diff-base is
digests, the progress messages are cut; a spec edit is still seen as one, a status change is not."""

from __future__ import annotations

import json

import kopf

from kubetune_operator.labels import KOPF_ANNOTATION_PREFIX
from kubetune_operator.persistence import MAX_PROGRESS_MESSAGE, BoundedProgressStorage, DigestDiffBaseStorage

PREFIX = KOPF_ANNOTATION_PREFIX
KEY = f"{PREFIX}/last-handled-configuration"


def body(config: dict, annotations: dict | None = None, status: dict | None = None) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "kubetune.io/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "e", "namespace": "ns", "labels": {"team": "a"}, "annotations": annotations or {}},
            "spec": {"trainable": {"entrypoint": "m:T"}, "config": config},
            "status": status or {},
        }
    )


def stored(storage: DigestDiffBaseStorage, b: kopf.Body) -> dict:
    patch = kopf.Patch()
    storage.store(body=b, patch=patch, essence=storage.build(body=b))
    return dict(patch["metadata"]["annotations"])


def test_the_diff_base_of_a_1_mb_spec_is_a_few_hundred_bytes_and_sees_spec_edits_only():
    storage = DigestDiffBaseStorage(prefix=PREFIX)
    big = body({"table": "x" * 1_000_000})
    annotations = stored(storage, big)
    assert len(annotations[KEY]) < 400
    kept = body({"table": "x" * 1_000_000}, annotations=annotations, status={"phase": "Running"})
    assert storage.fetch(body=kept) == storage.build(body=kept)  # status and our own annotations: no change
    progress = {**annotations, f"{PREFIX}/validate": json.dumps({"retries": 1})}
    assert storage.build(body=body({"table": "x" * 1_000_000}, annotations=progress)) == storage.build(body=kept)
    edited = body({"table": "y" * 1_000_000}, annotations=annotations)
    old, new = storage.fetch(body=edited), storage.build(body=edited)
    assert old["spec"] != new["spec"] and {**old, "spec": None} == {**new, "spec": None}  # spec-changed fires


def test_a_progress_message_is_cut():
    storage = BoundedProgressStorage(prefix=PREFIX)
    patch = kopf.Patch()
    storage.store(key="validate", record={"retries": 1, "message": "m" * 100_000}, body=body({}), patch=patch)
    record = json.loads(patch["metadata"]["annotations"][f"{PREFIX}/validate"])
    assert len(record["message"]) == MAX_PROGRESS_MESSAGE and record["retries"] == 1


def test_labels_and_user_annotations_count_kubectl_and_kopf_annotations_do_not():
    storage = DigestDiffBaseStorage(prefix=PREFIX)
    base = storage.build(body=body({"x": 1}, annotations={"team/owner": "a"}))
    applied = {"team/owner": "a", "kubectl.kubernetes.io/last-applied-configuration": "{...}", f"{PREFIX}/x": "1"}
    assert storage.build(body=body({"x": 1}, annotations=applied)) == base
    assert storage.build(body=body({"x": 1}, annotations={"team/owner": "b"})) != base
    relabelled = body({"x": 1}, annotations={"team/owner": "a"})
    relabelled["metadata"]["labels"] = {"team": "b"}
    assert storage.build(body=kopf.Body(dict(relabelled))) != base
    with_phase = body({"x": 1}, annotations={"team/owner": "a"}, status={"phase": "Running"})
    assert storage.build(body=with_phase) == base  # status is not part of it...
    assert storage.build(body=with_phase, extra_fields=["status.phase"]) != base  # ...unless a handler asks
