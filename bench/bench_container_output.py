"""Benchmark of container trials' results read from their logs (``kubetune_operator.logstream``), beside the same
results posted by kubetune's runtime to the collector (``kubetune_operator.collector``): the baseline.

Stand-alone script (no pytest). The operator side runs in a child process (spawn): a real
:class:`~kubetune_operator.registry.Registry` with ``bench_collector.py``'s Experiment of ``N`` running trials under
ASHA (``loss``, ``min``), its journal committed before each decision into ConfigMaps held in memory (the API
server's write latency is left out, as in ``bench_collector.py``), and either

* **logs**: a container-trial Experiment whose trials' logs the real :class:`~kubetune_operator.logstream.LogStreams`
  follows over HTTP, or
* **collector**: the same Experiment as runtime trials, whose results the real collector app takes.

The load generator, in this process, plays the trials: for ``logs`` an HTTP server answering the API server's
``pods/<pod>/log?follow=true`` for every pod with one line every ``period`` seconds
(``epoch 7: loss=0.1234 sent=<time>``), for ``collector`` a runtime-like client posting the same result (a batch of
one, the trial's token) on the same schedule. A result's latency runs from its ``sent`` time to the moment the
operator's decision on it is committed to the journal (``logs``, measured in the operator process) or answered
(``collector``, measured by the client); both clocks are this machine's ``time.time()``.

Phases: ``latency`` (``--latency-trials`` trials, a line every 0.25 s: p50/p99), then ``load`` at each of
``--load-trials`` (default 200 and 1,000 trials, a line every second each): the operator process's CPU (percent of
one core, from ``/proc``) and resident memory, and the results it decided on. Each phase runs the two modes one after
the other on the same machine, and prints each figure and the ratio logs/collector.

Run: ``.venv/bin/python bench/bench_container_output.py [--duration S] [--latency-trials N] [--load-trials N ...]``
(about 2 minutes with the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_collector import EXPERIMENT, NAMESPACE, load_registry  # the same Experiment, as a container trial

from kubetune.env import COLLECTOR_RESULTS_PATH
from kubetune_operator.collector import make_app
from kubetune_operator.logstream import LogStreams
from kubetune_operator.tokens import new_key

#: A container trial of the same Experiment (``bench_collector.experiment``): its results are read from its log.
CONTAINER = {"command": ["train"], "args": ["--lr=${config.lr}"]}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def operator_side(mode: str, trials: int, log_url: str, warmup: float, duration: float, conn) -> None:
    """Child process: the operator side of ``mode``; sends the collector's port and the trials' tokens, then the
    figures once the measured window has passed."""

    async def main() -> None:
        registry, pods, _ = load_registry(new_key(), trials, trainable=CONTAINER if mode == "logs" else None)
        ctl = registry.get(NAMESPACE, EXPERIMENT)
        latencies, sent_of_batch = [], []
        record = ctl.record_results

        def timed_record(trial, attempt, results, checkpoint, **kwargs):
            sent_of_batch.extend(r["sent"] for r in results)
            return record(trial, attempt, results, checkpoint, **kwargs)

        commit = registry.commit

        async def timed_commit(controller):
            await commit(controller)
            now = time.time()
            latencies.extend(now - sent for sent in sent_of_batch)
            sent_of_batch.clear()

        runner, streams = None, None
        if mode == "logs":
            ctl.record_results, registry.commit = timed_record, timed_commit
            cfg = client.Configuration()
            cfg.host = log_url
            streams = LogStreams(cfg, registry, lambda ns, exp, pod: pods.get(pod))
            streams.follow(ctl, pods)
            tokens = None
        else:
            runner = web.AppRunner(make_app(registry), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            tokens = {t.name: ctl.token(t.name, 0) for t in ctl.trials.values()}
        conn.send((runner.addresses[0][1] if runner else None, tokens))
        await asyncio.sleep(warmup)
        latencies.clear()
        decided = ctl.decisions.scheduler.num_stopped
        cpu, started = cpu_seconds(), time.monotonic()
        await asyncio.sleep(duration)
        cpu, wall = cpu_seconds() - cpu, time.monotonic() - started
        conn.send(
            {
                "cpu_percent": 100 * cpu / wall,
                "rss_mib": rss_mib(),
                "latencies": list(latencies),
                "asha_stops": ctl.decisions.scheduler.num_stopped - decided,
            }
        )
        if streams is not None:
            await streams.close()
        if runner is not None:
            await runner.cleanup()

    asyncio.run(main())


def line(i: int, lr: float) -> str:
    return f"epoch {i}: loss={1.0 / (1 + i * lr * 100):.6f} sent={time.time():.6f}\n"


async def log_server(period: float, counter: list[int]) -> web.AppRunner:
    """The API server's ``pods/<pod>/log?follow=true`` for every pod: a line every ``period`` seconds."""

    async def log(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        lr = (hash(request.match_info["pod"]) % 1000 + 1) / 1e5
        i = 0
        try:
            while True:
                i += 1
                await response.write(line(i, lr).encode())
                counter[0] += 1
                await asyncio.sleep(period)
        except ConnectionError:  # the operator side ended
            return response

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/log", log)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def post_results(port: int, tokens: dict[str, str], period: float, latencies: list, counter: list[int]):
    """Runtime-like reporters: each trial posts a batch of one result every ``period`` seconds."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def trial(name: str, token: str) -> None:
            lr = (hash(name) % 1000 + 1) / 1e5
            i = 0
            while True:
                i += 1
                sent = time.time()
                loss = 1.0 / (1 + i * lr * 100)
                body = {
                    "namespace": NAMESPACE,
                    "experiment": EXPERIMENT,
                    "trial": name,
                    "attempt": 0,
                    "results": [{"training_iteration": i, "loss": loss, "sent": sent}],
                }
                headers = {"Authorization": f"Bearer {token}"}
                async with session.post(
                    f"http://127.0.0.1:{port}{COLLECTOR_RESULTS_PATH}", json=body, headers=headers
                ) as r:
                    await r.read()
                latencies.append(time.time() - sent)
                counter[0] += 1
                await asyncio.sleep(max(0.0, period - (time.time() - sent)))

        await asyncio.gather(*(trial(n, t) for n, t in tokens.items()))


def run(mode: str, trials: int, period: float, warmup: float, duration: float) -> dict:
    async def main() -> dict:
        counter, client_latencies = [0], []
        server = await log_server(period, counter) if mode == "logs" else None
        url = f"http://127.0.0.1:{server.addresses[0][1]}" if server else ""
        ours, theirs = multiprocessing.get_context("spawn").Pipe()
        child = multiprocessing.get_context("spawn").Process(
            target=operator_side, args=(mode, trials, url, warmup, duration, theirs)
        )
        child.start()
        loop = asyncio.get_running_loop()
        port, tokens = await loop.run_in_executor(None, ours.recv)
        poster = None
        if mode == "collector":
            poster = asyncio.create_task(post_results(port, tokens, period, client_latencies, counter))
        await asyncio.sleep(warmup)
        client_latencies.clear()
        lines = counter[0]
        figures = await loop.run_in_executor(None, ours.recv)
        figures["lines"] = counter[0] - lines
        if poster is not None:
            poster.cancel()
            figures["latencies"] = client_latencies
        child.join(30)
        if server is not None:
            await server.cleanup()
        return figures

    return asyncio.run(main())


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds per mode and phase")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--latency-trials", type=int, default=20)
    parser.add_argument("--load-trials", type=int, nargs="+", default=[200, 1000])
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket per stream, in both processes
    print(f"machine: {os.cpu_count()} CPUs; operator side in a child process; ASHA on loss/min")
    ok = True
    phases = [("latency", args.latency_trials, 0.25)] + [("load", n, 1.0) for n in args.load_trials]
    for phase, trials, period in phases:
        got = {mode: run(mode, trials, period, args.warmup, args.duration) for mode in ("logs", "collector")}
        print(f"\n{phase}: {trials} trials, a result every {period:g} s each, {args.duration:g} s measured")
        for mode, f in got.items():
            lat = [x * 1000 for x in f["latencies"]]
            print(
                f"  {mode:9} offered {f['lines']:6d}  decided {len(lat):6d}  p50 {percentile(lat, 50):7.1f} ms  "
                f"p99 {percentile(lat, 99):7.1f} ms  operator CPU {f['cpu_percent']:5.1f} %  "
                f"RSS {f['rss_mib']:6.1f} MiB  ASHA stops {f['asha_stops']}"
            )
        logs, base = got["logs"], got["collector"]
        ratio = {
            "p50": percentile(logs["latencies"], 50) / percentile(base["latencies"], 50),
            "p99": percentile(logs["latencies"], 99) / percentile(base["latencies"], 99),
            "cpu": logs["cpu_percent"] / max(base["cpu_percent"], 1e-9),
            "rss": logs["rss_mib"] / base["rss_mib"],
        }
        print("  ratio logs/collector: " + "  ".join(f"{k} {v:.2f}" for k, v in ratio.items()))
        for mode, f in got.items():  # a mode that fell far behind its offered load says so
            if len(f["latencies"]) < 0.5 * trials * args.duration / period:
                print(f"  CHECK FAILED: {mode} decided {len(f['latencies'])} results of {f['lines']} offered")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
