"""Benchmark of the operator's results collector: throughput and decision latency under load.

Stand-alone script (no pytest). The collector under test is the operator's real aiohttp app
(``kubetune_operator.collector.make_app``) serving a :class:`~kubetune_operator.registry.Registry`
with one loaded Experiment: ``--trials`` trials (random search over ``lr``, ASHA scheduler on
``loss``/``min``), created and marked Running through ``ExperimentController.plan`` and
``trial_created`` exactly as the operator's daemon does, so every request goes through token
verification, ``record_results`` and the scheduler. As in the operator, the Experiment daemon's
reconcile passes (``ExperimentController.plan`` on the observed pods, at most every
``handlers.MIN_PASS_INTERVAL_S``, woken by each batch) share the collector's event loop; only the
API calls a pass would make are left out (``--without-reconcile`` leaves the passes out too). As in the
operator, what is imported before the Experiment is loaded is frozen out of the cyclic garbage collector
(``gc.freeze()``, ``handlers.startup``; ``--without-gc-freeze`` leaves it out). The
server runs in a separate process (spawn); the load generator runs in this one. The baseline is the
same generator against a trivial aiohttp process that reads the body and answers
``{"decision": "continue"}``: the HTTP stack alone.

Load: ``--connections`` workers, each with its share of the trials, POST batches of ``--batch``
results of one trial at a time (``training_iteration`` increasing per trial, a ``loss`` that falls
with the iteration and depends on the trial's ``lr``, ``time_total_s``; a checkpoint every tenth
batch) with that trial's token, as ``kubetune.runtime.reporter`` does. A simulated trial keeps reporting after
a ``stop`` (a real one would end and a new trial take its slot); the controller's work per result is
the same either way, since a trial's phase only changes when its pod ends. Two kinds of phase:

* **saturated**: each worker sends its next batch as soon as the reply arrives (closed loop);
  gives the most results/s, and latencies that are mostly queueing behind ``--connections``.
* **paced**: the workers together offer ``--rate`` results/s; each latency is taken from the
  request's scheduled send time, so a server that falls behind shows it (no coordinated omission).

Both servers run for the whole benchmark; each (server, phase) gets ``--duration`` measured seconds,
split into ``--rounds`` slices (each after ``--warmup`` unmeasured seconds) that alternate between
the two servers, so a shared machine's changing load hits both sides alike.

Figures: results/s, requests/s, per-request latency p50/p90/p99 (POST to decision parsed, as the
runtime sees it), CPU µs per request of the server and of this client (from ``/proc``), and the
server's CPU-bound capacity (results per CPU second), which stays meaningful on a shared machine.
Goal (issue 3): >= 5,000 results/s saturated, p99 < 20 ms at the paced rate. The run also checks
that the replies are real decisions (ASHA stops > 0, and no more trials told stop than ASHA stopped:
a simulated trial told stop keeps sending, where a real one ends, and the stop stays in force for it)
and that a forged token and another trial's token both get 401; it exits 1 if a check fails.

Run: ``.venv/bin/python bench/bench_collector.py [--duration S] [--connections N] [--batch B]
[--trials T] [--rate R] [--rounds K] [--warmup S] [--without-reconcile] [--without-gc-freeze] [--with-unchecked]
[--with-ranged]`` (about 45 s with the defaults). ``--with-unchecked`` adds a server in the same alternating slices:
the collector without its checks of the values from pods (``kubetune_operator.podinput``), and the ratio to it;
``--with-ranged`` one whose Experiment has ``bestTrialScope: all`` (each result widens its Trial's
``metricRange``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # devcluster.testkit, in the spawned server too

from devcluster.testkit import ConfigMaps, experiment_object
from kubetune.checkpoint_store import checkpoint_uri
from kubetune.env import COLLECTOR_RESULTS_PATH
from kubetune_operator import collector
from kubetune_operator.builders import trial_dir_uri
from kubetune_operator.collector import make_app
from kubetune_operator.handlers import IDLE_PASS_INTERVAL_S, MIN_PASS_INTERVAL_S
from kubetune_operator.labels import pod_name
from kubetune_operator.podview import PodView
from kubetune_operator.registry import Registry
from kubetune_operator.settings import Settings
from kubetune_operator.tokens import mint_token, new_key

NAMESPACE, EXPERIMENT, EXPERIMENT_UID = "bench", "asha-bench", "bench-uid"
STORAGE_URI = "s3://bench/results"  # checkpoints are reported in each trial's own folder under it, as a runtime's
GOAL_RESULTS_PER_S, GOAL_P99_MS = 5000, 20.0
#: ASHA with rungs at 1, 4, 16, ..., 4**8 = max_t: far more iterations than a trial reaches in a run.
ASHA_PARAMS = {"max_t": 4**8, "grace_period": 1, "reduction_factor": 4}


def experiment(trials: int, scheduler: dict | None = None, trainable: dict | None = None, **spec) -> dict:
    """The benchmark's Experiment object: ``trials`` random ``lr`` samples, all running at once, under
    ``scheduler`` (default ASHA with :data:`ASHA_PARAMS`), of ``trainable`` (default a runtime trial's), with the
    fields of ``spec`` added."""
    return experiment_object(
        EXPERIMENT,
        EXPERIMENT_UID,
        namespace=NAMESPACE,
        trainable=trainable or {"entrypoint": "bench:Trainable"},
        image="bench",
        config={"lr": {"loguniform": [1e-5, 1e-1]}},
        numSamples=trials,
        metric="loss",
        mode="min",
        maxConcurrentTrials=trials,
        searchAlgorithm={"name": "basic", "seed": 7},
        scheduler=scheduler or {"name": "asha", "params": ASHA_PARAMS},
        storage={"uri": STORAGE_URI},
        **spec,
    )


def load_registry(
    key: bytes, trials: int, scheduler: dict | None = None, trainable: dict | None = None, **spec
) -> tuple[Registry, dict[str, PodView], list[dict]]:
    """A registry holding the Experiment (``scheduler``, ``trainable`` and ``spec`` as for :func:`experiment`) with
    all its trials created and their pods Running.

    Returns:
        The registry, the pods by name (as the daemon observes them), and
        ``[{"name", "attempt", "lr"}]`` per trial.

    Raises:
        RuntimeError: the controller did not bring every trial to Running.
    """
    # The journal is committed before every answer, as in the operator, into ConfigMaps held in memory:
    # this measures the collector's own work, not the API server's write latency.
    registry = Registry(Settings(), key, ConfigMaps().write)
    ctl = registry.load(experiment(trials, scheduler, trainable, **spec))
    ctl.restore([])  # no Trials or journal existed before: what the daemon's first pass finds
    now = time.time()
    pods, created = {}, True
    while created:  # a pass asks the searcher for what fits in its time (SUGGEST_SECONDS_PER_PASS)
        plan = ctl.plan({}, now)
        created = plan.create_trials
        for manifest in created:
            ctl.trial_created(manifest["metadata"]["name"], "uid-" + manifest["metadata"]["name"])
        for manifest in plan.create_pods:
            name = manifest["metadata"]["name"]
            trial, attempt = name.rsplit("-", 1)
            pods[name] = PodView(name, trial, int(attempt), "Running")
    ctl.plan(pods, now + 1)
    running = [t for t in ctl.trials.values() if t.phase == "Running"]
    if len(running) != trials or any(pod_name(t.name, t.attempt) not in pods for t in running):
        raise RuntimeError(f"expected {trials} running trials, got {len(running)}")
    return registry, pods, [{"name": t.name, "attempt": t.attempt, "lr": t.config["lr"]} for t in running]


async def reconcile_passes(registry: Registry, pods: dict[str, PodView], timings: list[float]) -> None:
    """The Experiment daemon's pass cadence (``handlers.reconcile``) without its API calls; runs until cancelled.

    Appends each ``plan`` call's duration (seconds) to ``timings``.
    """
    ctl, wake = registry.get(NAMESPACE, EXPERIMENT), registry.event(NAMESPACE, EXPERIMENT)
    while True:
        started = time.monotonic()
        ctl.plan(pods)
        timings.append(time.monotonic() - started)
        try:
            await asyncio.wait_for(wake.wait(), timeout=IDLE_PASS_INTERVAL_S)
        except asyncio.TimeoutError:
            pass
        wake.clear()
        await asyncio.sleep(max(0.0, MIN_PASS_INTERVAL_S - (time.monotonic() - started)))


def baseline_app() -> web.Application:
    """The HTTP stack alone: read the body, answer continue."""

    async def results(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"decision": "continue"})

    app = web.Application()
    app.router.add_post(COLLECTOR_RESULTS_PATH, results)
    return app


def serve(kind: str, key: bytes, trials: int, reconcile: bool, freeze: bool, conn) -> None:
    """Child process: serve ``kind`` on 127.0.0.1: "collector", "baseline", "unchecked" (the collector without
    its checks of the values from pods, ``collector._problem``: what they cost), or "ranged" (the collector of the
    Experiment with ``bestTrialScope: all``: each Trial's ``metricRange`` widened at every result).

    Sends ``(port, trials info or None)`` on ``conn``, serves until it receives anything, then
    replies with the scheduler's counters and the reconcile passes' timings (``{}`` for the baseline), exits.
    """

    async def main() -> None:
        registry, passes, timings = None, None, []
        if kind in ("collector", "unchecked", "ranged"):
            if kind == "unchecked":
                collector._problem = lambda *args, **kwargs: None
            if freeze:
                gc.freeze()  # as handlers.startup does once the operator is up, before any Experiment is loaded
            registry, pods, info = load_registry(key, trials, **({"bestTrialScope": "all"} if kind == "ranged" else {}))
            app = make_app(registry)
            if reconcile:
                passes = asyncio.create_task(reconcile_passes(registry, pods, timings))
        else:
            app, info = baseline_app(), None
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        conn.send((runner.addresses[0][1], info))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        stats = {}
        if passes is not None:
            passes.cancel()
        if registry is not None:
            scheduler = registry.get(NAMESPACE, EXPERIMENT).decisions.scheduler
            stats = {
                "asha_stops": scheduler.num_stopped,
                "rung_sizes": [len(recorded) for _, recorded in scheduler.rungs[0]],
                "plan_s": timings,
            }
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
    """One simulated trial's reporter: its identity, token and training progress. ``namespace``,
    ``experiment`` and ``trial_dir`` (its storage folder; default: under :data:`STORAGE_URI`) name the
    Experiment it reports into, this benchmark's own by default."""

    name: str
    attempt: int
    lr: float
    token: str
    iteration: int = 0
    time_total_s: float = 0.0
    batches: int = 0
    rng: random.Random = field(default_factory=random.Random)
    namespace: str = NAMESPACE
    experiment: str = EXPERIMENT
    trial_dir: str = ""

    def __post_init__(self) -> None:
        if not self.trial_dir:
            self.trial_dir = trial_dir_uri(STORAGE_URI, NAMESPACE, EXPERIMENT, EXPERIMENT_UID, self.name)

    def next_body(self, batch: int) -> bytes:
        """The next request body: ``batch`` results, and the latest checkpoint every tenth batch."""
        quality = (math.log10(self.lr) + 3.0) ** 2  # best near lr = 1e-3
        results = []
        for _ in range(batch):
            self.iteration += 1
            step = 0.05 + self.rng.random() * 0.01
            self.time_total_s += step
            loss = 0.1 + 0.3 * quality + 2.0 / (1 + 0.1 * self.iteration) + self.rng.gauss(0, 0.02)
            results.append(
                {
                    "loss": loss,
                    "training_iteration": self.iteration,
                    "time_this_iter_s": step,
                    "time_total_s": self.time_total_s,
                    "timestamp": int(time.time()),
                    "trial_id": self.name,
                    "iterations_since_restore": self.iteration,
                    "done": False,
                }
            )
        self.batches += 1
        checkpoint = None
        if self.batches % 10 == 0:
            checkpoint = {
                "uri": checkpoint_uri(self.trial_dir, self.iteration),
                "iteration": self.iteration,
            }
        return json.dumps(
            {
                "namespace": self.namespace,
                "experiment": self.experiment,
                "trial": self.name,
                "attempt": self.attempt,
                "results": results,
                "checkpoint": checkpoint,
                "done": False,
            }
        ).encode()


@dataclass
class PhaseStats:
    """What one load phase measured (latencies in seconds)."""

    label: str
    duration: float = 0.0
    requests: int = 0
    results: int = 0
    latencies: list[float] = field(default_factory=list)
    decisions: Counter = field(default_factory=Counter)
    told_stop: set = field(default_factory=set)  # trials that got a stop reply (measured or not)
    errors: Counter = field(default_factory=Counter)
    server_cpu: float = 0.0
    client_cpu: float = 0.0

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


@dataclass
class Server:
    """A server process and what the load generator needs of it."""

    kind: str
    proc: multiprocessing.Process
    conn: object
    url: str
    feeds: list[TrialFeed]


def start_server(kind: str, key: bytes, trials: int, reconcile: bool, freeze: bool) -> Server:
    """Start the ``kind`` server process (:func:`serve`) and wait until it listens.

    Raises:
        RuntimeError: it exited or did not listen within 60 s.
    """
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(kind, key, trials, reconcile, freeze, child), daemon=True)
    proc.start()
    deadline = time.monotonic() + 60
    while not parent.poll(0.1):
        if not proc.is_alive() or time.monotonic() > deadline:
            proc.terminate()
            raise RuntimeError(f"the {kind} server did not start (exit code {proc.exitcode})")
    port, info = parent.recv()
    if info is None:  # the baseline checks nothing: any names and tokens do
        info = [{"name": f"trial-{i}", "attempt": 0, "lr": 10 ** -(1 + 4 * i / trials)} for i in range(trials)]
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
    return Server(kind, proc, parent, f"http://127.0.0.1:{port}{COLLECTOR_RESULTS_PATH}", feeds)


def stop_server(server: Server) -> dict:
    """Stop the server; return its counters (``{}`` if it did not answer)."""
    counters = {}
    try:
        server.conn.send("stop")
        counters = server.conn.recv() if server.conn.poll(30) else {}
        server.proc.join(10)
    finally:
        if server.proc.is_alive():
            server.proc.terminate()
            server.proc.join()
    return counters


async def run_slice(
    stats: PhaseStats, server: Server, connections: int, batch: int, warmup: float, duration: float, rate: float | None
) -> None:
    """Drive ``server`` for ``warmup + duration`` seconds; add the last ``duration`` seconds to ``stats``.

    ``rate`` None: closed loop; else the workers together offer ``rate`` results/s, on a schedule.
    Throughput counts replies received within the window; latencies are of requests sent in it.
    """
    clock = time.perf_counter
    start = clock()
    measure_from, end = start + warmup, start + warmup + duration
    interval = connections * batch / rate if rate else 0.0

    async def worker(w: int, session: aiohttp.ClientSession) -> None:
        own = server.feeds[w::connections]
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
            async with session.post(
                server.url,
                data=body,
                headers={"Authorization": f"Bearer {feed.token}", "Content-Type": "application/json"},
            ) as resp:
                payload, status = await resp.read(), resp.status
            done = clock()
            if status == 200 and json.loads(payload)["decision"] == "stop":
                stats.told_stop.add(feed.name)  # it keeps sending: a stop stays in force for its attempt
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
        server0, client0 = cpu_seconds(server.proc.pid), time.process_time()
        await asyncio.sleep(end - clock())
        stats.server_cpu += cpu_seconds(server.proc.pid) - server0
        stats.client_cpu += time.process_time() - client0

    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(cpu_marks(), *(worker(w, session) for w in range(connections)))
    stats.duration += duration


async def auth_checks(server: Server, key: bytes) -> dict[str, int]:
    """Status codes for a batch with a forged token and one with another trial's valid token."""
    victim, other = server.feeds[0], server.feeds[1]
    body = json.dumps(
        {
            "namespace": NAMESPACE,
            "experiment": EXPERIMENT,
            "trial": victim.name,
            "attempt": victim.attempt,
            "results": [{"loss": -1e9, "training_iteration": 1}],
            "checkpoint": None,
            "done": False,
        }
    ).encode()
    tokens = {
        "forged token": mint_token(new_key(), NAMESPACE, victim.name, victim.attempt, "uid-" + victim.name),
        "another trial's token": other.token,
    }
    codes = {}
    async with aiohttp.ClientSession() as session:
        for what, token in tokens.items():
            async with session.post(server.url, data=body, headers={"Authorization": f"Bearer {token}"}) as resp:
                codes[what] = resp.status
    return codes


async def measure(servers: dict[str, Server], args: argparse.Namespace) -> dict[tuple[str, str], PhaseStats]:
    """All slices, alternating servers; returns the stats by ``(server kind, "saturated" | "paced")``."""
    modes = {"saturated": None, "paced": args.rate}
    stats = {
        (kind, mode): PhaseStats(f"{kind} {mode if rate is None else f'paced {rate:g}/s'}")
        for kind in servers
        for mode, rate in modes.items()
    }
    kinds = list(servers)
    for r in range(args.rounds):
        for mode, rate in modes.items():
            for kind in kinds if r % 2 == 0 else reversed(kinds):
                await run_slice(
                    stats[kind, mode],
                    servers[kind],
                    args.connections,
                    args.batch,
                    args.warmup,
                    args.duration / args.rounds,
                    rate,
                )
    return stats


def _pair(stats: dict[tuple[str, str], PhaseStats], kind: str) -> tuple[PhaseStats | None, PhaseStats | None]:
    return stats.get((kind, "saturated")), stats.get((kind, "paced"))


def report(
    stats: dict[tuple[str, str], PhaseStats], counters: dict, codes: dict[str, int], args: argparse.Namespace
) -> list[str]:
    """Print the figures and verdicts; return the failed sanity checks."""
    print(
        f"{'phase':<28}{'results/s':>11}{'requests/s':>12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
        f"{'server µs/req':>15}{'client µs/req':>15}"
    )
    for s in stats.values():
        per_req = 1e6 / max(s.requests, 1)
        print(
            f"{s.label:<28}{s.results_per_s:>11.0f}{s.requests_per_s:>12.0f}{s.percentile(50):>9.2f}"
            f"{s.percentile(90):>9.2f}{s.percentile(99):>9.2f}{s.server_cpu * per_req:>15.0f}"
            f"{s.client_cpu * per_req:>15.0f}"
        )
    base_sat, base_paced = stats["baseline", "saturated"], stats["baseline", "paced"]
    coll_sat, coll_paced = stats["collector", "saturated"], stats["collector", "paced"]
    others = (
        ("baseline", (base_sat, base_paced)),
        ("unchecked", _pair(stats, "unchecked")),
        ("ranged", _pair(stats, "ranged")),
    )
    for other, (sat, paced) in others:
        if sat is not None:
            print(
                f"ratio collector/{other}: saturated throughput {coll_sat.results_per_s / sat.results_per_s:.2f}, "
                f"saturated p99 {coll_sat.percentile(99) / sat.percentile(99):.2f}, "
                f"paced p99 {coll_paced.percentile(99) / paced.percentile(99):.2f}"
            )
    capacity = {s.label: args.batch * s.requests / s.server_cpu for s in (base_sat, coll_sat) if s.server_cpu > 0}
    print(
        "server CPU-bound capacity (results per server CPU second, saturated): "
        + ", ".join(f"{label.split()[0]} {value:.0f}/s" for label, value in capacity.items())
    )

    decisions = coll_sat.decisions + coll_paced.decisions
    print(
        f"collector decisions (measured requests): {dict(decisions)}; ASHA stops over the whole run: "
        f"{counters.get('asha_stops')}; trials recorded per rung (1, 4, 16, ...): "
        f"{list(reversed(counters.get('rung_sizes', [])))}"
    )
    plan_ms = sorted(t * 1000 for t in counters.get("plan_s", []))
    if plan_ms:
        print(
            f"reconcile passes on the collector's loop: {len(plan_ms)}, plan() median "
            f"{plan_ms[len(plan_ms) // 2]:.2f} ms, max {plan_ms[-1]:.2f} ms"
        )
    print(f"auth: {', '.join(f'{what} -> {code}' for what, code in codes.items())}")
    failures = []
    errors = sum((s.errors for s in stats.values()), Counter())
    if errors:
        failures.append(f"non-200 replies under load: {dict(errors)}")
    if not decisions["stop"] or not decisions["continue"]:
        failures.append("the collector did not answer both continue and stop: its decisions are not real")
    told_stop = coll_sat.told_stop | coll_paced.told_stop
    if len(told_stop) > counters.get("asha_stops", 0):
        failures.append(
            f"{len(told_stop)} trials told stop, more than ASHA's {counters.get('asha_stops')} stop decisions"
        )
    if set(decisions) - {"continue", "stop"}:
        failures.append(f"unexpected decisions {set(decisions) - {'continue', 'stop'}}")
    if len(codes) != 2 or any(code != 401 for code in codes.values()):
        failures.append(f"bad tokens were not refused with 401: {codes}")

    sat_ok = coll_sat.results_per_s >= GOAL_RESULTS_PER_S
    paced_ok = coll_paced.percentile(99) < GOAL_P99_MS and coll_paced.results_per_s >= 0.95 * args.rate
    print(
        f"goal >= {GOAL_RESULTS_PER_S} results/s (saturated): {'MET' if sat_ok else 'MISSED'} "
        f"({coll_sat.results_per_s:.0f}/s)"
    )
    print(
        f"goal p99 < {GOAL_P99_MS:g} ms at {args.rate:g} results/s (paced): {'MET' if paced_ok else 'MISSED'} "
        f"(p99 {coll_paced.percentile(99):.2f} ms, {coll_paced.results_per_s:.0f} results/s delivered)"
    )
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=8.0, help="measured seconds per server and phase kind (default 8)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="slices the duration is split into (default 4)")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each slice")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections (default 32)")
    parser.add_argument("--batch", type=int, default=10, help="results per request (default 10)")
    parser.add_argument("--trials", type=int, default=64, help="trials in the Experiment (default 64)")
    parser.add_argument(
        "--rate",
        type=float,
        default=GOAL_RESULTS_PER_S,
        help=f"results/s offered in the paced phase (default {GOAL_RESULTS_PER_S})",
    )
    parser.add_argument(
        "--without-reconcile",
        action="store_true",
        help="leave the daemon's reconcile passes out of the collector's event loop",
    )
    parser.add_argument(
        "--with-unchecked",
        action="store_true",
        help="also serve the collector without its checks of values from pods, to measure what they cost",
    )
    parser.add_argument(
        "--with-ranged",
        action="store_true",
        help="also serve the collector of the Experiment with bestTrialScope all, to measure what its ranges cost",
    )
    parser.add_argument(
        "--without-gc-freeze",
        action="store_true",
        help="leave out the gc.freeze() the operator does at start-up (to measure what it saves)",
    )
    args = parser.parse_args(argv)
    if args.trials < 2 or args.connections > args.trials or args.batch < 1 or args.rounds < 1:
        parser.error("need --trials >= 2, --connections <= --trials, --batch >= 1, --rounds >= 1")

    key = new_key()
    print(
        f"collector benchmark: {args.trials} trials (ASHA {ASHA_PARAMS}, loss/min), {args.connections} "
        f"connections, {args.batch} results per request, reconcile passes "
        f"{'off' if args.without_reconcile else 'on'}, gc.freeze() at start-up "
        f"{'off' if args.without_gc_freeze else 'on'}, {args.duration:g} s measured per server and phase "
        f"in {args.rounds} alternating slices, each after {args.warmup:g} s warm-up; CPUs here: {os.cpu_count()}"
    )
    servers: dict[str, Server] = {}
    try:
        kinds = [
            "baseline",
            "collector",
            *(["unchecked"] if args.with_unchecked else []),
            *(["ranged"] if args.with_ranged else []),
        ]
        for kind in kinds:
            servers[kind] = start_server(kind, key, args.trials, not args.without_reconcile, not args.without_gc_freeze)
        stats = asyncio.run(measure(servers, args))
        codes = asyncio.run(auth_checks(servers["collector"], key))
    finally:
        counters = {kind: stop_server(server) for kind, server in servers.items()}
    failures = report(stats, counters["collector"], codes, args)
    for failure in failures:
        print(f"CHECK FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
