"""I/O. (helper process of `image_cost`) A steady image load from a process of its own, so the
process that times the text streams' chunks sends none of the image requests' bodies.

    python -m bench image_load --base-url URL --model NAME --uri-file FILE [--concurrency 16]

`--concurrency` loops each send one-image chat requests (the image: the data: URI in
`--uri-file`) back to back. After the first answer it prints `running` on a line; when its
standard input closes it cancels what is in flight and prints one JSON line: the requests
completed and their latencies in ms. Bounded: at most `MAX_REQUESTS` per loop and `MAX_S` in
all; loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import trio
from openai import AsyncOpenAI

MAX_REQUESTS: Final = 500  # per loop
MAX_S: Final = 900.0


async def image_request(sdk: AsyncOpenAI, model: str, uri: str) -> float:
    """One one-image chat request of one output token; its latency in seconds."""
    started = time.perf_counter()
    await sdk.chat.completions.create(
        model=model,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": uri}},
                    {"type": "text", "text": "?"},
                ],
            }
        ],
        max_tokens=1,
    )
    return time.perf_counter() - started


async def _until_stdin_closes() -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(4096):
            pass


async def run(base_url: str, model: str, uri: str, concurrency: int) -> dict[str, object]:
    latencies: list[float] = []
    first = trio.Event()

    async def loop(sdk: AsyncOpenAI) -> None:
        for _ in range(MAX_REQUESTS):
            latencies.append(await image_request(sdk, model, uri))
            if not first.is_set():
                first.set()
                print("running", flush=True)

    with trio.move_on_after(MAX_S):
        async with (
            AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as sdk,
            trio.open_nursery() as nursery,
        ):
            for _ in range(concurrency):
                nursery.start_soon(loop, sdk)
            await _until_stdin_closes()
            nursery.cancel_scope.cancel()
    return {"completed": len(latencies), "latency_ms": [round(s * 1e3, 3) for s in latencies]}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench image_load")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--uri-file", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    uri = args.uri_file.read_text()
    result = trio.run(run, args.base_url, args.model, uri, max(1, min(args.concurrency, 64)))
    print(json.dumps(result), flush=True)
    return 0
