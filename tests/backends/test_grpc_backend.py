"""The gRPC backend against real gRPC peers on loopback: our reference engines as subprocesses
(the conformance suite for every runtime, cancellation latency, SGLang's string-stop refusal,
engine restart), and a small in-process vLLM-service server for the faults the reference
engines do not produce (a stream without a complete message, a gRPC status mid-stream, an
engine that says it is unhealthy). Every test also checks that no asyncio task is left on the
bridge's loop and no trio task or file descriptor is left behind."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
import trio

from smg_trio.backends.grpc_backend import GrpcBackend, open_grpc_backend
from smg_trio.backends.grpc_services import open_loop_client, parse_address
from smg_trio.core.finalize import Finalized
from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.generation import Generation, Greedy, StopRules
from smg_trio.errors import (
    BackendUnavailable,
    ClientError,
    ConfigError,
    EngineRejected,
    UnsupportedRuntime,
)
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.wire.grpc_messages import build_sglang_generate
from tests.backends import conformance
from tests.backends.conformance import (
    PROMPT,
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
from tests.backends.grpc_fault_server import MAX_CONTEXT, VOCAB, Behaviour, serve_faulty_engine
from tests.backends.grpc_reference import (
    ENGINE_NAMES,
    MODEL_PATH,
    ReferenceGrpcEngine,
    factory_for,
    reference_engine,
    start_engine,
    stop_engine,
)

HEALTH_PERIOD_S = 0.05


async def assert_no_asyncio_tasks(backend: GrpcBackend) -> None:
    """No task is left on the loop. The health watcher's periodic check may be in flight at the
    moment of asking, so the count must reach 0 within a bound (a leaked task never does)."""
    for _ in range(100):  # up to about 1 s
        left = await backend._bridge.task_count()
        if left == 0:
            break
        await trio.sleep(0.01)
    assert left == 0, "asyncio tasks left on the bridge's loop"


async def consume(backend: GrpcBackend, finalized: Finalized, received: list[int]) -> None:
    async with backend.open_stream(finalized) as stream:
        async for event in stream:
            received.extend(tokens_of([event]))


async def test_leaving_early_resets_the_stream_and_sends_abort() -> None:
    fds, tasks = open_fd_count(), task_count()
    with serve_faulty_engine(Behaviour.NORMAL) as (servicer, port), trio.fail_after(10):
        async with open_grpc_backend(
            runtime=Runtime.VLLM, address=f"127.0.0.1:{port}", health_period_s=HEALTH_PERIOD_S
        ) as backend:
            await backend.wait_ready()
            statistics = backend.statistics()
            assert (statistics.max_model_len, statistics.engines[0].version) == (
                MAX_CONTEXT,
                "fault-server",
            )
            finalized = make_request(backend, max_tokens=10_000)
            async with backend.open_stream(finalized) as stream:
                engine_request_id = stream.engine_request_ids[0]
                async for _ in stream:
                    break
            assert servicer.cancelled_handlers == 1  # RST_STREAM reached the handler
            assert servicer.aborted == [engine_request_id]  # and so did the Abort RPC
            assert engine_request_id.startswith("req-")
            assert backend.statistics().in_flight == 0
            await assert_no_asyncio_tasks(backend)
    assert task_count() == tasks
    assert open_fd_count() == fds


async def test_a_finished_stream_is_not_aborted() -> None:
    with serve_faulty_engine(Behaviour.NORMAL) as (servicer, port), trio.fail_after(10):
        async with open_grpc_backend(
            runtime=Runtime.VLLM, address=f"127.0.0.1:{port}", health_period_s=HEALTH_PERIOD_S
        ) as backend:
            await backend.wait_ready()
            events = await collect(backend, make_request(backend, max_tokens=4))
            assert tokens_of(events) == [100, 101, 102, 103]
            assert (servicer.aborted, servicer.cancelled_handlers) == ([], 0)
            await assert_no_asyncio_tasks(backend)


@pytest.mark.parametrize(
    ("behaviour", "status", "match", "tokens_first"),
    [
        pytest.param(
            Behaviour.END_WITHOUT_COMPLETE, 500, "without a complete", 3, id="no-complete"
        ),
        pytest.param(
            Behaviour.FAIL_AFTER_TWO_TOKENS, 429, "RESOURCE_EXHAUSTED: KV cache", 2, id="status"
        ),
    ],
)
async def test_a_stream_that_fails_after_tokens_raises_engine_rejected(
    behaviour: Behaviour, status: int, match: str, tokens_first: int
) -> None:
    with serve_faulty_engine(behaviour) as (_, port), trio.fail_after(10):
        async with open_grpc_backend(
            runtime=Runtime.VLLM, address=f"127.0.0.1:{port}", health_period_s=HEALTH_PERIOD_S
        ) as backend:
            await backend.wait_ready()
            received: list[int] = []
            with pytest.raises(EngineRejected, match=match) as caught:
                await consume(backend, make_request(backend, max_tokens=3), received)
            assert caught.value.status == status
            assert len(received) == tokens_first
            assert backend.statistics().ready  # one refused request says nothing about health
            await assert_no_asyncio_tasks(backend)


async def test_a_busy_engine_stays_in_while_it_streams_and_a_silent_one_goes_out_after_three_checks() -> (
    None
):
    """vLLM's Python servicer on loaded cores answers HealthCheck late but keeps streaming: a
    timed-out check with output meanwhile is a pass. With no output, three in a row take it out."""
    with (
        serve_faulty_engine(Behaviour.NORMAL, step_s=0.01) as (servicer, port),
        trio.fail_after(10),
    ):
        async with open_grpc_backend(
            runtime=Runtime.VLLM,
            address=f"127.0.0.1:{port}",
            health_period_s=HEALTH_PERIOD_S,
            health_timeout_s=HEALTH_PERIOD_S,
        ) as backend:
            await backend.wait_ready()
            servicer.health_delay_s = 1.0  # every check from now on times out
            async with backend.open_stream(make_request(backend, max_tokens=60)) as stream:
                # 0.6 s of output: several checks time out meanwhile.
                readiness = [backend.statistics().ready async for _ in stream]
            assert readiness
            assert all(readiness)
            while backend.statistics().ready:  # noqa: ASYNC110 (waits for the health watcher)
                await trio.sleep(HEALTH_PERIOD_S)
            reason = backend.statistics().engines[0].dead_reason or ""
            assert "(3 in a row) and no output meanwhile" in reason
            await assert_no_asyncio_tasks(backend)


async def test_an_unhealthy_engine_is_never_ready() -> None:
    with serve_faulty_engine(Behaviour.UNHEALTHY) as (_, port), trio.fail_after(10):
        async with open_grpc_backend(
            runtime=Runtime.VLLM, address=f"127.0.0.1:{port}", health_period_s=HEALTH_PERIOD_S
        ) as backend:
            with trio.move_on_after(5 * HEALTH_PERIOD_S):
                await backend.wait_ready()
            statistics = backend.statistics()
            assert not statistics.ready
            assert "unhealthy" in (statistics.engines[0].dead_reason or "")
            with pytest.raises(BackendUnavailable, match="unhealthy"):
                async with backend.open_stream(make_request(backend, max_tokens=3)):
                    pass


async def test_nothing_listening_is_unavailable_not_an_error() -> None:
    with serve_faulty_engine(Behaviour.NORMAL) as (_, port):
        pass  # the port is now closed
    with trio.fail_after(10):
        async with open_grpc_backend(
            runtime=Runtime.SGLANG, address=f"127.0.0.1:{port}", health_period_s=HEALTH_PERIOD_S
        ) as backend:
            with trio.move_on_after(3 * HEALTH_PERIOD_S):
                await backend.wait_ready()
            assert "cannot reach the engine" in (backend.statistics().engines[0].dead_reason or "")
            with pytest.raises(BackendUnavailable):
                async with backend.open_stream(make_request(backend, max_tokens=3)):
                    pass
            await assert_no_asyncio_tasks(backend)


async def test_requests_the_engine_cannot_take_are_refused_before_sending() -> None:
    with serve_faulty_engine(Behaviour.NORMAL) as (servicer, port), trio.fail_after(10):
        async with open_grpc_backend(
            runtime=Runtime.VLLM, address=f"127.0.0.1:{port}", health_period_s=HEALTH_PERIOD_S
        ) as backend:
            await backend.wait_ready()
            finalized = make_request(backend, max_tokens=3)
            for wrong in (
                msgspec.structs.replace(finalized, runtime=Runtime.SGLANG),
                msgspec.structs.replace(finalized, wire=Wire.ZMQ),
            ):
                with pytest.raises(UnsupportedRuntime):
                    async with backend.open_stream(wrong):
                        pass
            too_long = make_request(backend, max_tokens=3, prompt=(1,) * MAX_CONTEXT)
            with pytest.raises(ClientError, match="context length"):
                async with backend.open_stream(too_long):
                    pass
            outside_vocab = make_request(backend, max_tokens=3, prompt=(1, VOCAB))
            with pytest.raises(ClientError, match="not in"):
                async with backend.open_stream(outside_vocab):
                    pass
            assert backend.statistics().in_flight == 0
            assert servicer.generate_calls == 0


def self_signed_tls(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) TLS contexts for a fresh self-signed certificate of 127.0.0.1."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    server.set_alpn_protocols(["h2"])
    client = ssl.create_default_context(cafile=str(cert))
    client.set_alpn_protocols(["h2"])
    return server, client


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_tls(tmp_path: Path) -> None:
    server_tls, client_tls = self_signed_tls(tmp_path)
    with serve_faulty_engine(Behaviour.NORMAL, tls=server_tls) as (_, port), trio.fail_after(10):
        address = f"127.0.0.1:{port}"
        async with open_grpc_backend(
            runtime=Runtime.VLLM, address=address, tls=client_tls, health_period_s=HEALTH_PERIOD_S
        ) as backend:
            await backend.wait_ready()
            events = await collect(backend, make_request(backend, max_tokens=3))
            assert tokens_of(events) == [100, 101, 102]
        async with open_grpc_backend(  # plaintext to a TLS server: never ready
            runtime=Runtime.VLLM, address=address, health_period_s=HEALTH_PERIOD_S
        ) as backend:
            with trio.move_on_after(5 * HEALTH_PERIOD_S):
                await backend.wait_ready()
            assert not backend.statistics().ready


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:8200", ("127.0.0.1", 8200)),
        ("grpc://localhost:1", ("localhost", 1)),
        ("[::1]:50051", ("::1", 50051)),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["127.0.0.1", ":80", "host:0", "host:70000", "host:http"])
def test_parse_address_rejects(address: str) -> None:
    with pytest.raises(ConfigError):
        parse_address(address)


# --- against the reference engines ----------------------------------------------------------


def dump_log(log_path: Path) -> None:
    if log_path.exists():
        sys.stderr.write(log_path.read_text(errors="replace"))


@pytest.mark.parametrize("runtime", [pytest.param(r, id=r.value) for r in ENGINE_NAMES])
@pytest.mark.parametrize("check", conformance.CHECKS, ids=lambda check: check.__name__)
async def test_conformance(
    runtime: Runtime, check: Callable[[EngineUnderTest], Awaitable[None]], tmp_path: Path
) -> None:
    log_path = tmp_path / "engine.log"
    try:
        await run_check(factory_for(runtime, log_path), check)
    finally:
        dump_log(log_path)


def expected_greedy_tokens(prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    """What every reference engine generates for a greedy ignore_eos request, computed here."""
    model = load_engine_model(MODEL_PATH)
    generation = Generation(
        model.source,
        prompt,
        Greedy(),
        StopRules(max_tokens=max_tokens, max_model_len=model.max_model_len),
    )
    return [generation.step().token_id for _ in range(max_tokens)]


@pytest.mark.parametrize("runtime", [Runtime.SGLANG, Runtime.VLLM], ids=lambda r: r.value)
async def test_tokens_and_model_info_are_the_engines(runtime: Runtime, tmp_path: Path) -> None:
    async def check(engine: EngineUnderTest) -> None:
        backend = engine.backend
        # vLLM refuses greedy n > 1 (core/finalize.py), as its own SamplingParams do.
        n = 1 if runtime is Runtime.VLLM else 2
        events = await collect(backend, make_request(backend, max_tokens=20, n=n, seed=3))
        expected = expected_greedy_tokens(PROMPT, 20)
        for choice in range(n):
            assert tokens_of(events, choice) == expected  # greedy: seed unused
        finishes = finishes_of(events)
        assert [finishes[i].completion_tokens for i in range(n)] == [20] * n
        assert backend.statistics().max_model_len == load_engine_model(MODEL_PATH).max_model_len

    log_path = tmp_path / "engine.log"
    try:
        await run_check(factory_for(runtime, log_path), check)
    finally:
        dump_log(log_path)


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


async def test_cancel_resets_the_engine_stream_within_50_ms(tmp_path: Path) -> None:
    """The RST_STREAM alone (the engine counts cancelled handlers apart from Abort ids)."""

    async def check(engine: EngineUnderTest) -> None:
        for attempt in range(5):
            elapsed = await cancel_mid_stream(engine, f"cancel-{attempt}")
            assert elapsed < conformance.ABORT_DEADLINE_S, f"{1000 * elapsed:.1f} ms"
            assert (await engine.counters())["requests_active"] == 0

    log_path = tmp_path / "engine.log"
    try:
        await run_check(factory_for(Runtime.VLLM, log_path), check)
    finally:
        dump_log(log_path)


async def test_sglang_string_stops_never_leave_us_and_the_engine_refuses_them(
    tmp_path: Path,
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

    log_path = tmp_path / "engine.log"
    try:
        await run_check(factory_for(Runtime.SGLANG, log_path), check)
    finally:
        dump_log(log_path)


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
