"""Benchmark of the operator's results collector: throughput and decision latency under load.

Stand-alone script (no pytest). The collector under test is the operator's real aiohttp app
(``kubetune_operator.collector.make_app``) serving a :class:`~kubetune_operator.registry.Registry`
with one loaded Experiment: ``--trials`` trials (random search over ``lr``, ASHA scheduler on
``loss``/``min``), created and marked Running through ``ExperimentController.plan`` and
``trial_created`` exactly as the operator's daemon does, so every request goes through token
verification, ``record_results`` and the scheduler. It runs in a separate process (spawn); the load
generator runs in this one. The baseline is the same generator against a trivial aiohttp process
that reads the body and answers ``{"decision": "continue"}``: the HTTP stack alone.

Load: ``--connections`` workers, each with its share of the trials, POST batches of ``--batch``
results of one trial at a time (``training_iteration`` increasing per trial, a ``loss`` that falls
with the iteration and depends on the trial's ``lr``, ``time_total_s``; a checkpoint every tenth
batch) with that trial's token, as ``kubetune.reporter`` does. A simulated trial keeps reporting after
a ``stop`` (a real one would end and a new trial take its slot); the controller's work per result is
the same either way, since a trial's phase only changes when its pod ends. Two phases per server,
each ``--duration`` seconds after ``--warmup``:

* **saturated**: each worker sends its next batch as soon as the reply arrives (closed loop);
  gives the most results/s, and latencies that are mostly queueing behind ``--connections``.
* **paced**: the workers together offer ``--rate`` results/s; each latency is taken from the
  request's scheduled send time, so a server that falls behind shows it (no coordinated omission).

Figures: results/s, requests/s, per-request latency p50/p90/p99 (POST to decision parsed, as the
runtime sees it), CPU µs per request of the server and of this client (from ``/proc``), and the
server's CPU-bound capacity (results per CPU second), which stays meaningful on a shared machine.
Goal (issue 3): >= 5,000 results/s saturated, p99 < 20 ms at the paced rate. The run also checks
that the replies are real decisions (ASHA stops > 0, consistent with the scheduler's own count)
and that a forged token and another trial's token both get 401; it exits 1 if a check fails.

Run: ``.venv/bin/python bench/bench_collector.py [--duration S] [--connections N] [--batch B]
[--trials T] [--rate R] [--warmup S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from kubetune.env import COLLECTOR_RESULTS_PATH
from kubetune_operator.collector import make_app
from kubetune_operator.controller import PodView
from kubetune_operator.labels import pod_name
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings
from kubetune_operator.tokens import mint_token, new_key

NAMESPACE, EXPERIMENT = "bench", "asha-bench"
GOAL_RESULTS_PER_S, GOAL_P99_MS = 5000, 20.0
#: ASHA's rungs at 1, 4, 16, ..., 4**7; max_t = 4**8 is beyond what a trial reaches in a run.
ASHA_PARAMS = {"max_t": 4 ** 8, "grace_period": 1, "reduction_factor": 4}


def experiment(trials: int) -> dict:
    """The benchmark's Experiment object: ``trials`` random ``lr`` samples, ASHA, all running at once."""
    return {"apiVersion": "kubetune.io/v1alpha1", "kind": "Experiment",
            "metadata": {"name": EXPERIMENT, "namespace": NAMESPACE, "uid": "bench-uid", "generation": 1},
            "spec": {"trainable": {"entrypoint": "bench:Trainable"}, "image": "bench",
                     "config": {"lr": {"loguniform": [1e-5, 1e-1]}}, "numSamples": trials,
                     "metric": "loss", "mode": "min", "maxConcurrentTrials": trials,
                     "searchAlgorithm": {"name": "basic", "seed": 7},
                     "scheduler": {"name": "asha", "params": ASHA_PARAMS},
                     "storage": {"uri": "s3://bench/results"}}}


def load_registry(key: bytes, trials: int) -> tuple[Registry, list[dict]]:
    """A registry holding the Experiment with all its trials created and their pods Running.

    Returns:
        The registry and ``[{"name", "attempt", "lr"}]`` per trial.
    """
    registry = Registry(Settings(), key)
    ctl = registry.load(experiment(trials))
    now = time.time()
    for manifest in ctl.plan({}, now).create_trials:
        ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
    pods = {}
    for manifest in ctl.plan({}, now + 1).create_pods:
        name = manifest["metadata"]["name"]
        trial, attempt = name.rsplit("-", 1)
        pods[name] = PodView(name, trial, int(attempt), "Running")
    ctl.plan(pods, now + 2)
    running = [t for t in ctl.trials.values() if t.phase == "Running"]
    if len(running) != trials or any(pod_name(t.name, t.attempt) not in pods for t in running):
        raise RuntimeError(f"expected {trials} running trials, got {len(running)}")
    return registry, [{"name": t.name, "attempt": t.attempt, "lr": t.config["lr"]} for t in running]


def baseline_app() -> web.Application:
    """The HTTP stack alone: read the body, answer continue."""
    async def results(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"decision": "continue"})

    app = web.Application()
    app.router.add_post(COLLECTOR_RESULTS_PATH, results)
    return app


def serve(kind: str, key: bytes, trials: int, conn) -> None:
    """Child process: serve ``kind`` ("collector" or "baseline") on 127.0.0.1.

    Sends ``(port, trials info or None)`` on ``conn``, serves until it receives anything, then
    replies with the scheduler's counters (``{}`` for the baseline) and exits.
    """
    async def main() -> None:
        registry = None
        if kind == "collector":
            registry, info = load_registry(key, trials)
            app = make_app(registry)
        else:
            app, info = baseline_app(), None
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        conn.send((runner.addresses[0][1], info))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        stats = {}
        if registry is not None:
            scheduler = registry.get(NAMESPACE, EXPERIMENT).scheduler
            stats = {"asha_stops": scheduler.num_stopped,
                     "rung_sizes": [len(recorded) for _, recorded in scheduler.rungs[0]]}
        conn.send(stats)
        await runner.cleanup()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux ``/proc/<pid>/stat``), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class TrialFeed:
    """One simulated trial's reporter: its identity, token and training progress."""

    name: str
    attempt: int
    lr: float
    token: str
    iteration: int = 0
    time_total_s: float = 0.0
    batches: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_body(self, batch: int) -> bytes:
        """The next request body: ``batch`` results, and the latest checkpoint every tenth batch."""
        quality = (math.log10(self.lr) + 3.0) ** 2  # best near lr = 1e-3
        results = []
        for _ in range(batch):
            self.iteration += 1
            step = 0.05 + self.rng.random() * 0.01
            self.time_total_s += step
            loss = 0.1 + 0.3 * quality + 2.0 / (1 + 0.1 * self.iteration) + self.rng.gauss(0, 0.02)
            results.append({"loss": loss, "training_iteration": self.iteration, "time_this_iter_s": step,
                            "time_total_s": self.time_total_s, "timestamp": int(time.time()),
                            "trial_id": self.name, "iterations_since_restore": self.iteration, "done": False})
        self.batches += 1
        checkpoint = None
        if self.batches % 10 == 0:
            checkpoint = {"uri": f"s3://bench/results/{NAMESPACE}/{EXPERIMENT}/{self.name}/"
                                 f"checkpoint_{self.iteration:06d}", "iteration": self.iteration}
        return json.dumps({"namespace": NAMESPACE, "experiment": EXPERIMENT, "trial": self.name,
                           "attempt": self.attempt, "results": results, "checkpoint": checkpoint,
                           "done": False}).encode()


@dataclass
class PhaseStats:
    """What one load phase measured (latencies in seconds)."""

    label: str
    duration: float
    requests: int = 0
    results: int = 0
    latencies: list[float] = field(default_factory=list)
    decisions: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    server_cpu: float = math.nan
    client_cpu: float = math.nan

    def percentile(self, q: float) -> float:
        """Latency percentile ``q`` (0..100, nearest rank) in milliseconds."""
        if not self.latencies:
            return math.nan
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))] * 1000

    @property
    def results_per_s(self) -> float:
        return self.results / self.duration

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration


async def run_phase(label: str, url: str, server_pid: int, feeds: list[TrialFeed], connections: int, batch: int,
                    warmup: float, duration: float, rate: float | None) -> PhaseStats:
    """Drive ``url`` for ``warmup + duration`` seconds; measure the last ``duration`` seconds.

    ``rate`` None: closed loop; else the workers together offer ``rate`` results/s, on a schedule.
    Throughput counts replies received within the window; latencies are of requests sent in it.
    """
    stats = PhaseStats(label, duration)
    clock = time.perf_counter
    start = clock()
    measure_from, end = start + warmup, start + warmup + duration
    interval = connections * batch / rate if rate else 0.0

    async def worker(w: int, session: aiohttp.ClientSession) -> None:
        own = feeds[w::connections]
        next_send = start + w * interval / connections
        k = 0
        while True:
            if rate:
                delay = next_send - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent, next_send = next_send, next_send + interval
            else:
                sent = clock()
            if sent >= end:
                return
            feed = own[k % len(own)]
            k += 1
            body = feed.next_body(batch)
            async with session.post(url, data=body, headers={"Authorization": f"Bearer {feed.token}",
                                                             "Content-Type": "application/json"}) as resp:
                payload, status = await resp.read(), resp.status
            done = clock()
            if sent >= measure_from:
                stats.latencies.append(done - sent)
                if status == 200:
                    stats.decisions[json.loads(payload)["decision"]] += 1
                else:
                    stats.errors[status] += 1
            if measure_from <= done < end:
                stats.requests += 1
                stats.results += batch

    async def cpu_marks() -> None:
        await asyncio.sleep(measure_from - clock())
        server0, client0 = cpu_seconds(server_pid), time.process_time()
        await asyncio.sleep(end - clock())
        stats.server_cpu, stats.client_cpu = cpu_seconds(server_pid) - server0, time.process_time() - client0

    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(cpu_marks(), *(worker(w, session) for w in range(connections)))
    return stats


async def auth_checks(url: str, key: bytes, feeds: list[TrialFeed]) -> dict[str, int]:
    """Status codes for a batch with a forged token and one with another trial's valid token."""
    victim, other = feeds[0], feeds[1]
    body = json.dumps({"namespace": NAMESPACE, "experiment": EXPERIMENT, "trial": victim.name,
                       "attempt": victim.attempt, "results": [{"loss": -1e9, "training_iteration": 1}],
                       "checkpoint": None, "done": False}).encode()
    tokens = {"forged token": mint_token(new_key(), NAMESPACE, victim.name, victim.attempt),
              "another trial's token": other.token}
    codes = {}
    async with aiohttp.ClientSession() as session:
        for what, token in tokens.items():
            async with session.post(url, data=body, headers={"Authorization": f"Bearer {token}"}) as resp:
                codes[what] = resp.status
    return codes


def bench_server(kind: str, args: argparse.Namespace, key: bytes) -> tuple[list[PhaseStats], dict, dict]:
    """Start the ``kind`` server process, run the saturated and paced phases, stop it.

    Returns:
        The two phases' stats, the server's counters, and the auth check codes (collector only).
    """
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(kind, key, args.trials, child), daemon=True)
    proc.start()
    try:
        deadline = time.monotonic() + 60
        while not parent.poll(0.1):
            if not proc.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} server did not start (exit code {proc.exitcode})")
        port, info = parent.recv()
        url = f"http://127.0.0.1:{port}{COLLECTOR_RESULTS_PATH}"
        if info is None:  # the baseline checks nothing: any names and tokens do
            info = [{"name": f"trial-{i}", "attempt": 0, "lr": 10 ** -(1 + 4 * i / args.trials)}
                    for i in range(args.trials)]
        feeds = [TrialFeed(t["name"], t["attempt"], t["lr"], mint_token(key, NAMESPACE, t["name"], t["attempt"]),
                           rng=random.Random(i)) for i, t in enumerate(info)]
        phases = []
        for label, rate in (("saturated", None), (f"paced {args.rate:g}/s", args.rate)):
            phases.append(asyncio.run(run_phase(f"{kind} {label}", url, proc.pid, feeds, args.connections,
                                                args.batch, args.warmup, args.duration, rate)))
        codes = asyncio.run(auth_checks(url, key, feeds)) if kind == "collector" else {}
        parent.send("stop")
        counters = parent.recv() if parent.poll(30) else {}
        proc.join(10)
        return phases, counters, codes
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per phase (default 8)")
    parser.add_argument("--warmup", type=float, default=1.5, help="unmeasured seconds before each phase")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections (default 32)")
    parser.add_argument("--batch", type=int, default=10, help="results per request (default 10)")
    parser.add_argument("--trials", type=int, default=64, help="trials in the Experiment (default 64)")
    parser.add_argument("--rate", type=float, default=GOAL_RESULTS_PER_S,
                        help=f"results/s offered in the paced phase (default {GOAL_RESULTS_PER_S})")
    args = parser.parse_args(argv)
    if args.connections > args.trials or args.trials < 2 or args.batch < 1:
        parser.error("need --trials >= 2, --connections <= --trials, --batch >= 1")

    key = new_key()
    print(f"collector benchmark: {args.trials} trials (ASHA {ASHA_PARAMS}, loss/min), {args.connections} "
          f"connections, {args.batch} results per request, {args.warmup:g} s warm-up + {args.duration:g} s "
          f"per phase; CPUs here: {os.cpu_count()}")
    base_phases, _, _ = bench_server("baseline", args, key)
    coll_phases, counters, codes = bench_server("collector", args, key)

    header = (f"{'phase':<28}{'results/s':>11}{'requests/s':>12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
              f"{'server µs/req':>15}{'client µs/req':>15}")
    print(header)
    for s in base_phases + coll_phases:
        per_req = 1e6 / max(s.requests, 1)
        print(f"{s.label:<28}{s.results_per_s:>11.0f}{s.requests_per_s:>12.0f}{s.percentile(50):>9.2f}"
              f"{s.percentile(90):>9.2f}{s.percentile(99):>9.2f}{s.server_cpu * per_req:>15.0f}"
              f"{s.client_cpu * per_req:>15.0f}")
    (base_sat, base_paced), (coll_sat, coll_paced) = base_phases, coll_phases
    print(f"ratio collector/baseline, saturated: throughput {coll_sat.results_per_s / base_sat.results_per_s:.2f}, "
          f"p99 {coll_sat.percentile(99) / base_sat.percentile(99):.2f}; paced: p99 "
          f"{coll_paced.percentile(99) / base_paced.percentile(99):.2f}")

    capacity = {s.label: args.batch * s.requests / s.server_cpu for s in (base_sat, coll_sat) if s.server_cpu > 0}
    print("server CPU-bound capacity (batch * requests / server CPU seconds, saturated): "
          + ", ".join(f"{label} {value:.0f} results/s per core" for label, value in capacity.items()))

    decisions = coll_sat.decisions + coll_paced.decisions
    errors = coll_sat.errors + coll_paced.errors + base_sat.errors + base_paced.errors
    print(f"collector decisions (measured requests): {dict(decisions)}; ASHA stops over the whole run: "
          f"{counters.get('asha_stops')}; rung sizes (1, 4, 16, ...): {list(reversed(counters.get('rung_sizes', [])))}")
    print(f"auth: {', '.join(f'{what} -> {code}' for what, code in codes.items())}")

    failures = []
    if errors:
        failures.append(f"non-200 replies under load: {dict(errors)}")
    if not decisions["stop"] or not decisions["continue"]:
        failures.append("the collector did not answer both continue and stop: its decisions are not real")
    if decisions["stop"] > counters.get("asha_stops", 0):
        failures.append("more stop replies than ASHA stop decisions")
    if set(decisions) - {"continue", "stop"}:
        failures.append(f"unexpected decisions {set(decisions) - {'continue', 'stop'}}")
    if any(code != 401 for code in codes.values()) or len(codes) != 2:
        failures.append(f"bad tokens were not refused with 401: {codes}")

    sat_ok = coll_sat.results_per_s >= GOAL_RESULTS_PER_S
    paced_ok = coll_paced.percentile(99) < GOAL_P99_MS and coll_paced.results_per_s >= 0.95 * args.rate
    print(f"goal >= {GOAL_RESULTS_PER_S} results/s (saturated): {'MET' if sat_ok else 'MISSED'} "
          f"({coll_sat.results_per_s:.0f}/s)")
    print(f"goal p99 < {GOAL_P99_MS:g} ms at {args.rate:g} results/s (paced): {'MET' if paced_ok else 'MISSED'} "
          f"(p99 {coll_paced.percentile(99):.2f} ms, {coll_paced.results_per_s:.0f} results/s delivered)")
    for failure in failures:
        print(f"CHECK FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
