"""Where kopf keeps its own state on an Experiment, sized so it never pushes the object past the API server's
limits: all annotations of an object together may hold at most 256 KiB.

kopf's stock diff-base storage copies the object's whole essence (its ``spec``, labels and annotations)
into one annotation: an Experiment with a large ``spec.config`` (up to etcd's 1.5 MiB) made every kopf
patch fail (``metadata.annotations: Too long``), its finalizer included, so it could not be deleted.
:class:`DigestDiffBaseStorage` keeps a SHA-256 digest of each part of the essence instead: kopf still sees
which part changed (the ``spec-changed`` handler fires on a ``spec`` edit), never what changed, which no
handler of ours reads. :class:`BoundedProgressStorage` cuts the error message kopf keeps per handler.

Installed by the startup handler (``handlers.py``) as ``settings.persistence``'s storages.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

import kopf

#: Longest error message kept in a handler's progress annotation (characters).
MAX_PROGRESS_MESSAGE = 1000


def _digest(value: Any) -> dict:
    return {"sha256": hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()}


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base, with each top-level stanza of the essence (``spec``, ...) and the
    labels and annotations replaced by ``{"sha256": <hex>}``: a few hundred bytes whatever the object's size.
    The essence is what kopf's own takes (no status, no system metadata, no kubectl last-applied
    annotation, no kopf storage annotations), without kopf's deep copy of the whole object."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        if extra_fields:  # a handler on a field outside the essence (none of ours): kopf's essence, digested
            essence = dict(super().build(body=body, extra_fields=extra_fields))
            metadata = essence.pop("metadata", None) or {}
        else:
            essence = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "status")}
            metadata = body.get("metadata") or {}
        annotations = dict(metadata.get("annotations") or {})
        ignored = {*self._detect_marked_prefixes(annotations), self.prefix}
        annotations = {
            k: v
            for k, v in annotations.items()
            if k != "kubectl.kubernetes.io/last-applied-configuration"
            and not any(k.startswith(f"{prefix}/") for prefix in ignored)
        }  # kopf's progress annotations change at every handling: never part of what is compared
        compact: dict[str, Any] = {key: _digest(value) for key, value in essence.items()}
        parts = {"labels": metadata.get("labels"), "annotations": annotations}
        parts = {key: _digest(value) for key, value in parts.items() if value}
        if parts:
            compact["metadata"] = parts
        return compact  # type: ignore[return-value]


class BoundedProgressStorage(kopf.AnnotationsProgressStorage):
    """kopf's annotation progress storage, with each handler's error message cut to :data:`MAX_PROGRESS_MESSAGE`."""

    def store(self, *, key: Any, record: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        message = record.get("message")
        if isinstance(message, str) and len(message) > MAX_PROGRESS_MESSAGE:
            record = {**record, "message": message[: MAX_PROGRESS_MESSAGE - 3] + "..."}
        super().store(key=key, record=record, body=body, patch=patch)
