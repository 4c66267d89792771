"""I/O. Threads or processes for image processing: how late a trio event loop's 5 ms ticks run
while images are processed beside it (issue 42: "threads or processes: measure which").

    python -m bench image_loop_lag [--images 16] [--workers 2]

SmolVLM-256M's settings on 1920x1080 JPEGs (bench/images/image_cost.py): `--images` processed
by `--workers` worker threads (trio.to_thread + CapacityLimiter, as the gateway does), then by
`--workers` forked processes (a ProcessPoolExecutor, the result pickled back), while a task
sleeps 5 ms in a loop and records how late each wake-up is; also with nothing beside it; and
by the gateway's own worker processes (model/image_workers.py: nice 19, the tensors back as raw
bytes over a Unix socket, read with the GIL released), what `smg-trio serve` uses.
Bounded: a fixed number of images, ticks only while they run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio

from bench.images.image_cost import jpeg, smolvlm_folder
from smg_trio.core.images import ProcessedImage
from smg_trio.model.image_workers import ImageWorkers, PooledImages
from smg_trio.model.vision import ImageProcessor, VisionRefusal, load_vision

TICK_S: Final = 0.005
_CHILD: dict[str, ImageProcessor] = {}


def _processor(folder: str) -> ImageProcessor:
    vision = _CHILD.get(folder)
    if vision is None:
        loaded = load_vision(Path(folder), "bench")
        assert loaded is not None
        assert not isinstance(loaded, VisionRefusal)
        vision = _CHILD[folder] = loaded
    return vision


def process_image(folder: str, data: bytes) -> ProcessedImage:
    return _processor(folder).process(data, "p")


async def _lag_while(work: Callable[[], Awaitable[None]] | None) -> dict[str, float]:
    lags: list[float] = []
    done = trio.Event()

    async def ticker() -> None:
        for _ in range(100_000):
            if done.is_set():
                return
            planned = time.perf_counter() + TICK_S
            await trio.sleep(TICK_S)
            lags.append(max(0.0, time.perf_counter() - planned))

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        if work is None:
            await trio.sleep(2.0)
        else:
            await work()
        done.set()
    return {
        "wall_s": time.perf_counter() - started,
        "lag_p50_ms": statistics.median(lags) * 1e3,
        "lag_p99_ms": sorted(lags)[int(0.99 * len(lags))] * 1e3,
        "lag_max_ms": max(lags) * 1e3,
    }


async def _threads(folder: str, images: list[bytes], workers: int) -> None:
    limiter = trio.CapacityLimiter(workers)
    async with trio.open_nursery() as nursery:
        for data in images:
            nursery.start_soon(
                partial(
                    trio.to_thread.run_sync, partial(process_image, folder, data), limiter=limiter
                )
            )


async def _processes(
    pool: concurrent.futures.ProcessPoolExecutor, folder: str, images: list[bytes], workers: int
) -> None:
    limiter = trio.CapacityLimiter(workers)

    async def one(data: bytes) -> None:
        async with limiter:
            future = pool.submit(process_image, folder, data)
            await trio.to_thread.run_sync(future.result)

    async with trio.open_nursery() as nursery:
        for data in images:
            nursery.start_soon(one, data)


async def _workers(pooled: PooledImages, images: list[bytes], workers: int) -> None:
    limiter = trio.CapacityLimiter(workers)
    async with trio.open_nursery() as nursery:
        for data in images:
            nursery.start_soon(
                partial(
                    trio.to_thread.run_sync, partial(pooled.process, data, "p"), limiter=limiter
                )
            )


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench image_loop_lag")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    images = [jpeg(1920, 1080, seed=i) for i in range(min(args.images, 64))]
    out: dict[str, Any] = {}
    # Forked before any thread or event loop exists (a spawned child would re-run
    # `python -m bench`'s entry point), warmed, then kept for the processes' round.
    context = multiprocessing.get_context("fork")
    with (
        tempfile.TemporaryDirectory(prefix="bench-lag-") as tmp,
        concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool,
    ):
        folder = str(smolvlm_folder(Path(tmp)))
        list(pool.map(process_image, [folder] * args.workers, images[: args.workers]))  # warm
        process_image(folder, images[0])  # warm: this process's processor built
        out["idle"] = trio.run(_lag_while, None)
        out["threads"] = trio.run(_lag_while, partial(_threads, folder, images, args.workers))
        out["processes"] = trio.run(
            _lag_while, partial(_processes, pool, folder, images, args.workers)
        )
        gateway_pool = ImageWorkers(args.workers)
        try:
            pooled = PooledImages(gateway_pool, Path(folder), "bench", "<image>")
            trio.run(_workers, pooled, images[: args.workers], args.workers)  # spawned, warm
            out["gateway_workers"] = trio.run(
                _lag_while, partial(_workers, pooled, images, args.workers)
            )
        finally:
            gateway_pool.close()
    print(json.dumps(out, indent=1))
    return 0
