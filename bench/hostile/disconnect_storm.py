"""I/O. `python -m bench disconnect_storm`: no engine request may outlive its client.

    python -m bench disconnect_storm [--rounds 3] [--scale 1.0] [--kinds all]
        [--step-ms 20] [--rapid-reset-s 20] [--settle-s 10]

The gateway runs in this process (`serve`, one vllm+zmq worker) so its trio tasks and file
descriptors can be counted; the reference vLLM EngineCore runs as a subprocess (`--step-ms`,
long generations: a request nobody aborts runs for many seconds). Each round opens every kind
of stream of `bench/hostile/storm_clients.py` at once (2,000 at scale 1), waits until each has received
its first event, then has every client leave at the same moment. Then, within `--settle-s`:
the engine's own counters (`smg_trio_counters`) must show no active or waiting request, and the
gateway's task and fd counts must come back to their baseline (taken before the first round).
Finally the rapid-reset phase counts the engine ADDs caused by `--rapid-reset-s` seconds of h2
HEADERS immediately followed by RST_STREAM. Everything is on loopback; the engine is stopped by
its PID. Results: bench/RESULTS.md "Disconnect storm".
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import trio

from bench.hostile.storm_clients import (
    Arrivals,
    Leave,
    generation_body,
    h2_streams,
    http1_stream,
    rapid_reset,
    ws_streams,
)
from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.serve import Serving, serve
from smg_trio.serving.worker_specs import WorkerSpec

ENGINE_READY_S: Final = 60.0
FIRST_EVENTS_S: Final = 120.0
ADDED_POLL_S: Final = 0.01
COUNTERS_S: Final = 60.0  # an engine busy with thousands of requests answers slowly
MAX_TOKENS: Final = 4000  # 80 s at 20 ms a step: a request nobody aborts is still running
STREAMS_PER_CONNECTION: Final = 100  # hypercorn's default h2 concurrent-stream limit
# Streams of each kind in one round at scale 1: 2,000 in all.
FULL_MIX: Final[Mapping[Leave, int]] = {
    Leave.HTTP1_FIN: 150,
    Leave.HTTP1_RST: 150,
    Leave.H2_RST_STREAM: 400,
    Leave.H2_DROP: 300,
    Leave.H2_DROP_STARTING: 300,
    Leave.WS_CANCEL: 400,
    Leave.WS_CLOSE: 300,
}


@dataclass
class StormTarget:
    serving: Serving

    @property
    def port(self) -> int:
        return self.serving.port

    @property
    def backend(self) -> ZmqBackend:
        backend = self.serving.gateway.pool.workers[0].backend
        assert isinstance(backend, ZmqBackend)
        return backend

    async def counters(self) -> Mapping[str, int]:
        with trio.fail_after(COUNTERS_S):
            result: Mapping[str, int] = await self.backend.call_utility("smg_trio_counters")
        return result


@dataclass(frozen=True)
class RoundResult:
    streams: int
    engine_running: int  # active + waiting engine requests once settled: must be 0
    gateway_in_flight: int
    tasks: int
    fds: int
    settle_s: float


def task_count() -> int:
    """Every trio task of this process (the gateway's and the bench's own)."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    pending = [root]
    count = 0
    while pending:
        task = pending.pop()
        count += 1
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return count


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@asynccontextmanager
async def storm_target(step_ms: float, workdir: Path) -> AsyncIterator[StormTarget]:
    """The gateway in this process and the reference engine (a subprocess) dialling it."""
    config = GatewayConfig(
        model_path=demo_model_path(),
        workers=(WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0"),),
        host="127.0.0.1",
        port=0,
        api_key=None,
        request_timeout_s=600.0,
    )
    stop = trio.Event()
    with (workdir / "engine.log").open("wb") as log:
        async with trio.open_nursery() as nursery:
            serving: Serving = await nursery.start(
                partial(serve, config, shutdown_trigger=stop.wait)
            )
            command = EngineCommand(
                "vllm-zmq",
                handshake=serving.worker_addresses[0],
                log_level="INFO",
                step_ms=step_ms,
                max_batch=4096,
            )
            process = await trio.lowlevel.open_process(command.argv(), stdout=log, stderr=log)
            try:
                with trio.fail_after(ENGINE_READY_S):
                    await serving.gateway.pool.workers[0].backend.wait_ready()
                yield StormTarget(serving)
            finally:
                stop.set()
                if process.poll() is not None:
                    print(f"the engine exited early ({process.returncode})", file=sys.stderr)
                with trio.CancelScope(shield=True):
                    process.kill()  # ours, by its PID
                    await process.wait()


def parse_mix(text: str) -> dict[Leave, int]:
    mix = {
        Leave(kind): int(count) for kind, _, count in (p.partition("=") for p in text.split(","))
    }
    if not all(0 < count <= 1000 for count in mix.values()):
        raise ValueError("1..1000 streams per kind")
    return mix


def mix_for(scale: float, kinds: set[Leave]) -> dict[Leave, int]:
    return {kind: max(1, round(n * scale)) for kind, n in FULL_MIX.items() if kind in kinds}


async def storm_round(target: StormTarget, mix: Mapping[Leave, int], body: bytes) -> int:
    """Open every stream of `mix`, wait for each one's first event, leave them all at once."""
    total = sum(mix.values())
    all_arrivals = Arrivals(total)
    by_kind = {kind: Arrivals(streams, all_arrivals) for kind, streams in mix.items()}
    go = trio.Event()
    # The connections dropped while starting wait until the engine has every request of the
    # round: how soon a first chunk goes out must not decide whether a sibling reached the
    # engine (a gateway that writes faster would otherwise turn aborts into no-ADDs).
    added = trio.Event()
    port = target.port
    with trio.fail_after(FIRST_EVENTS_S + 30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_set_when_added, target, total, added)
            for kind, streams in mix.items():
                arrivals = by_kind[kind]
                match kind:
                    case Leave.HTTP1_FIN | Leave.HTTP1_RST:
                        rst = kind is Leave.HTTP1_RST
                        for _ in range(streams):
                            nursery.start_soon(http1_stream, port, body, arrivals, go, rst)
                    case _:
                        client = (
                            partial(
                                h2_streams,
                                drop=kind is not Leave.H2_RST_STREAM,
                                starting=kind is Leave.H2_DROP_STARTING,
                                added=added,
                            )
                            if kind in (Leave.H2_RST_STREAM, Leave.H2_DROP, Leave.H2_DROP_STARTING)
                            else partial(ws_streams, cancel=kind is Leave.WS_CANCEL)
                        )
                        for start in range(0, streams, STREAMS_PER_CONNECTION):
                            count = min(STREAMS_PER_CONNECTION, streams - start)
                            nursery.start_soon(client, port, body, count, arrivals, go)
            with trio.move_on_after(FIRST_EVENTS_S):
                await all_arrivals.all_in.wait()
            if not all_arrivals.all_in.is_set():
                counts = ", ".join(f"{k.value} {a.count}/{a.expected}" for k, a in by_kind.items())
                raise RuntimeError(f"not every stream got a first event: {counts}")
            go.set()
    return total


async def _set_when_added(target: StormTarget, requests: int, added: trio.Event) -> None:
    """Set `added` once the engine has counted `requests` more ADDs than now."""
    wanted = (await target.counters())["requests_added"] + requests
    while True:
        if (await target.counters())["requests_added"] >= wanted:
            added.set()
            return
        await trio.sleep(ADDED_POLL_S)


async def settle(
    target: StormTarget, baseline: tuple[int, int], streams: int, limit_s: float
) -> RoundResult:
    """Wait (up to `limit_s`) until the engine is idle and tasks and fds are at `baseline`."""
    start = trio.current_time()
    while True:
        counters = await target.counters()
        running = counters["requests_active"] + counters["requests_waiting"]
        in_flight = target.backend.statistics().in_flight
        tasks, fds = task_count(), fd_count()
        settled = running == 0 and in_flight == 0 and (tasks, fds) <= baseline
        elapsed = trio.current_time() - start
        if settled or elapsed >= limit_s:
            return RoundResult(streams, running, in_flight, tasks, fds, elapsed)
        await trio.sleep(0.05)


async def run_storm(
    target: StormTarget, mix: Mapping[Leave, int], rounds: int, settle_s: float
) -> tuple[tuple[int, int], list[RoundResult]]:
    """Baseline (tasks, fds), then one settled result per round."""
    await trio.sleep(0.2)
    baseline = task_count(), fd_count()
    body = generation_body(MAX_TOKENS)
    results = []
    for _ in range(rounds):
        streams = await storm_round(target, mix, body)
        results.append(await settle(target, baseline, streams, settle_s))
    return baseline, results


async def rapid_reset_adds(target: StormTarget, seconds: float) -> tuple[int, int]:
    """(streams reset, engine ADDs) over `seconds` of h2 rapid reset."""
    before = (await target.counters())["requests_added"]
    resets = await rapid_reset(target.port, generation_body(16), trio.current_time() + seconds)
    await trio.sleep(0.5)
    after = (await target.counters())["requests_added"]
    return resets, after - before


async def _main(args: argparse.Namespace) -> int:
    kinds = {Leave(k) for k in args.kinds.split(",")} if args.kinds != "all" else set(Leave)
    mix = args.mix or mix_for(args.scale, kinds)
    failed = False
    with tempfile.TemporaryDirectory(prefix="storm-") as workdir:
        async with storm_target(args.step_ms, args.log_dir or Path(workdir)) as target:
            print(f"mix per round: {', '.join(f'{k.value} {n}' for k, n in mix.items())}")
            clock = trio.current_time()
            baseline, results = await run_storm(target, mix, args.rounds, args.settle_s)
            print(f"baseline: {baseline[0]} tasks, {baseline[1]} fds")
            for index, result in enumerate(results, 1):
                ok = (
                    result.engine_running == 0
                    and result.gateway_in_flight == 0
                    and (result.tasks, result.fds) <= baseline
                )
                failed |= not ok
                print(
                    f"round {index}: {result.streams} streams left; engine running "
                    f"{result.engine_running}, gateway in flight {result.gateway_in_flight}, "
                    f"tasks {result.tasks}, fds {result.fds}, settled in {result.settle_s:.2f} s"
                    f" {'ok' if ok else 'LEAK'}"
                )
            print(f"storm: {trio.current_time() - clock:.1f} s")
            counters = await target.counters()
            added, aborted = counters["requests_added"], counters["requests_aborted"]
            print(f"engine: {added} requests added, {aborted} aborted")
            if args.rapid_reset_s > 0:
                resets, adds = await rapid_reset_adds(target, args.rapid_reset_s)
                print(f"rapid reset {args.rapid_reset_s:g} s: {resets} streams reset, {adds} ADDs")
    return 1 if failed else 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench disconnect_storm", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 2,000 streams a round")
    parser.add_argument("--kinds", default="all", help=f"comma list of {[k.value for k in Leave]}")
    parser.add_argument(
        "--mix",
        type=parse_mix,
        help="streams per kind a round, e.g. h2-drop-starting=300,ws-close=10 (not --scale)",
    )
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--rapid-reset-s", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--log-dir", type=Path, help="keep the engine's log here")
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 2 or not 0 < args.rounds <= 20 or not args.rapid_reset_s <= 60:
        parser.error("bounded runs only: scale in (0, 2], rounds in 1..20, rapid reset <= 60 s")
    return trio.run(_main, args)
