"""The ZMQ backend against our reference engines running as real subprocesses (vLLM EngineCore
and TokenSpeed wires) over a real tcp handshake and ipc data sockets: the conformance suite,
exact tokens, two data-parallel engines on one socket set, tcp data sockets, and cleanup."""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Final

import pytest
import trio

from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.launch import EngineCommand
from smg_trio.errors import EngineDead, EngineRejected
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Runtime
from tests.backends import conformance
from tests.backends.conformance import (
    PROMPT,
    Check,
    EngineFactory,
    EngineUnderTest,
    collect,
    finishes_of,
    make_request,
    run_check,
    tokens_of,
)

CHECK_PARAMS: Final = [
    pytest.param(
        check,
        id=check.__name__,
        # A 50 ms bound of real time: run alone, after the parallel run (docs/architecture.md §8.1).
        marks=[pytest.mark.serial] if check in conformance.TIMED_CHECKS else [],
    )
    for check in conformance.CHECKS
]
MODEL_PATH: Final = demo_model_path()
WATCHDOG_S: Final = 1.0
STEP_MS: Final = 2.0
ENGINE_NAMES: Final = {Runtime.VLLM: "vllm-zmq", Runtime.TOKENSPEED: "tokenspeed-zmq"}
RUNTIMES: Final = [pytest.param(r, id=r.value) for r in ENGINE_NAMES]


class ReferenceEngines:
    """`engine_count` reference engine processes dialling one ZMQ backend."""

    def __init__(
        self, backend: ZmqBackend, processes: list[trio.Process], watchdog_period_s: float
    ) -> None:
        self._backend = backend
        self.processes = processes
        self._watchdog_period_s = watchdog_period_s

    @property
    def backend(self) -> ZmqBackend:
        return self._backend

    @property
    def watchdog_period_s(self) -> float:
        return self._watchdog_period_s

    async def counters(self) -> Mapping[str, int]:
        """Summed over the engines (through the `smg_trio_counters` utility call)."""
        totals: dict[str, int] = {}
        for index in range(len(self.processes)):
            snapshot = await self._backend.call_utility("smg_trio_counters", engine_index=index)
            for key, value in snapshot.items():
                totals[key] = totals.get(key, 0) + value
        return totals

    async def counters_of(self, index: int) -> Mapping[str, int]:
        result: Mapping[str, int] = await self._backend.call_utility(
            "smg_trio_counters", engine_index=index
        )
        return result

    def kill(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGKILL)

    def pause(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGSTOP)


@asynccontextmanager
async def reference_engines(
    runtime: Runtime,
    log: IO[bytes],
    *,
    engine_count: int = 1,
    data_address: str | None = None,
    step_ms: float = STEP_MS,
) -> AsyncIterator[ReferenceEngines]:
    model = load_model_dir(MODEL_PATH)
    async with open_zmq_backend(
        runtime=runtime,
        engine_count=engine_count,
        data_address=data_address,
        vocab_size=model.tokenizer.vocab_size,
        watchdog_period_s=WATCHDOG_S,
    ) as backend:
        processes: list[trio.Process] = []
        try:
            for index in range(engine_count):
                command = EngineCommand(
                    ENGINE_NAMES[runtime],
                    handshake=backend.handshake_address,
                    model_path=MODEL_PATH,
                    step_ms=step_ms,
                    engine_index=index,
                ).argv()
                processes.append(await trio.lowlevel.open_process(command, stdout=log, stderr=log))
            yield ReferenceEngines(backend, processes, WATCHDOG_S)
        finally:
            with trio.CancelScope(shield=True):
                for process in processes:
                    process.kill()  # works on a SIGSTOPped process too
                    await process.wait()


def factory_for(
    runtime: Runtime, log_path: Path, *, engine_count: int = 1, data_address: str | None = None
) -> EngineFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[EngineUnderTest]:
        with log_path.open("ab") as log:
            async with reference_engines(
                runtime, log, engine_count=engine_count, data_address=data_address
            ) as engines:
                yield engines

    return factory


def dump_log(log_path: Path) -> None:
    if log_path.exists():
        sys.stderr.write(log_path.read_text(errors="replace"))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("check", CHECK_PARAMS)
async def test_conformance(runtime: Runtime, check: Check, tmp_path: Path) -> None:
    """An engine per check: a ZMQ engine handshakes once, with the frontend it was started for
    (as vLLM's EngineCore does), and each test has a trio run, so a backend of its own."""
    log_path = tmp_path / "engine.log"
    try:
        await run_check(
            factory_for(runtime, log_path),
            check,
            engine_lives=check not in conformance.HARMING_CHECKS,
        )
    finally:
        dump_log(log_path)


def engines_logged_in(
    runtime: Runtime, tmp_path: Path, *, engine_count: int = 1, data_address: str | None = None
) -> tuple[EngineFactory, Path]:
    log_path = tmp_path / "engine.log"
    return factory_for(
        runtime, log_path, engine_count=engine_count, data_address=data_address
    ), log_path


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_tokens_are_exactly_what_the_engine_generated(
    runtime: Runtime, tmp_path: Path
) -> None:
    async def check(engine: EngineUnderTest) -> None:
        events = await collect(engine.backend, make_request(engine.backend, max_tokens=20))
        assert tokens_of(events) == conformance.expected_greedy_tokens(PROMPT, 20)
        statistics = engine.backend.statistics()
        assert statistics.max_model_len == load_engine_model(MODEL_PATH).max_model_len
        version = statistics.engines[0].version
        assert version == "0.33.0" if runtime is Runtime.VLLM else version.startswith("tokenspeed-")

    factory, log_path = engines_logged_in(runtime, tmp_path)
    try:
        await run_check(factory, check)
    finally:
        dump_log(log_path)


async def test_two_data_parallel_engines_on_one_socket_set(tmp_path: Path) -> None:
    async def check(engine: EngineUnderTest) -> None:
        assert isinstance(engine, ReferenceEngines)
        await engine.backend.wait_ready(all_engines=True)
        backend = engine.backend
        events = await collect(
            backend, make_request(backend, max_tokens=10, n=4, seed=5, greedy=False)
        )
        finishes = finishes_of(events)
        assert sorted(finishes) == [0, 1, 2, 3]
        assert all(f.completion_tokens == 10 for f in finishes.values())
        per_engine = [(await engine.counters_of(i))["requests_added"] for i in (0, 1)]
        assert per_engine == [2, 2]  # least-loaded spreads the choices
        await conformance.check_break_aborts(engine)

    factory, log_path = engines_logged_in(Runtime.VLLM, tmp_path, engine_count=2)
    try:
        await run_check(factory, check)
    finally:
        dump_log(log_path)


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_tcp_data_sockets(runtime: Runtime, tmp_path: Path) -> None:
    async def check(engine: EngineUnderTest) -> None:
        assert isinstance(engine, ReferenceEngines)
        assert engine.backend.input_address.startswith("tcp://127.0.0.1:")
        await conformance.check_stream_to_completion(engine)

    factory, log_path = engines_logged_in(runtime, tmp_path, data_address="tcp://127.0.0.1:0")
    try:
        await run_check(factory, check)
    finally:
        dump_log(log_path)


@pytest.mark.parametrize(
    ("runtime", "error", "match"),
    [
        pytest.param(Runtime.VLLM, EngineRejected, "aborted", id="vllm-aborts-in-flight"),
        pytest.param(Runtime.TOKENSPEED, EngineDead, "ENGINE_CORE_DEAD", id="tokenspeed-sentinel"),
    ],
)
async def test_engine_shutdown_mid_stream(
    runtime: Runtime, error: type[Exception], match: str, tmp_path: Path
) -> None:
    """SIGTERM: vLLM finishes in-flight requests with ABORT; TokenSpeed sends ENGINE_CORE_DEAD."""

    async def check(engine: EngineUnderTest) -> None:
        assert isinstance(engine, ReferenceEngines)
        backend = engine.backend
        with pytest.raises(error, match=match):
            await consume_after(backend, lambda: engine.processes[0].send_signal(signal.SIGTERM))
        assert backend.statistics().in_flight == 0

    factory, log_path = engines_logged_in(runtime, tmp_path)
    try:
        await run_check(factory, check, engine_lives=False)
    finally:
        dump_log(log_path)


async def consume_after(backend: ZmqBackend, harm: Callable[[], None]) -> None:
    """Stream a long request; after its first event, `harm` the engine; consume to the end."""
    async with backend.open_stream(make_request(backend, max_tokens=100_000)) as stream:
        await stream.__anext__()
        harm()
        async for _ in stream:
            pass
