"""The gRPC backend against our reference engines as subprocesses on loopback: the conformance
suite for every runtime, the engines' exact tokens, cancellation latency, SGLang's string-stop
refusal, and engine restart. The checks that leave their engine alive share one engine per
runtime (test_grpc_backend.py has the faults the reference engines do not produce). Every test
also checks that no trio task or file descriptor is left behind."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec
import pytest
import trio

from smg_trio.backends.grpc_services import open_loop_client
from smg_trio.engines.cli import load_engine_model
from smg_trio.errors import BackendUnavailable, EngineRejected
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.grpc_messages import build_sglang_generate
from tests.backends import conformance
from tests.backends.conformance import (
    PROMPT,
    Check,
    EngineFactory,
    EngineUnderTest,
    collect,
    finishes_of,
    make_request,
    open_fd_count,
    run_check,
    task_count,
    tokens_of,
    wait_for_counters,
)
from tests.backends.grpc_reference import (
    ENGINE_NAMES,
    HEALTH_PERIOD_S,
    MODEL_PATH,
    ReferenceGrpcEngine,
    factory_for,
    reference_engine,
    shared_factory_for,
    start_engine,
    start_shared_engines,
    stop_engine,
)
from tests.engines.grpc_harness import Engine, stop_engines

CHECK_PARAMS: Final = [
    pytest.param(
        check,
        id=check.__name__,
        # A 50 ms bound of real time: run alone, after the parallel run (docs/architecture.md §8.1).
        marks=[pytest.mark.serial] if check in conformance.TIMED_CHECKS else [],
    )
    for check in conformance.CHECKS
]


def dump_log(log_path: Path) -> None:
    if log_path.exists():
        sys.stderr.write(log_path.read_text(errors="replace"))


@pytest.fixture(scope="module")
def shared_engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Runtime, Engine]]:
    """One engine per runtime for every check that leaves its engine alive (each check still
    opens its own backend, and `run_check` asserts it leaves nothing in flight)."""
    engines = start_shared_engines(list(ENGINE_NAMES), tmp_path_factory.mktemp("shared-grpc"))
    try:
        yield engines
    finally:
        stop_engines([engine.process for engine in engines.values()])


async def run_on_shared(engine: Engine, check: Check) -> None:
    try:
        await run_check(shared_factory_for(engine), check)
    finally:
        dump_log(engine.log)


def engine_for(
    runtime: Runtime, check: Check, shared: dict[Runtime, Engine], tmp_path: Path
) -> tuple[EngineFactory, Path]:
    """A shared engine, unless the check harms it."""
    if check in conformance.HARMING_CHECKS:
        log_path = tmp_path / "engine.log"
        return factory_for(runtime, log_path), log_path
    return shared_factory_for(shared[runtime]), shared[runtime].log


@pytest.mark.parametrize("runtime", [pytest.param(r, id=r.value) for r in ENGINE_NAMES])
@pytest.mark.parametrize("check", CHECK_PARAMS)
async def test_conformance(
    runtime: Runtime, check: Check, shared_engines: dict[Runtime, Engine], tmp_path: Path
) -> None:
    factory, log_path = engine_for(runtime, check, shared_engines, tmp_path)
    try:
        await run_check(factory, check, engine_lives=check not in conformance.HARMING_CHECKS)
    finally:
        dump_log(log_path)


@pytest.mark.parametrize("runtime", [Runtime.SGLANG, Runtime.VLLM], ids=lambda r: r.value)
async def test_tokens_and_model_info_are_the_engines(
    runtime: Runtime, shared_engines: dict[Runtime, Engine]
) -> None:
    async def check(engine: EngineUnderTest) -> None:
        backend = engine.backend
        # vLLM refuses greedy n > 1 (core/finalize.py), as its own SamplingParams do.
        n = 1 if runtime is Runtime.VLLM else 2
        events = await collect(backend, make_request(backend, max_tokens=20, n=n, seed=3))
        expected = conformance.expected_greedy_tokens(PROMPT, 20)
        for choice in range(n):
            assert tokens_of(events, choice) == expected  # greedy: seed unused
        finishes = finishes_of(events)
        assert [finishes[i].completion_tokens for i in range(n)] == [20] * n
        assert backend.statistics().max_model_len == load_engine_model(MODEL_PATH).max_model_len

    await run_on_shared(shared_engines[runtime], check)


async def cancel_mid_stream(engine: EngineUnderTest, request_id: str) -> float:
    """Cancel a stream that is receiving tokens; seconds until the engine saw the reset."""
    backend = engine.backend
    before = (await engine.counters())["requests_cancelled"]
    got_tokens = trio.Event()

    async def consume() -> None:
        finalized = make_request(backend, max_tokens=100_000, request_id=request_id)
        async with backend.open_stream(finalized) as stream:
            async for _ in stream:
                got_tokens.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await got_tokens.wait()
        nursery.cancel_scope.cancel()
        cancelled_at = trio.current_time()
    await wait_for_counters(engine, lambda c: c["requests_cancelled"] > before, 2.0)
    return trio.current_time() - cancelled_at


@pytest.mark.serial
async def test_cancel_resets_the_engine_stream_within_50_ms(
    shared_engines: dict[Runtime, Engine],
) -> None:
    """The RST_STREAM alone (the engine counts cancelled handlers apart from Abort ids)."""

    async def check(engine: EngineUnderTest) -> None:
        for attempt in range(5):
            elapsed = await cancel_mid_stream(engine, f"cancel-{attempt}")
            assert elapsed < conformance.ABORT_DEADLINE_S, f"{1000 * elapsed:.1f} ms"
            assert (await engine.counters())["requests_active"] == 0

    await run_on_shared(shared_engines[Runtime.VLLM], check)


async def test_sglang_string_stops_never_leave_us_and_the_engine_refuses_them(
    shared_engines: dict[Runtime, Engine],
) -> None:
    async def check(engine: EngineUnderTest) -> None:
        assert isinstance(engine, ReferenceGrpcEngine)
        backend = engine.backend
        finalized = make_request(backend, max_tokens=5)
        with_stops = msgspec.structs.replace(
            finalized,
            requests=tuple(
                msgspec.structs.replace(
                    request,
                    sampling=msgspec.structs.replace(request.sampling, stop=("\n",)),
                )
                for request in finalized.requests
            ),
        )
        before = await engine.counters()
        # finalize strips them for SGLang, so a request that still has some is our bug: the
        # builder's invariant fails before anything is sent.
        with pytest.raises(AssertionError, match="no stop strings"):
            async with backend.open_stream(with_stops):
                pass
        assert (await engine.counters())["requests_added"] == before["requests_added"]
        # The engine's own refusal of such a request, through the same seam the backend uses.
        message = build_sglang_generate(finalized.requests[0], "raw-stops")
        message.sampling_params.stop.append("\n")
        client = await engine.bridge.run(
            open_loop_client, Runtime.SGLANG, "127.0.0.1", engine.port, False
        )
        try:
            with pytest.raises(EngineRejected, match="INVALID_ARGUMENT") as rejected:
                await engine.bridge.run(client.generate, message, lambda event: None)
        finally:
            await engine.bridge.run(client.close)
        assert rejected.value.status == 400
        assert (await engine.counters())["requests_rejected"] == before["requests_rejected"] + 1

    await run_on_shared(shared_engines[Runtime.SGLANG], check)


async def test_the_backend_recovers_when_the_engine_restarts(tmp_path: Path) -> None:
    log_path = tmp_path / "engine.log"
    fds, tasks = open_fd_count(), task_count()
    try:
        with log_path.open("ab") as log, trio.fail_after(30):
            async with reference_engine(Runtime.VLLM, log) as engine:
                backend = engine.backend
                await backend.wait_ready()
                first = await collect(backend, make_request(backend, max_tokens=5))
                engine.kill()
                assert engine.process is not None
                await engine.process.wait()
                while True:  # the next health check fails
                    if not backend.statistics().ready:
                        break
                    await trio.sleep(HEALTH_PERIOD_S)
                with pytest.raises(BackendUnavailable):
                    await collect(backend, make_request(backend, max_tokens=5))
                restarted, _ = await start_engine(Runtime.VLLM, log, port=engine.port)
                try:
                    await backend.wait_ready()  # the same channel dials the new process
                    again = await collect(backend, make_request(backend, max_tokens=5))
                    assert tokens_of(again) == tokens_of(first)
                    assert backend.statistics().engines[0].dead_reason is None
                finally:
                    await stop_engine(restarted)
    finally:
        dump_log(log_path)
    assert task_count() == tasks
    assert open_fd_count() == fds
