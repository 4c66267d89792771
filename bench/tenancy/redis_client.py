"""I/O. `python -m bench redis_client`: one tenant admission (the ADMIT Lua script by EVALSHA)
through each Redis client candidate under trio, against a throwaway local redis-server.

    python -m bench redis_client [--calls 5000] [--concurrency 1,8] [--rounds 3]

Candidates: smg_trio/tenancy/redis_client.py (trio sockets + hiredis), redis-py's asyncio
client (hiredis parser) through the asyncio bridge (smg_trio/backends/asyncio_bridge.py), and
redis-py's sync client on trio worker threads. Per call: wall µs and this process's CPU µs
(process_time; the server is another process). Medians of `--rounds`. Results:
bench/RESULTS.md "Redis client under trio".
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis
import redis.asyncio
import trio

from harness.redis_server import redis_server
from smg_trio.backends.asyncio_bridge import open_asyncio_bridge
from smg_trio.core.rate_limits import requests_rate
from smg_trio.tenancy.redis_client import open_redis
from smg_trio.tenancy.redis_state import ADMIT_SCRIPT

Call = Callable[[], Awaitable[Any]]


async def measure(call: Call, calls: int, concurrency: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per call, `concurrency` tasks sharing `calls`."""
    per_task = calls // concurrency

    async def worker() -> None:
        for _ in range(per_task):
            await call()

    wall, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    done = per_task * concurrency
    return (
        (time.perf_counter() - wall) / done * 1e6,
        (time.process_time() - cpu) / done * 1e6,
    )


async def run(calls: int, levels: Sequence[int], rounds: int) -> None:
    rate = requests_rate(10**9)  # never refuses: every call does the whole script
    args = (rate.interval_s, rate.burst, 1.0, -1.0, 1)
    async with (
        redis_server() as server,
        open_redis(server.url) as ours,
        open_asyncio_bridge() as bridge,
    ):
        loaded = await ours.call("SCRIPT", "LOAD", ADMIT_SCRIPT)
        assert isinstance(loaded, bytes)
        sha = loaded.decode()
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        asyncio_client = await bridge.run(
            lambda: _async_client(port)  # created on the loop thread
        )
        sync_client = redis.Redis(port=port, max_connections=max(levels) + 1)
        candidates: dict[str, Call] = {
            "trio + hiredis (ours)": lambda: ours.call("EVALSHA", sha, 1, "k:ours", *args),
            "redis-py asyncio via the bridge": lambda: bridge.run(
                asyncio_client.evalsha, sha, 1, "k:aio", *args
            ),
            "redis-py sync on trio threads": lambda: trio.to_thread.run_sync(
                lambda: sync_client.evalsha(sha, 1, "k:sync", *args)
            ),
        }
        print("| client | concurrency | wall µs/call | CPU µs/call (client process) |")
        print("|---|---|---|---|")
        for name, call in candidates.items():
            for level in levels:
                await measure(call, min(calls, 500), level)  # warm up
                samples = [await measure(call, calls, level) for _ in range(rounds)]
                wall = statistics.median(s[0] for s in samples)
                cpu = statistics.median(s[1] for s in samples)
                print(f"| {name} | {level} | {wall:.1f} | {cpu:.1f} |")
        await bridge.run(asyncio_client.aclose)
        sync_client.close()


async def _async_client(port: int) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(port=port)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench redis_client")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    trio.run(run, args.calls, levels, args.rounds)
    return 0
