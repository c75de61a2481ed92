"""A commit of any size never carries a journal ConfigMap past the API server's 1 MiB (issue 22.3: the operator's
own bookkeeping stays within the API server's limits): its entries are cut into batches of at most
``SEGMENT_BYTES``, and a restart reads them all back in order."""

from __future__ import annotations

import asyncio

from devcluster.testkit import ConfigMaps
from kubetune_operator import journal

CONFIGMAP_LIMIT = 1 << 20  # the API server's limit on a ConfigMap's data


def commit(j, store):
    asyncio.run(journal.commit(j, lambda write: store.write("ns", write), lambda: {}))


def test_a_commit_of_3_mb_of_entries_is_spread_over_segments_and_replays_in_order(monkeypatch):
    monkeypatch.setattr(journal, "MIN_SNAPSHOT_INTERVAL_BYTES", 1 << 40)  # entries only: no snapshot covers them
    store = ConfigMaps()
    j = journal.Journal("ns", "exp", "uid-12345678")
    j.record(["add", "exp-00000"])
    commit(j, store)  # a segment with room left: the next commit's first batch goes into it
    recorded = [["results", f"exp-{i:05d}", 0, [{"training_iteration": 1, "blob": "r" * 3000}]] for i in range(1000)]
    for entry in recorded:
        j.record(entry)
    commit(j, store)
    sizes = [sum(len(k) + len(v) for k, v in cm["data"].items()) for cm in store.items.values()]
    assert len(sizes) >= 6 and max(sizes) <= journal.SEGMENT_BYTES + 12 < CONFIGMAP_LIMIT
    assert j.clean and j.durable_seq == 1001 and j.segments[j.segment] == 1000
    _, entries = journal.load(journal.Journal("ns", "exp", "uid-12345678"), store.list())
    assert entries == [["add", "exp-00000"], *recorded]


def test_an_entry_larger_than_a_segment_is_a_batch_of_its_own():
    big = ["results", "exp-00000", 0, [{"blob": "b" * (journal.SEGMENT_BYTES + 10)}]]
    batches = list(journal._batches(5, [["add", "a"], big, ["add", "b"]]))
    assert [(first, count) for first, count, _ in batches] == [(5, 1), (6, 1), (7, 1)]
    small = list(journal._batches(0, [["add", str(i)] for i in range(10)]))
    assert small == [(0, 10, journal._dumps([["add", str(i)] for i in range(10)]))]  # one batch, as before
