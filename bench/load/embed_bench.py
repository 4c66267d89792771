"""I/O. Embedding requests through smg-trio beside vLLM's own server (docs/pooling.md,
docs/performance.md): per batch size (inputs per request), requests per second, the
request latency's median, and requests per gateway CPU-second, with smg-trio's ratios.

    python -m bench embed_bench --vllm-venv /opt/venvs/vllm
        --real-model /work/shared/models/tiny-llama [--rounds 1] [--batches 1,16,128]
    python -m bench embed_bench            # the reference engine, smg-trio only

- vLLM: `vllm serve MODEL --runner pooling --convert embed` (its API server process is the
  "gateway" measured; its EngineCore is a child process, not counted), and smg-trio
  `--runner pooling --convert embed` in front of a headless EngineCore of the same flags over
  ZMQ. Like with like: vLLM's own API server in front of the same headless EngineCore
  (`--data-parallel-size-local 0`, the engine dialing its handshake as it dials smg-trio's),
  "vLLM HTTP+headless". One at a time (never two: two shared cores), alternated per round.
- The load: `--requests` POST /v1/embeddings at batch 1, fewer at larger batches (a quarter
  of the inputs per batch size, at least 32 requests), `--concurrency` at once over HTTP/1.1 keep-alive, each input
  a distinct string of about 16 tokens; a warm-up of a few requests first. CPU from /proc over
  the measured load. Then `--sequential` single-input requests one after the other (the
  latency a lone client sees; batch "1 seq").

Bounded: at most 5 rounds, 2,000 requests and 128 inputs per request, each server start and
each load under a time cap; loopback only.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import trio

from bench.load.runner import ProcessProbe
from bench.load.servers import (
    VLLM_ENV,
    VLLM_FLAGS,
    ServerFailed,
    Started,
    log_tail,
    python_module,
    reference_engine_command,
    started_process,
)
from bench.reports.results_page import Recording, recording_parser
from harness.ports import LOOPBACK, free_port
from smg_trio.model.folder import demo_model_path

MAX_ROUNDS: Final = 5
MAX_REQUESTS: Final = 2000
MAX_BATCH: Final = 128
MAX_SEQUENTIAL: Final = 500
START_S: Final = 300.0
LOAD_S: Final = 600.0
WARM_UP: Final = 4
EMBED_FLAGS: Final = ("--runner", "pooling", "--convert", "embed")
WORDS: Final = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
]


@dataclass(frozen=True)
class Server:
    name: str
    port: int
    probe: ProcessProbe


@dataclass(frozen=True)
class Run:
    server: str
    batch: int
    concurrency: int
    requests: int
    req_s: float
    p50_ms: float
    req_per_cpu_s: float


def text(index: int) -> str:
    """A distinct input of about 16 tokens."""
    return " ".join(WORDS[(index * 7 + k * 3) % len(WORDS)] for k in range(12)) + f" #{index}"


async def _healthy(started: Started, port: int) -> None:
    with trio.move_on_after(START_S):
        async with httpx.AsyncClient(base_url=f"http://{LOOPBACK}:{port}", timeout=5) as client:
            while started.process.returncode is None:
                try:
                    reply = await client.post("/v1/embeddings", json={"input": "ready?"})
                    if reply.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(1.0)
        raise ServerFailed(f"exited with {started.process.returncode}:\n{log_tail(started)}")
    raise ServerFailed(f"not serving after {START_S:g} s:\n{log_tail(started)}")


@asynccontextmanager
async def vllm_server(venv: Path, model: Path, logs: Path) -> AsyncIterator[Server]:
    port = free_port()
    command = [
        *(str(venv / "bin" / "vllm"), "serve", str(model), *EMBED_FLAGS),
        *("--host", LOOPBACK, "--port", str(port), *VLLM_FLAGS),
    ]
    async with started_process(
        command, logs / "vllm-http.log", env=VLLM_ENV, own_group=True
    ) as started:
        await _healthy(started, port)
        yield Server("vLLM HTTP", port, ProcessProbe(started.process.pid))


def _headless_engine(venv: Path, model: Path, handshake: int) -> list[str]:
    """A headless EngineCore of the embedding flags dialing `handshake` on loopback."""
    return [
        *(str(venv / "bin" / "vllm"), "serve", str(model), *EMBED_FLAGS, "--headless"),
        *("--data-parallel-size", "1", "--data-parallel-size-local", "1"),
        *("--data-parallel-address", LOOPBACK, "--data-parallel-rpc-port", str(handshake)),
        *VLLM_FLAGS,
    ]


@asynccontextmanager
async def vllm_headless_server(venv: Path, model: Path, logs: Path) -> AsyncIterator[Server]:
    """vLLM's API server alone (`--data-parallel-size-local 0`) in front of the headless
    EngineCore smg-trio is measured with: the same engine, vLLM's front end."""
    port, handshake = free_port(), free_port()
    front = [
        *(str(venv / "bin" / "vllm"), "serve", str(model), *EMBED_FLAGS),
        *("--host", LOOPBACK, "--port", str(port), "--data-parallel-size", "1"),
        *("--data-parallel-size-local", "0", "--data-parallel-address", LOOPBACK),
        *("--data-parallel-rpc-port", str(handshake), *VLLM_FLAGS),
    ]
    engine = _headless_engine(venv, model, handshake)
    async with (
        started_process(front, logs / "vllm-front.log", env=VLLM_ENV, own_group=True) as started,
        started_process(engine, logs / "vllm-engine.log", env=VLLM_ENV, own_group=True),
    ):
        await _healthy(started, port)
        yield Server("vLLM HTTP+headless", port, ProcessProbe(started.process.pid))


@asynccontextmanager
async def smg_trio_server(venv: Path | None, model: Path, logs: Path) -> AsyncIterator[Server]:
    port, handshake = free_port(), free_port()
    gateway = python_module(
        "smg_trio", "serve", "--host", LOOPBACK, "--port", str(port), "--model-path", str(model),
        "--worker", f"vllm+zmq://{LOOPBACK}:{handshake}", *EMBED_FLAGS,
    )  # fmt: skip
    if venv is None:
        engine = reference_engine_command(
            f"tcp://{LOOPBACK}:{handshake}", model_path=model, step_ms=0.0
        )
    else:
        engine = _headless_engine(venv, model, handshake)
    async with (
        started_process(gateway, logs / "smg-trio.log") as started,
        started_process(engine, logs / "engine.log", env=VLLM_ENV, own_group=venv is not None),
    ):
        await _healthy(started, port)
        yield Server("smg-trio", port, ProcessProbe(started.process.pid))


async def load(server: Server, batch: int, requests: int, concurrency: int) -> Run:
    latencies: list[float] = []
    limiter = trio.CapacityLimiter(concurrency)
    async with httpx.AsyncClient(
        base_url=f"http://{LOOPBACK}:{server.port}",
        timeout=120,
        limits=httpx.Limits(max_connections=concurrency),
    ) as client:

        async def one(index: int) -> None:
            body = {"input": [text(index * batch + k) for k in range(batch)]}
            async with limiter:
                start = trio.current_time()
                reply = await client.post("/v1/embeddings", json=body)
                if reply.status_code != 200 or len(reply.json()["data"]) != batch:
                    raise RuntimeError(f"{server.name}: {reply.status_code} {reply.text[:200]}")
                latencies.append(trio.current_time() - start)

        async with trio.open_nursery() as warm:
            for index in range(WARM_UP):
                warm.start_soon(one, 10**6 + index)
        latencies.clear()
        cpu_before, start = server.probe.cpu_s(), trio.current_time()
        with trio.fail_after(LOAD_S):
            async with trio.open_nursery() as nursery:
                for index in range(requests):
                    nursery.start_soon(one, index)
        wall, cpu = trio.current_time() - start, server.probe.cpu_s() - cpu_before
    return Run(
        server.name,
        batch,
        concurrency,
        requests,
        requests / wall,
        statistics.median(latencies) * 1000,
        requests / cpu if cpu > 0 else float("nan"),
    )


def report(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| batch | server | requests | req/s | latency p50 ms | req per gateway CPU-s |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    order = {_label(r): (r.batch, r.concurrency == 1) for r in runs}
    keys = sorted({(_label(r), r.server) for r in runs}, key=lambda k: (order[k[0]], k[1]))
    medians: dict[tuple[str, str], Run] = {}
    for label, name in keys:
        mine = [r for r in runs if (_label(r), r.server) == (label, name)]
        run = Run(
            name,
            mine[0].batch,
            mine[0].concurrency,
            mine[0].requests,
            statistics.median(r.req_s for r in mine),
            statistics.median(r.p50_ms for r in mine),
            statistics.median(r.req_per_cpu_s for r in mine),
        )
        medians[(label, name)] = run
        lines.append(
            f"| {label} | {name} | {run.requests} | {run.req_s:,.1f} | {run.p50_ms:,.1f} | "
            f"{run.req_per_cpu_s:,.1f} |"
        )
    for label in sorted({b for b, _ in keys}, key=order.__getitem__):
        ours = medians.get((label, "smg-trio"))
        for other in ("vLLM HTTP", "vLLM HTTP+headless"):
            theirs = medians.get((label, other))
            if ours is not None and theirs is not None:
                lines.append(
                    f"\nbatch {label}: smg-trio / {other}: req/s {ours.req_s / theirs.req_s:.2f}x, "
                    f"latency p50 {ours.p50_ms / theirs.p50_ms:.2f}x, requests per gateway "
                    f"CPU-s {ours.req_per_cpu_s / theirs.req_per_cpu_s:.2f}x"
                )
    return lines


def _label(run: Run) -> str:
    """A row's batch column: the batch size, "1 seq" for the sequential requests."""
    return f"{run.batch} seq" if run.concurrency == 1 else str(run.batch)


async def run(
    venv: Path | None, model: Path, batches: Sequence[int], requests: int, concurrency: int,
    rounds: int, sequential: int,
) -> list[Run]:  # fmt: skip
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="embed-bench-") as logs:
        starts: list[Callable[[], AbstractAsyncContextManager[Server]]] = [
            partial(smg_trio_server, venv, model, Path(logs))
        ]
        if venv is not None:
            starts.append(partial(vllm_server, venv, model, Path(logs)))
            starts.append(partial(vllm_headless_server, venv, model, Path(logs)))
        for index in range(rounds):
            for start in starts if index % 2 == 0 else starts[::-1]:
                async with start() as server:
                    for batch in batches:
                        count = max(requests // batch * 4, 32)
                        result = await load(server, batch, count, concurrency)
                        print(f"round {index + 1}: {result}", flush=True)
                        runs.append(result)
                    if sequential:
                        result = await load(server, 1, sequential, 1)
                        print(f"round {index + 1}: {result}", flush=True)
                        runs.append(result)
    return runs


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("embed_bench", __doc__)
    parser.add_argument("--vllm-venv", type=Path, help="vLLM's venv; without it smg-trio only")
    parser.add_argument("--real-model", type=Path, default=demo_model_path())
    parser.add_argument("--batches", default="1,16,128")
    parser.add_argument("--requests", type=int, default=400, help="for batch 1; fewer above")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sequential", type=int, default=100, help="lone requests; 0: none")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if not all(1 <= b <= MAX_BATCH for b in batches):
        parser.error(f"batch sizes must be in 1..{MAX_BATCH}")
    if not 1 <= args.requests <= MAX_REQUESTS or not 1 <= args.concurrency <= 64:
        parser.error(f"--requests must be in 1..{MAX_REQUESTS}, --concurrency in 1..64")
    if not 0 <= args.sequential <= MAX_SEQUENTIAL:
        parser.error(f"--sequential must be in 0..{MAX_SEQUENTIAL}")
    if not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be in 1..{MAX_ROUNDS}")
    venv = args.vllm_venv
    model = args.real_model.resolve()
    recording = Recording("embed_bench", "Embeddings: smg-trio beside vLLM's own server")
    runs = trio.run(
        run, venv, model, batches, args.requests, args.concurrency, args.rounds, args.sequential
    )
    engine = "headless vLLM CPU EngineCore" if venv is not None else "the reference engine"
    body = (
        f"POST /v1/embeddings, {model.name} `--runner pooling --convert embed`; smg-trio over "
        f"ZMQ in front of {engine}, beside vLLM's own server (and its API server in front of "
        f"the same headless engine), one at a time; concurrency {args.concurrency}, then "
        f"{args.sequential} sequential requests; {args.rounds} round(s), medians over rounds; "
        f"load average at the end {os.getloadavg()[0]:.2f}.\n\n" + "\n".join(report(runs))
    )
    recording.publish(body, write=not args.no_write)
    return 0
