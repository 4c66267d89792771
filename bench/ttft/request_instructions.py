"""I/O. A request's fixed cost as instructions, which do not move with the machine's load.

    python -m bench request_instructions [--transport h2c|http1] [--requests 50]
        [--warm-up 20] [--output-tokens 1] [--step-ms 0] [--concurrency 1]

CPU seconds on shared cores move by ±20 % between identical runs; instructions counted by
valgrind's callgrind move by ±0.05 %, so a 1 % change to the request path shows (bench/
RESULTS.md, "A deterministic measure"). The gateway (`smg-trio serve`) runs under callgrind
with instrumentation off, `PYTHONHASHSEED=0`; the reference vLLM EngineCore (`--step-ms`) and the
load bench's client run outside it. After `--warm-up` requests, instrumentation is on for
`--requests` sequential streamed completions (one stream, `--output-tokens` tokens, a
128-word prompt), then off; the gateway's total (every thread) and its mean per request are
printed. With `--output-tokens 128 --step-ms 20` each token is its own chunk, so the difference
from the 1-token figure, over 127, is a streamed chunk's cost (one stream: every engine step's
cost lands on one chunk); `--concurrency 64 --step-ms 500` spreads a step over 64 chunks, as
at a real engine's pace. Needs valgrind
(`callgrind_control` on PATH). Loopback only; about 15 s (1 token).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import trio

from bench.load.servers import (
    python_module,
    reference_engine_command,
    smg_trio_command,
    started_process,
    wait_serving,
)
from harness.ports import LOOPBACK, free_port
from smg_trio.model.folder import demo_model_path

READY_S: Final = 300.0  # the gateway imports and starts under callgrind, ~20x slower
CLIENT_S: Final = 600.0
MAX_REQUESTS: Final = 2000
MAX_STEP_MS: Final = 1000.0
MAX_CONCURRENCY: Final = 256
CALLGRIND: Final = (
    "valgrind",
    "--tool=callgrind",
    "--instr-atstart=no",
)


async def measure(
    transport: str,
    requests: int,
    warm_up: int,
    output_tokens: int,
    step_ms: float = 0.0,
    concurrency: int = 1,
) -> int:
    """The gateway's instructions over `requests` requests."""
    with tempfile.TemporaryDirectory(prefix="smg-trio-instructions-") as scratch:
        out = Path(scratch) / "callgrind.out"
        port, handshake = free_port(), free_port()
        gateway = [
            *CALLGRIND,
            f"--callgrind-out-file={out}",
            *smg_trio_command(port, f"vllm+zmq://{LOOPBACK}:{handshake}", demo_model_path()),
        ]
        engine = reference_engine_command(
            f"tcp://{LOOPBACK}:{handshake}", model_path=demo_model_path(), step_ms=step_ms
        )
        logs = Path(scratch)
        env = {"PYTHONHASHSEED": "0"}
        async with (
            started_process(gateway, logs / "gateway.log", env=env) as served,
            started_process(engine, logs / "engine.log"),
        ):
            await wait_serving(served, port, timeout_s=READY_S)
            pid = str(served.process.pid)
            await _requests(port, transport, warm_up, output_tokens, concurrency)
            await trio.run_process(
                ["callgrind_control", "-i", "on", pid], capture_stdout=True, capture_stderr=True
            )
            await _requests(port, transport, requests, output_tokens, concurrency)
            await trio.run_process(
                ["callgrind_control", "-i", "off", pid], capture_stdout=True, capture_stderr=True
            )
            await trio.run_process(
                ["callgrind_control", "-d", pid], capture_stdout=True, capture_stderr=True
            )
        return _total(Path(scratch))


async def _requests(
    port: int, transport: str, count: int, output_tokens: int, concurrency: int
) -> None:
    command = python_module(
        "bench",
        "run",
        "--url",
        f"http://{LOOPBACK}:{port}",
        "--transport",
        transport,
        "--concurrency",
        str(concurrency),
        "--requests",
        str(count),
        "--output-tokens",
        str(output_tokens),
        "--no-gateway-view",
    )
    with trio.fail_after(CLIENT_S):
        await trio.run_process(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _total(directory: Path) -> int:
    """The instruction total of the dump(s) callgrind wrote (`callgrind.out.N` per dump)."""
    total = 0
    for dump in sorted(directory.glob("callgrind.out.*")):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    if not total:
        raise SystemExit(f"no callgrind dump in {directory}")
    return total


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench request_instructions", description=__doc__
    )
    parser.add_argument("--transport", choices=("h2c", "http1"), default="h2c")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--warm-up", type=int, default=20)
    parser.add_argument("--output-tokens", type=int, default=1)
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="the engine's step time: 20 ms makes each of a long output's tokens its own chunk",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="streams at once (with a step long enough that the gateway under callgrind keeps up)",
    )
    args = parser.parse_args(argv)
    if not 0 < args.concurrency <= MAX_CONCURRENCY:
        parser.error(f"--concurrency must be within 1..{MAX_CONCURRENCY}")
    if not 0 < args.requests <= MAX_REQUESTS or not 0 <= args.warm_up <= MAX_REQUESTS:
        parser.error(f"--requests and --warm-up must be at most {MAX_REQUESTS}")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench request_instructions needs valgrind (callgrind) on PATH")
    if not 0.0 <= args.step_ms <= MAX_STEP_MS:
        parser.error(f"--step-ms must be within 0..{MAX_STEP_MS:g}")
    total = trio.run(
        measure,
        args.transport,
        args.requests,
        args.warm_up,
        args.output_tokens,
        args.step_ms,
        args.concurrency,
    )
    print(f"{args.transport}: {total:,} instructions over {args.requests} requests")
    print(f"{args.transport}: {total // args.requests:,} instructions per request")
    return 0
