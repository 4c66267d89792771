"""The gRPC backend against a small in-process vLLM-service server, for the faults our reference
engines do not produce (a stream without a complete message, a gRPC status mid-stream, an
engine that says it is unhealthy). Every test also checks that no asyncio task is left on the
bridge's loop and no trio task or file descriptor is left behind."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import msgspec
import pytest
import trio

from smg_trio.backends.grpc_backend import GrpcBackend, open_grpc_backend
from smg_trio.backends.grpc_services import parse_address
from smg_trio.core.finalize import Finalized
from smg_trio.errors import (
    BackendUnavailable,
    ClientError,
    ConfigError,
    EngineRejected,
    UnsupportedRuntime,
)
from smg_trio.neutral.runtime import Runtime, Wire
from tests.backends.conformance import (
    collect,
    make_request,
    open_fd_count,
    task_count,
    tokens_of,
)
from tests.backends.grpc_fault_server import MAX_CONTEXT, VOCAB, Behaviour, serve_faulty_engine

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
