"""Benchmark of the operator's liveness under load: ``/healthz`` latency while the collector takes
results for an Experiment under the median stopping rule, and under a flood of connections.

Stand-alone script (no pytest). The server under test runs in its own process (spawn): the
operator's real collector app (``kubetune_operator.collector.make_app``) on one event loop with the
Experiment daemon's reconcile passes, as in the operator, for one Experiment of ``--trials`` running
trials under ``median_stopping_rule`` (``time_attr: training_iteration``, grace period 1,
``min_samples_required`` 3): each result is judged against every peer. The baseline, run side by
side in the same invocation and under the same load, is a trivial aiohttp app that reads each body
and answers ``continue``: the HTTP stack alone. A prober process GETs ``/healthz`` every
``--probe-interval`` seconds over one keep-alive connection (as a kubelet's liveness probe does)
and records each answer's latency from its scheduled time.

Phases, each ``--duration`` seconds per server (the servers alternate phase by phase):

* **idle**: no load.
* **paced**: the load generator offers ``--rate`` results/s (batches of ``--batch``, 16 connections).
* **flood**: ``--flood`` connections, each POSTing batches of 1,000 results with valid tokens as
  fast as it gets answers (the largest batch the collector takes).
* **forged**: ``--flood`` connections POSTing 1 MiB bodies under forged tokens.

Figures per phase: ``/healthz`` p50/p99/max in ms, probes that failed, results/s answered; the
ratio of the collector's ``/healthz`` p99 to the baseline's. Goal (issue 9): ``/healthz`` p99 <
100 ms under 5,000 results/s with median stopping at 1,000 trials, and under the flood. Exits 1 if a
probe failed or the collector answered a valid batch with anything but 200.

Run: ``.venv/bin/python bench/bench_probe.py [--trials 1000] [--rate 5000] [--duration 10]
[--flood 200]`` (about 2 minutes with the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import math
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_collector import (  # noqa: E402
    NAMESPACE,
    TrialFeed,
    baseline_app,
    load_registry,
    reconcile_passes,
)
from kubetune.env import COLLECTOR_RESULTS_PATH  # noqa: E402
from kubetune_operator.collector import make_app  # noqa: E402
from kubetune_operator.tokens import mint_token, new_key  # noqa: E402

MEDIAN = {
    "name": "median_stopping_rule",
    "params": {"time_attr": "training_iteration", "grace_period": 1, "min_samples_required": 3},
}
GOAL_P99_MS = 100.0
PHASES = ("idle", "paced", "flood", "forged")


def serve(kind: str, key: bytes, trials: int, conn) -> None:
    """Child process: serve ``kind`` ("collector" or "baseline") with ``/healthz`` on 127.0.0.1.

    Sends ``(port, trials info or None)`` on ``conn``; serves until it receives anything, then exits.
    """

    async def main() -> None:
        passes = None
        if kind == "collector":
            registry, pods, info = load_registry(key, trials, MEDIAN)
            app = make_app(registry)
            passes = asyncio.create_task(reconcile_passes(registry, pods, []))
        else:
            app, info = baseline_app(), None
            app.router.add_get("/healthz", lambda request: web.Response(text="ok"))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        conn.send((runner.addresses[0][1], info))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        if passes is not None:
            passes.cancel()
        await runner.cleanup()

    asyncio.run(main())


def probe(port: int, interval: float, duration: float, conn) -> None:
    """Child process: GET ``/healthz`` every ``interval`` s for ``duration`` s; send back the latencies
    (seconds, from each probe's scheduled time) and the number of failed probes (error or > 5 s)."""
    latencies, failed = [], 0
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    start = time.perf_counter()
    scheduled = start
    while scheduled < start + duration:
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        try:
            client.request("GET", "/healthz")
            response = client.getresponse()
            response.read()
            if response.status != 200:
                raise OSError(f"status {response.status}")
            latencies.append(time.perf_counter() - scheduled)
        except OSError:
            failed += 1
            client.close()
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        scheduled += interval
    conn.send((latencies, failed))


async def load(phase: str, url: str, feeds: list[TrialFeed], args: argparse.Namespace, key: bytes) -> Counter:
    """Drive ``url`` with ``phase``'s load for ``args.duration`` s; return reply statuses and results answered."""
    counts: Counter = Counter()
    end = time.perf_counter() + args.duration
    if phase == "idle":
        await asyncio.sleep(args.duration)
        return counts
    forged = "Bearer " + mint_token(new_key(), NAMESPACE, feeds[0].name, 0, "uid-" + feeds[0].name)
    junk = b"x" * (1 << 20)

    async def worker(w: int, session: aiohttp.ClientSession, connections: int) -> None:
        own = feeds[w::connections] or feeds
        interval = connections * args.batch / args.rate
        next_send, k = time.perf_counter() + w * interval / connections, 0
        while time.perf_counter() < end:
            if phase == "paced":
                await asyncio.sleep(max(0.0, next_send - time.perf_counter()))
                next_send += interval
            feed = own[k % len(own)]
            k += 1
            if phase == "forged":
                body, auth, size = junk, forged, 0
            else:
                size = args.batch if phase == "paced" else 1000
                body, auth = feed.next_body(size), f"Bearer {feed.token}"
            try:
                async with session.post(url, data=body, headers={"Authorization": auth}) as resp:
                    await resp.read()
                    counts[resp.status] += 1
                    counts["results"] += size if resp.status == 200 else 0
            except aiohttp.ClientError as exc:
                counts[type(exc).__name__] += 1

    connections = 16 if phase == "paced" else args.flood
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections), timeout=aiohttp.ClientTimeout(total=60)
    ) as session:
        await asyncio.gather(*(worker(w, session, connections) for w in range(connections)))
    return counts


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ``values`` in ms (NaN when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="running trials (default 1000)")
    parser.add_argument("--rate", type=float, default=5000, help="results/s offered when paced (default 5000)")
    parser.add_argument("--batch", type=int, default=50, help="results per request when paced (default 50)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase and server (default 10)")
    parser.add_argument("--flood", type=int, default=200, help="connections of the flood phases (default 200)")
    parser.add_argument("--probe-interval", type=float, default=0.02, help="seconds between probes (default 0.02)")
    args = parser.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    key = new_key()
    print(
        f"probe benchmark: {args.trials} running trials under {MEDIAN['name']} {MEDIAN['params']}; paced "
        f"{args.rate:g} results/s in batches of {args.batch}; floods of {args.flood} connections; "
        f"{args.duration:g} s per phase and server; /healthz every {args.probe_interval * 1000:g} ms; "
        f"CPUs here: {os.cpu_count()}"
    )
    servers, rows, failures = {}, {}, []
    try:
        for kind in ("baseline", "collector"):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=serve, args=(kind, key, args.trials, child), daemon=True)
            proc.start()
            if not parent.poll(120):
                raise RuntimeError(f"the {kind} server did not start")
            port, info = parent.recv()
            info = info or [
                {"name": f"trial-{i}", "attempt": 0, "lr": 10 ** -(1 + 4 * i / args.trials)} for i in range(args.trials)
            ]
            feeds = [
                TrialFeed(
                    t["name"],
                    t["attempt"],
                    t["lr"],
                    mint_token(key, NAMESPACE, t["name"], t["attempt"], "uid-" + t["name"]),
                    rng=random.Random(i),
                )
                for i, t in enumerate(info)
            ]
            servers[kind] = (proc, parent, port, feeds)
        for phase in PHASES:
            for kind in ("baseline", "collector") if PHASES.index(phase) % 2 == 0 else ("collector", "baseline"):
                proc, _, port, feeds = servers[kind]
                parent, child = ctx.Pipe()
                prober = ctx.Process(target=probe, args=(port, args.probe_interval, args.duration, child))
                prober.start()
                counts = asyncio.run(load(phase, f"http://127.0.0.1:{port}{COLLECTOR_RESULTS_PATH}", feeds, args, key))
                latencies, failed = parent.recv() if parent.poll(args.duration + 30) else ([], -1)
                prober.join(10)
                rows[kind, phase] = (latencies, failed, counts)
    finally:
        for proc, conn, _, _ in servers.values():
            conn.send("stop")
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
    print(
        f"{'server':<10}{'phase':<8}{'healthz p50 ms':>15}{'p99 ms':>9}{'max ms':>9}{'failed':>8}"
        f"{'results/s':>11}  replies"
    )
    for (kind, phase), (latencies, failed, counts) in rows.items():
        replies = {k: v for k, v in counts.items() if k != "results"}
        print(
            f"{kind:<10}{phase:<8}{percentile(latencies, 50):>15.2f}{percentile(latencies, 99):>9.2f}"
            f"{percentile(latencies, 100):>9.2f}{failed:>8}{counts['results'] / args.duration:>11.0f}  {replies}"
        )
        if failed:
            failures.append(f"{kind} {phase}: {failed} probes failed")
        if kind == "collector" and phase in ("paced", "flood") and set(replies) - {200}:
            failures.append(f"collector {phase}: replies other than 200: {replies}")
        if kind == "collector" and phase == "forged" and set(replies) - {401}:
            failures.append(f"collector forged: replies other than 401: {replies}")
    for phase in PHASES:
        ours, base = percentile(rows["collector", phase][0], 99), percentile(rows["baseline", phase][0], 99)
        verdict = "MET" if ours < GOAL_P99_MS else "MISSED"
        print(
            f"{phase}: /healthz p99 collector {ours:.2f} ms vs baseline {base:.2f} ms (ratio {ours / base:.2f}); "
            f"goal < {GOAL_P99_MS:g} ms {verdict}"
            if phase != "idle"
            else f"{phase}: /healthz p99 collector {ours:.2f} ms vs baseline {base:.2f} ms (ratio {ours / base:.2f})"
        )
    for failure in failures:
        print(f"CHECK FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
