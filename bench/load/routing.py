"""I/O. `python -m bench routing`: the routing acceptance figures at full size (docs/routing.md),
the gateway in this process in front of reference vLLM ZMQ engines, all on loopback.

    python -m bench routing [--requests 400] [--concurrency 32] [--time-cap 120]

- power_of_two vs round_robin: a 5 ms-step and a 50 ms-step engine; the share the fast one
  serves of `--requests` completions (8 tokens each) at `--concurrency`.
- cache_aware vs round_robin: 8 distinct ~2k-token prefixes with unique tails over two
  1 ms-step engines, in a seeded random order, sent one at a time (so the worker is read off
  the pool's counters): how
  often a prefix lands on its most frequent worker, and the busiest worker's share.
- retries: two engines, one `kill -9`ed before the run; errors among `--requests` requests.
- admission: 4x `--max-concurrent-requests 8` (queue 8, 0.5 s): the engines' peak in-flight,
  and how many got 200 and 429.
Each figure is printed as a Markdown table row as it comes, then the whole table as the
section of bench/RESULTS.md it replaces (not with `--no-write`); every engine is killed by its
process at exit.
"""

from __future__ import annotations

import argparse
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, Final

import httpx
import trio

from bench.reports.results_page import Recording, recording_parser
from harness.served_gateway import served_gateway, zmq_gateway_config
from smg_trio.engines.launch import EngineCommand
from smg_trio.serving.serve import Serving

REPLAY: Final = "Routing picks a worker for every request, and the engine answers. " * 20
FAST: Final = ("power_of_two", "round_robin")  # against a 5 ms- and a 50 ms-step engine
AFFINITY: Final = ("cache_aware", "round_robin")


@asynccontextmanager
async def gateway(
    workdir: Path, steps_ms: Sequence[float], **settings: Any
) -> AsyncIterator[tuple[Serving, list[trio.Process]]]:
    config = zmq_gateway_config(len(steps_ms), request_timeout_s=60.0, **settings)
    replay = workdir / "replay.txt"
    replay.write_text(REPLAY, encoding="utf-8")
    with (workdir / "engines.log").open("ab") as log:
        async with served_gateway(config, log) as served:
            for address, step in zip(served.serving.worker_addresses, steps_ms, strict=True):
                await served.start_engine(
                    EngineCommand(
                        "vllm-zmq", handshake=address, replay_file=replay, step_ms=step
                    ).argv()
                )
            await served.wait_ready(served.serving.gateway.pool.workers)
            yield served.serving, served.processes


async def post_all(
    serving: Serving, bodies: Sequence[dict[str, object]], concurrency: int
) -> list[int]:
    statuses: list[int] = []
    limiter = trio.CapacityLimiter(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    url = f"http://127.0.0.1:{serving.port}"
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one(body: dict[str, object]) -> None:
            async with limiter:
                statuses.append((await client.post("/v1/completions", json=body)).status_code)

        async with trio.open_nursery() as nursery:
            for body in bodies:
                nursery.start_soon(one, body)
    return statuses


def completion(prompt: str, max_tokens: int, **extra: object) -> dict[str, object]:
    return {"prompt": prompt, "max_tokens": max_tokens, **extra}


def requests_per_worker(serving: Serving) -> list[int]:
    return [row.requests for row in serving.gateway.pool.snapshot()]


async def fast_share(workdir: Path, policy: str, requests: int, concurrency: int) -> str:
    async with gateway(workdir, [5.0, 50.0], policy=policy) as (serving, _):
        start = time.perf_counter()
        bodies = [completion(f"request {i}", 8) for i in range(requests)]
        statuses = await post_all(serving, bodies, concurrency)
        elapsed = time.perf_counter() - start
        fast, slow = requests_per_worker(serving)
    return (
        f"| {policy} | 5 ms + 50 ms steps | {requests} at c={concurrency} | "
        f"fast engine served {fast / requests:.1%} ({fast}/{fast + slow}) | "
        f"{Counter(statuses)[200]} × 200 in {elapsed:.1f} s |"
    )


async def prefix_affinity(workdir: Path, policy: str, requests: int) -> str:
    prefixes = [f"Document {d}: " + f"section {d} of the corpus text " * 170 for d in range(8)]
    landed: dict[int, Counter[int]] = {d: Counter() for d in range(8)}
    order = random.Random(8)  # prefixes in a seeded random order, not in turn
    async with gateway(workdir, [1.0, 1.0], policy=policy) as (serving, _):
        prompt_tokens = len(
            serving.gateway.model.tokenizer.encode(prefixes[0], add_special_tokens=False)
        )
        for index in range(requests):
            prefix = order.randrange(8)
            before = requests_per_worker(serving)
            body = completion(prefixes[prefix] + f" question {index}?", 1)
            await post_all(serving, [body], 1)
            after = requests_per_worker(serving)
            (worker,) = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if a > b]
            landed[prefix][worker] += 1
    same = sum(counts.most_common(1)[0][1] for counts in landed.values())
    busiest = max(sum(landed.values(), Counter()).values())
    return (
        f"| {policy} | 8 prefixes × {prompt_tokens} tokens, 2 workers | {requests} sequential | "
        f"same-prefix affinity {same / requests:.1%} | busiest worker {busiest / requests:.1%} |"
    )


async def retries(workdir: Path, requests: int, concurrency: int) -> str:
    async with gateway(workdir, [2.0, 2.0]) as (serving, processes):
        processes[0].send_signal(signal.SIGKILL)
        await processes[0].wait()
        bodies = [completion(f"after the kill {i}", 8) for i in range(requests)]
        statuses = await post_all(serving, bodies, concurrency)
        retried = sum(row.retries for row in serving.gateway.pool.snapshot())
    errors = sum(status != 200 for status in statuses)
    return (
        f"| retries | 2 engines, one kill -9ed | {requests} at c={concurrency} | "
        f"{errors} client errors | {retried} retried |"
    )


async def admission(workdir: Path, limit: int) -> str:
    settings = {"max_concurrent_requests": limit, "max_queue": limit, "queue_timeout_s": 0.5}
    async with gateway(workdir, [20.0, 20.0], **settings) as (serving, _):
        peak = 0
        done = trio.Event()

        async def watch() -> None:
            nonlocal peak
            while not done.is_set():
                backends = [worker.backend for worker in serving.gateway.pool.workers]
                peak = max(peak, sum(b.statistics().in_flight for b in backends))
                await trio.sleep(0.002)

        bodies = [completion(f"load {i}", 40, ignore_eos=True) for i in range(4 * limit)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            statuses = await post_all(serving, bodies, 4 * limit)
            done.set()
        left = sum(w.backend.statistics().in_flight for w in serving.gateway.pool.workers)
    counts = Counter(statuses)
    return (
        f"| admission | limit {limit}, queue {limit}, 0.5 s | {4 * limit} at once | "
        f"engine in-flight peak {peak}, {left} after | {counts[200]} × 200, {counts[429]} × 429 |"
    )


async def run(args: argparse.Namespace) -> list[str]:
    rows = ["| check | engines | requests | result | notes |", "|---|---|---|---|---|"]
    print("\n".join(rows), flush=True)
    with trio.fail_after(args.time_cap), TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        checks = [
            *(partial(fast_share, workdir, p, args.requests, args.concurrency) for p in FAST),
            *(partial(prefix_affinity, workdir, p, args.prefix_requests) for p in AFFINITY),
            partial(retries, workdir, args.requests // 2, args.concurrency),
            partial(admission, workdir, 8),
        ]
        for check in checks:
            rows.append(await check())
            print(rows[-1], flush=True)
    return rows


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("routing", __doc__)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--prefix-requests", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--time-cap", type=float, default=240.0, help="seconds for all")
    args = parser.parse_args(argv)
    recording = Recording("routing", "Routing (issue 13)")
    rows = trio.run(run, args)
    recording.publish("\n".join(rows), write=not args.no_write)
    return 0
