"""Benchmark of the in-pod runtime: loop overhead per iteration, checkpoint transfer throughput.

Stand-alone script (no pytest); every figure is printed next to its baseline, run in the same
process tree:

1. **Loop overhead.** One iteration of the runtime's loop (``TrialRunner.iterate``: ``train()``,
   result log append, handing the result to the reporter, which posts batches to a collector in a
   separate process, decision and stop checks) with a no-op ``step()``, against calling that
   ``step()`` directly. Medians over single-iteration timings; goal: overhead < 100 µs.
2. **Checkpoint throughput.** Upload (``commit_checkpoint``) and restore (``restore_checkpoint``) of a
   checkpoint directory through ``kubetune.storage`` against raw boto3 ``upload_file`` /
   ``download_file`` of the same files, on a moto S3 server in a separate process; rounds alternate
   which side goes first. Goal: ratio (ours / raw throughput) >= 0.9.

Run: ``.venv/bin/python bench/bench_runtime.py [--iterations N] [--rounds R] [--checkpoint-mib M]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
from moto_process import moto_server  # bench/moto_process.py, beside this script

from kubetune import Trainable
from kubetune.checkpoint_store import commit_checkpoint, restore_checkpoint
from kubetune.env import CheckpointPolicy, TrialEnv
from kubetune.runtime.loop import TrialRunner
from kubetune.runtime.reporter import Reporter
from kubetune.storage import open_storage

MIB = 1 << 20
AWS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}

_COLLECTOR = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = b'{"decision": "continue"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Noop(Trainable):
    """The no-op trainable: ``step()`` returns a constant result."""

    def step(self):
        return {"loss": 0.5}


def _timings_ns(call, n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        start = clock()
        call()
        out.append(clock() - start)
    return out


def bench_overhead(iterations: int, workdir: Path) -> None:
    collector = subprocess.Popen([sys.executable, "-c", _COLLECTOR], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(collector.stdout.readline())}"
        env = TrialEnv(
            namespace="bench",
            experiment="bench",
            trial="t",
            attempt=0,
            config={"lr": 0.1},
            trial_dir_uri=f"file://{workdir}/store/t",
            entrypoint="__main__:Noop",
            checkpoint=CheckpointPolicy(frequency=0, atEnd=False),
            collector_url=url,
            token="bench",
            stop={"training_iteration": 10**12, "loss": 10.0},
            metric="loss",
            mode="min",
        )
        reporter = Reporter(
            url, env.token, namespace="bench", experiment="bench", trial="t", attempt=0, max_buffer=iterations + 1000
        )
        runner = TrialRunner(env, open_storage(env.trial_dir_uri), workdir=workdir / "work", reporter=reporter)
        runner.setup()
        direct = Noop(config={"lr": 0.1})
        warmup = min(1000, iterations // 10)
        _timings_ns(direct.step, warmup)
        step_ns = _timings_ns(direct.step, iterations)
        _timings_ns(runner.iterate, warmup)
        loop_ns = _timings_ns(runner.iterate, iterations)
        runner.finish("done")
        alone = Noop(config={"lr": 0.1})
        train_ns = _timings_ns(alone.train, iterations)
        delivered, dropped = reporter.delivered, reporter.dropped
    finally:
        collector.kill()
        collector.wait()

    med_step, med_loop, med_train = (statistics.median(x) / 1000 for x in (step_ns, loop_ns, train_ns))
    p99 = sorted(loop_ns)[int(len(loop_ns) * 0.99)] / 1000
    print(f"loop overhead ({iterations} iterations, no-op step, reporting to a collector process)")
    print(f"  step() called directly        median {med_step:8.2f} µs")
    print(f"  Trainable.train() alone       median {med_train:8.2f} µs")
    print(
        f"  runtime iteration             median {med_loop:8.2f} µs   p99 {p99:8.2f} µs   "
        f"mean {statistics.fmean(loop_ns) / 1000:8.2f} µs"
    )
    print(f"  overhead per iteration        median {med_loop - med_step:8.2f} µs   (goal < 100 µs)")
    print(f"  results delivered {delivered}, dropped {dropped}")


def _make_checkpoint(root: Path, big_mib: int) -> tuple[Path, int]:
    """A checkpoint dir like a model's: one large file, 16 shards of 1 MiB, small metadata files."""
    ckpt = root / "checkpoint_000001"
    (ckpt / "shards").mkdir(parents=True)
    (ckpt / ".is_checkpoint").write_bytes(b"")
    (ckpt / "model.bin").write_bytes(os.urandom(big_mib * MIB))
    for i in range(16):
        (ckpt / "shards" / f"shard_{i:02d}.bin").write_bytes(os.urandom(MIB))
    (ckpt / "model.bin.tune_metadata").write_bytes(os.urandom(300))
    size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    return ckpt, size


def bench_checkpoints(rounds: int, big_mib: int, workdir: Path) -> None:
    os.environ.update(AWS)
    moto = contextlib.ExitStack()
    try:
        endpoint = moto.enter_context(moto_server())
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="bench")
        storage = open_storage("s3://bench", endpoint=endpoint)
        local, size = _make_checkpoint(workdir / "local", big_mib)
        files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
        times: dict[str, list[float]] = {"ours up": [], "ours down": [], "raw up": [], "raw down": []}

        def ours(n: int) -> None:
            uri = f"s3://bench/ours/{n}/checkpoint_000001"
            start = time.perf_counter()
            commit_checkpoint(storage, local, uri, {"iteration": 1})
            times["ours up"].append(time.perf_counter() - start)
            dest = workdir / f"ours-{n}"
            start = time.perf_counter()
            restore_checkpoint(storage, uri, dest)
            times["ours down"].append(time.perf_counter() - start)
            shutil.rmtree(dest)
            storage.delete_prefix(f"s3://bench/ours/{n}")

        def raw(n: int) -> None:
            start = time.perf_counter()
            for rel in files:
                client.upload_file(str(local / rel), "bench", f"raw/{n}/checkpoint_000001/{rel}")
            times["raw up"].append(time.perf_counter() - start)
            dest = workdir / f"raw-{n}"
            start = time.perf_counter()
            for rel in files:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                client.download_file("bench", f"raw/{n}/checkpoint_000001/{rel}", str(dest / rel))
            times["raw down"].append(time.perf_counter() - start)
            shutil.rmtree(dest)
            storage.delete_prefix(f"s3://bench/raw/{n}")

        ours(-1)  # warm up connections on both sides
        raw(-1)
        for key in times:
            times[key].clear()
        for n in range(rounds):
            first, second = (ours, raw) if n % 2 == 0 else (raw, ours)
            first(n)
            second(n)
    finally:
        moto.close()

    mb = size / 1e6
    med = {key: statistics.median(value) for key, value in times.items()}
    print(f"checkpoint transfer ({mb:.1f} MB in {len(files)} files, {rounds} rounds, moto S3 in another process)")
    for kind in ("up", "down"):
        ours_rate, raw_rate = mb / med[f"ours {kind}"], mb / med[f"raw {kind}"]
        label = "upload + commit" if kind == "up" else "restore (download + verify)"
        print(
            f"  {label:28s} kubetune {ours_rate:7.1f} MB/s   raw boto3 {raw_rate:7.1f} MB/s   "
            f"ratio {ours_rate / raw_rate:5.2f}"
        )
    total = (med["raw up"] + med["raw down"]) / (med["ours up"] + med["ours down"])
    print(f"  round trip ratio (kubetune / raw boto3 throughput) {total:5.2f}   (goal >= 0.9)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkpoint-mib", type=int, default=64, help="size of the large checkpoint file")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    try:
        bench_overhead(args.iterations, workdir)
        bench_checkpoints(args.rounds, args.checkpoint_mib, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
