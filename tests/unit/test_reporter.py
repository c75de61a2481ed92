"""kubetune.runtime.reporter against a real HTTP collector on loopback."""

from __future__ import annotations

import time

import pytest
from conftest_runtime import TOKEN, Collector, wait_for

from kubetune.runtime.reporter import Reporter


def _reporter(url: str, **kwargs) -> Reporter:
    kwargs.setdefault("backoff_s", (0.02, 0.1))
    return Reporter(url, TOKEN, namespace="ns", experiment="exp", trial="t-1", attempt=2, **kwargs)


def _result(i: int, **extra) -> dict:
    return {"training_iteration": i, "loss": 1.0 / i, "config": {"lr": 0.1}, **extra}


def test_results_arrive_in_order_once_with_the_envelope_and_a_final_done_batch():
    collector = Collector().start()
    reporter = _reporter(collector.url)
    reporter.start()
    for i in range(1, 51):
        reporter.report(_result(i))
    reporter.set_checkpoint("s3://b/ns/exp/t-1/checkpoint_000050", 50)
    assert reporter.close(5.0)
    collector.stop()

    assert [r["training_iteration"] for r in collector.results()] == list(range(1, 51))
    assert all("config" not in r for r in collector.results())
    first, last = collector.batches[0], collector.batches[-1]
    assert (first["namespace"], first["experiment"], first["trial"], first["attempt"]) == ("ns", "exp", "t-1", 2)
    assert [b["done"] for b in collector.batches] == [False] * (len(collector.batches) - 1) + [True]
    sent = [b["checkpoint"] for b in collector.batches if b["checkpoint"]]
    assert sent == [{"uri": "s3://b/ns/exp/t-1/checkpoint_000050", "iteration": 50}]
    assert last["done"] and reporter.delivered == 50 and reporter.dropped == 0


def test_collector_down_buffers_without_blocking_and_keeps_the_newest():
    collector = Collector()  # not started: connections are refused
    reporter = _reporter(collector.url, max_buffer=100)
    reporter.start()
    started = time.perf_counter()
    for i in range(1, 501):
        reporter.report(_result(i))
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5, f"report() blocked: 500 calls took {elapsed:.3f} s"
    time.sleep(0.3)  # the sender fails and backs off meanwhile
    assert collector.batches == [] and reporter.pending == 100

    collector.start()
    assert reporter.close(10.0)
    collector.stop()
    assert [r["training_iteration"] for r in collector.results()] == list(range(401, 501))
    assert reporter.dropped == 400 and reporter.delivered == 100
    assert collector.batches[-1]["done"] is True


def test_a_5xx_is_retried_with_backoff_and_a_waiting_step_goes_on_meanwhile():
    collector = Collector(unavailable=3).start()
    reporter = _reporter(collector.url, backoff_s=(0.05, 0.2))
    reporter.start()
    started = time.perf_counter()
    seq = reporter.report(_result(1))
    assert reporter.wait_answered(seq, 5.0) is False  # the first 503 marks it unreachable: no wait for an answer
    assert reporter.unreachable
    wait_for(lambda: collector.batches, 5, "the batch after three 503s")
    elapsed = time.perf_counter() - started
    reporter.report(_result(2))
    assert reporter.close(5.0)
    collector.stop()
    assert collector.unavailable == 0 and not reporter.unreachable
    assert [r["training_iteration"] for r in collector.results()] == [1, 2]
    # urllib3's Retry waits 0, then 0.1 and 0.2 s (factor 0.05, cap 0.2) plus up to 0.05 s of jitter each
    assert 0.3 <= elapsed < 2.0, elapsed


def test_decisions_from_the_reply():
    replies = iter(["continue", "checkpoint", "continue", "stop", "pause"])
    collector = Collector(decide=lambda batch, batches: next(replies, "continue")).start()
    reporter = _reporter(collector.url)
    reporter.start()
    seen = []
    for i in range(1, 6):
        reporter.report(_result(i))
        wait_for(lambda: len(collector.batches) >= i, 5, f"batch {i}")
        time.sleep(0.05)  # the reply is applied right after the server answered
        seen.append(reporter.take_decision())
    reporter.close(5.0)
    collector.stop()
    assert seen == [None, "checkpoint", None, "stop", "stop"]  # checkpoint once; stop sticks, pause ignored


def test_a_413_splits_the_batch_without_losing_results():
    collector = Collector(max_body=6000).start()
    reporter = _reporter(collector.url)
    for i in range(1, 41):
        reporter.report(_result(i, blob="x" * 500))
    reporter.start()  # all 40 wait: the first batch is too large for the collector
    assert reporter.close(10.0)
    collector.stop()
    assert collector.too_large >= 1
    assert [r["training_iteration"] for r in collector.results()] == list(range(1, 41))


def test_a_refused_token_fences_the_attempt_at_once():
    collector = Collector().start()
    reporter = Reporter(
        collector.url, "wrong", namespace="ns", experiment="exp", trial="t", attempt=0, backoff_s=(0.02, 0.05)
    )
    reporter.start()
    reporter.report(_result(1))
    wait_for(reporter.fenced.is_set, 5, "the attempt to be fenced")
    assert reporter.take_decision() == "fenced"
    reporter.report(_result(2))
    time.sleep(0.2)
    assert collector.bad_auth == 1 and collector.batches == []  # asked once, then nothing more is sent
    assert reporter.close(0.2)  # nothing left to send: closes at once
    collector.stop()


def test_collector_url_must_be_http():
    with pytest.raises(ValueError):
        _reporter("ftp://collector:80")
