"""I/O. `python -m bench kv_index_memory`: the KV index's memory with 1 M (worker, block)
entries (docs/routing.md §9.3), against its documented cap of 200 bytes per entry.

    python -m bench kv_index_memory [--blocks 1048576] [--workers 4]

Each worker's engine stores chains of 64 blocks of 16 distinct tokens (no two workers share a
block: the costliest case); the resident set before and after is read from /proc, and the
Python heap with tracemalloc off (it would double the time). Also: stores per second and one
16-block match, median of 1,000.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from bench.reports.results_page import Recording, recording_parser
from smg_trio.routing.kv_index import KvIndex
from smg_trio.wire.vllm_kv_events import BlockStored

CAP_BYTES_PER_BLOCK: Final = 200
CHAIN: Final = 64
BLOCK: Final = 16


def resident_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("kv_index_memory", __doc__)
    parser.add_argument("--blocks", type=int, default=1 << 20)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    recording = Recording("kv_index_memory", "KV index memory (issue 32)")
    index = KvIndex(max_blocks=args.blocks)
    per_worker = args.blocks // args.workers
    gc.collect()
    before = resident_bytes()
    started = time.perf_counter()
    for worker in range(args.workers):
        name = f"w{worker}"
        parent: int | None = None
        for number in range(per_worker):
            engine_hash = (worker << 40) + number + 1
            if number % CHAIN == 0:
                parent = None
            first = (worker * per_worker + number) * BLOCK
            event = BlockStored(
                block_hashes=[engine_hash],
                parent_block_hash=parent,
                token_ids=list(range(first, first + BLOCK)),
                block_size=BLOCK,
            )
            index.apply(name, [event])
            parent = engine_hash
    elapsed = time.perf_counter() - started
    gc.collect()
    used = resident_bytes() - before
    stats = index.statistics()
    prompt = tuple(range(0, BLOCK * 16))
    timings = []
    for _ in range(1000):
        t0 = time.perf_counter_ns()
        index.match(prompt)
        timings.append(time.perf_counter_ns() - t0)
    per_block = used / stats.blocks
    verdict = "under" if per_block < CAP_BYTES_PER_BLOCK else "OVER"
    body = (
        "| entries | workers | resident growth | per entry | cap | stores/s | 16-block match |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {stats.blocks:,} | {args.workers} | {used / 2**20:.0f} MiB | {per_block:.0f} B "
        f"({verdict} the cap) | {CAP_BYTES_PER_BLOCK} B | {stats.blocks / elapsed:,.0f} | "
        f"{statistics.median(timings) / 1000:.1f} µs |\n\n"
        "Distinct blocks on every worker (the costliest case); the index also holds its "
        "content-key map, so this is the whole index.\n"
    )
    recording.publish(body, write=not args.no_write)
    return 0
