"""The ZMQ backend against an in-process peer that speaks vLLM's wire over real sockets and is
driven step by step by each test: handshake orders, the exact ADD we send, how outputs become
events, which ids get aborted, engine errors, the dead sentinel, restarts, the silence
watchdog on trio's virtual clock, and configuration errors."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
import zmq

from smg_trio.backends.in_flight import WATCHDOG_PERIOD_S
from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.backends.zmq_lifetime import open_zmq_context
from smg_trio.backends.zmq_liveness import PROBE_METHOD
from smg_trio.backends.zmq_socket import TrioZmqSocket, private_ipc_dir
from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.errors import (
    BackendUnavailable,
    ClientError,
    ConfigError,
    EngineDead,
    EngineRejected,
    UnsupportedRuntime,
)
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import EosIds, SamplingParams
from smg_trio.wire import vllm_zmq
from smg_trio.wire.vllm_zmq_outputs import (
    EngineCoreOutput,
    EngineCoreOutputs,
    FinishReason,
    PrefillStats,
    RequestError,
    encode_outputs,
)
from smg_trio.wire.zmq_transport import (
    ENGINE_CORE_DEAD,
    HELLO,
    READY,
    InitMessage,
    RequestType,
    decode_abort,
    decode_init,
    encode_handshake,
    engine_identity,
)
from tests.backends.conformance import finishes_of, make_request, tokens_of

Context = zmq.Context[zmq.Socket[bytes]]
MAX_MODEL_LEN = 64
MODEL_EOS = EosIds(5, (7,))
TIMEOUT_S = 10


@pytest.fixture
async def context() -> AsyncIterator[Context]:
    async with open_zmq_context() as context:
        yield context


class PeerEngine:
    """One engine's three DEALER/DEALER/PUSH sockets, in this process, stepped by the test."""

    def __init__(self, context: Context, backend: ZmqBackend, index: int = 0) -> None:
        self.index = index
        self.backend = backend
        self.identity = engine_identity(index)
        self.handshake = self._socket(context, zmq.DEALER)
        self.input = self._socket(context, zmq.DEALER)
        self.output = self._socket(context, zmq.PUSH)
        self.init: InitMessage | None = None

    def _socket(self, context: Context, kind: int) -> TrioZmqSocket:
        raw = context.socket(kind)
        if kind == zmq.DEALER:
            raw.setsockopt(zmq.IDENTITY, engine_identity(self.index))
        return TrioZmqSocket(raw)

    def close(self) -> None:
        for socket in (self.handshake, self.input, self.output):
            socket.close()

    async def hello(self) -> InitMessage:
        self.handshake.connect(self.backend.handshake_address)
        await self.handshake.send_multipart([encode_handshake(HELLO, local=False, headless=True)])
        self.init = decode_init((await self.handshake.receive_multipart())[-1])
        return self.init

    async def register(self, max_model_len: int = MAX_MODEL_LEN) -> None:
        assert self.init is not None
        self.output.connect(self.init.addresses.outputs[0])
        self.input.connect(self.init.addresses.inputs[0])
        response = vllm_zmq.ReadyResponse(
            max_model_len=max_model_len, vllm_version="0.33.0", data_parallel_rank=self.index
        )
        await self.input.send_multipart([vllm_zmq.encode_ready_response(response)])

    async def ready(self) -> None:
        await self.handshake.send_multipart([encode_handshake(READY, local=False, headless=True)])

    async def start(self) -> None:
        await self.hello()
        await self.register()
        await self.ready()
        await until(lambda: self.backend.statistics().engines[self.index].ready)

    async def next_input(self) -> tuple[RequestType, bytes]:
        """The next input but liveness probes (a real engine answers them between steps)."""
        while True:
            frames = await self.input.receive_multipart()
            kind = RequestType.of_frame(frames[0])
            if kind is not RequestType.UTILITY or not is_probe(frames[1]):
                return kind, frames[1]

    async def next_add(self) -> vllm_zmq.EngineCoreRequest:
        kind, payload = await self.next_input()
        assert kind is RequestType.ADD
        return vllm_zmq.decode_request(payload)

    async def emit(self, *outputs: EngineCoreOutput) -> None:
        message = EngineCoreOutputs(engine_index=self.index, outputs=outputs)
        await self.output.send_multipart([encode_outputs(message)])


def is_probe(payload: bytes) -> bool:
    return vllm_zmq.decode_utility_call(payload).method == PROBE_METHOD


@asynccontextmanager
async def backend_with_peers(
    context: Context, count: int = 1, **options: object
) -> AsyncIterator[tuple[ZmqBackend, list[PeerEngine]]]:
    async with open_zmq_backend(
        runtime=Runtime.VLLM,
        engine_count=count,
        vocab_size=1000,
        **options,  # type: ignore[arg-type]
    ) as backend:
        peers = [PeerEngine(context, backend, i) for i in range(count)]
        try:
            for peer in peers:
                await peer.start()
            yield backend, peers
        finally:
            for peer in peers:
                peer.close()


async def until(predicate: Callable[[], bool]) -> None:
    """Poll `predicate` (the backend's state changes when a message crosses libzmq's thread)."""
    for _ in range(TIMEOUT_S * 1000):
        if predicate():
            return
        await trio.sleep(0.001)
    raise AssertionError("condition never held")


async def drain_after(
    backend: ZmqBackend, peer: PeerEngine, answer: Callable[[str], Awaitable[None]]
) -> None:
    """Open a stream, let the peer `answer` its ADD, and consume the stream to its end."""
    async with backend.open_stream(make_request(backend, max_tokens=8)) as stream:
        await answer((await peer.next_add()).request_id)
        async for _ in stream:
            pass


def step(
    request_id: str,
    *tokens: int,
    finish: FinishReason | None = None,
    stop_reason: int | None = None,
    prefill: PrefillStats | None = None,
    error: RequestError | None = None,
) -> EngineCoreOutput:
    return EngineCoreOutput(
        request_id=request_id,
        new_token_ids=tokens,
        finish_reason=None if finish is None else int(finish),
        stop_reason=stop_reason,
        prefill_stats=prefill,
        error=error,
    )


async def test_handshake_registration_and_ready_in_either_order(context: Context) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with open_zmq_backend(runtime=Runtime.VLLM, engine_count=2) as backend:
            assert backend.handshake_port
            assert not backend.statistics().ready
            with pytest.raises(BackendUnavailable, match="has not connected"):
                async with backend.open_stream(make_request(backend, max_tokens=4)):
                    pass  # pragma: no cover
            first, second = PeerEngine(context, backend, 0), PeerEngine(context, backend, 1)
            try:
                init = await first.hello()
                assert init.addresses.inputs == (backend.input_address,)
                assert init.addresses.outputs == (backend.output_address,)
                assert init.parallel_config == {}
                await first.register()  # vLLM's order: registration, then READY
                await trio.sleep(0.05)
                assert not backend.statistics().ready
                await first.ready()
                await backend.wait_ready()
                statistics = backend.statistics()
                assert statistics.max_model_len == MAX_MODEL_LEN
                assert statistics.engines[0].version == "0.33.0"
                assert not statistics.engines[1].ready
                await second.hello()
                await second.ready()  # TokenSpeed's order: READY, then registration
                await trio.sleep(0.05)
                assert not backend.statistics().engines[1].ready
                await second.register(max_model_len=32)
                await until(lambda: backend.statistics().engines[1].ready)
                assert backend.statistics().max_model_len == 32  # the smallest ready engine
            finally:
                first.close()
                second.close()


async def test_add_carries_suffixed_id_eos_merge_and_concrete_max_tokens(
    context: Context,
) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):
            plan = GeneratePlan(
                request_id="client-id",
                endpoint=Endpoint.CHAT,
                model="m",
                prompt_ids=(1, 2, 3),
                sampling=SamplingParams(stop_token_ids=(7, 9)),
            )
            target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=MODEL_EOS)
            finalized = finalize(plan, target, None)
            async with backend.open_stream(finalized) as stream:
                add = await peer.next_add()
                assert stream.engine_request_ids == (add.request_id,)
            prefix, _, suffix = add.request_id.rpartition("-")
            assert (prefix, len(suffix)) == ("client-id", 8)
            assert add.external_req_id == "client-id"
            assert add.client_index == 0
            assert add.prompt_token_ids == (1, 2, 3)
            params = add.sampling_params
            assert params is not None
            assert params.max_tokens == MAX_MODEL_LEN - 3  # unset: the rest of the context
            assert params.eos_token_id == 5
            assert params.stop_token_ids == (7, 9)
            assert set(params.all_stop_token_ids) == {5, 7, 9}


async def test_outputs_become_events_and_a_finished_choice_is_never_aborted(
    context: Context,
) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):
            async with backend.open_stream(make_request(backend, max_tokens=8)) as stream:
                rid = (await peer.next_add()).request_id
                await peer.emit(step(rid, 10, prefill=PrefillStats(5, 5, 2)))
                first = await stream.__anext__()
                assert first == TokenDelta(0, (10,))
                await peer.emit(step("someone-else", 99), step(rid, 11, 12))
                await peer.emit(step(rid, 13, finish=FinishReason.STOP, stop_reason=13))
                rest = [event async for event in stream]
            assert tokens_of([first, *rest]) == [10, 11, 12, 13]
            assert rest[-1] == ChoiceFinished(0, "stop", 13, 5, 4, 2, cache_creation_tokens=0)
            # The next input must be the next ADD: no ABORT was sent for the finished request.
            async with backend.open_stream(make_request(backend, max_tokens=8)):
                await peer.next_add()
            kind, _ = await peer.next_input()
            assert kind is RequestType.ABORT  # the second stream was left unfinished


async def test_leaving_aborts_exactly_the_unfinished_choices(context: Context) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):
            finalized = make_request(backend, max_tokens=8, n=3, seed=1, greedy=False)
            async with backend.open_stream(finalized) as stream:
                ids = [(await peer.next_add()).request_id for _ in range(3)]
                assert list(stream.engine_request_ids) == ids
                await peer.emit(step(ids[1], 4, finish=FinishReason.LENGTH))
                async for event in stream:
                    if isinstance(event, ChoiceFinished):
                        break
            kind, payload = await peer.next_input()
            assert kind is RequestType.ABORT
            assert sorted(decode_abort(payload)) == sorted([ids[0], ids[2]])
            assert backend.statistics().in_flight == 0


async def test_cancelled_consumer_aborts(context: Context) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):
            with trio.move_on_after(0.05):
                async with backend.open_stream(make_request(backend, max_tokens=8)) as stream:
                    rid = (await peer.next_add()).request_id
                    async for _ in stream:
                        pass  # pragma: no cover - the peer never answers
            kind, payload = await peer.next_input()
            assert (kind, decode_abort(payload)) == (RequestType.ABORT, (rid,))


@pytest.mark.parametrize(
    ("finish", "error", "status", "reason"),
    [
        (FinishReason.ERROR, RequestError("validation_error", "bad prompt"), 500, "bad prompt"),
        (FinishReason.ABORT, None, 503, "aborted"),
    ],
)
async def test_engine_error_or_abort_finish_raises_engine_rejected(
    context: Context,
    finish: FinishReason,
    error: RequestError | None,
    status: int,
    reason: str,
) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):

            async def answer(request_id: str) -> None:
                await peer.emit(step(request_id, finish=finish, error=error))

            with pytest.raises(EngineRejected, match=reason) as caught:
                await drain_after(backend, peer, answer)
            assert caught.value.status == status
            assert backend.statistics().in_flight == 0
            async with backend.open_stream(make_request(backend, max_tokens=8)):
                await peer.next_add()  # no ABORT came first: the engine ended that request


async def test_client_errors_are_raised_before_anything_is_sent(context: Context) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):
            too_long = make_request(backend, max_tokens=4, prompt=tuple(range(MAX_MODEL_LEN)))
            with pytest.raises(ClientError, match="context length"):
                async with backend.open_stream(too_long):
                    pass  # pragma: no cover
            outside = make_request(backend, max_tokens=4, prompt=(1, 5000))
            with pytest.raises(ClientError, match="prompt"):
                async with backend.open_stream(outside):
                    pass  # pragma: no cover
            assert backend.statistics().in_flight == 0
            async with backend.open_stream(make_request(backend, max_tokens=4, request_id="ok")):
                assert (await peer.next_add()).external_req_id == "ok"


async def test_dead_sentinel_fails_streams_until_the_engine_says_hello_again(
    context: Context,
) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):

            async def die(_: str) -> None:
                await peer.output.send_multipart([ENGINE_CORE_DEAD])

            with pytest.raises(EngineDead, match="ENGINE_CORE_DEAD"):
                await drain_after(backend, peer, die)
            statistics = backend.statistics()
            assert not statistics.ready
            assert statistics.engines[0].dead_reason is not None
            with pytest.raises(BackendUnavailable, match="dead"):
                async with backend.open_stream(make_request(backend, max_tokens=8)):
                    pass  # pragma: no cover
            restarted = PeerEngine(context, backend, 0)
            try:
                await restarted.start()
                events = []
                async with backend.open_stream(make_request(backend, max_tokens=2)) as stream:
                    rid = (await restarted.next_add()).request_id
                    await restarted.emit(step(rid, 1, 2, finish=FinishReason.LENGTH))
                    events = [event async for event in stream]
                assert tokens_of(events) == [1, 2]
            finally:
                restarted.close()


async def test_malformed_output_is_dropped_and_counted(context: Context) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context) as (backend, (peer,)):
            async with backend.open_stream(make_request(backend, max_tokens=8)) as stream:
                rid = (await peer.next_add()).request_id
                await peer.output.send_multipart([b"\xc1 not msgpack"])
                await peer.emit(step(rid, 3, finish=FinishReason.LENGTH))
                events = [event async for event in stream]
            assert tokens_of(events) == [3]
            assert backend.statistics().protocol_errors == 1


async def test_two_engines_share_the_load(context: Context) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with backend_with_peers(context, count=2) as (backend, peers):
            finalized = make_request(backend, max_tokens=2, n=4, seed=3, greedy=False)
            async with backend.open_stream(finalized) as stream:
                adds = {
                    peer.index: [await peer.next_add(), await peer.next_add()] for peer in peers
                }
                assert [s.in_flight for s in backend.statistics().engines] == [2, 2]
                for peer in peers:
                    for add in adds[peer.index]:
                        await peer.emit(step(add.request_id, 1, 2, finish=FinishReason.LENGTH))
                events = [event async for event in stream]
            assert sorted(finishes_of(events)) == [0, 1, 2, 3]


@pytest.fixture
def slow_autojump_clock() -> trio.testing.MockClock:
    # Jump only after 50 ms of real idleness: messages cross libzmq's I/O thread meanwhile.
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.mark.serial
async def test_watchdog_declares_a_silent_engine_dead_after_its_period(
    context: Context, slow_autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(WATCHDOG_PERIOD_S * 5):
        # This peer answers no probe: probes wait past the window (test_engine_liveness.py).
        never = WATCHDOG_PERIOD_S * 10
        async with backend_with_peers(
            context, probe_period_s=never, engine_silence_s=WATCHDOG_PERIOD_S
        ) as (backend, (peer,)):
            await trio.sleep(WATCHDOG_PERIOD_S * 3)  # idle silence is normal
            assert backend.statistics().ready
            sent_at = math.nan

            async def stay_silent(_: str) -> None:
                nonlocal sent_at
                sent_at = trio.current_time()

            with pytest.raises(EngineDead, match="no output"):
                await drain_after(backend, peer, stay_silent)
            elapsed = trio.current_time() - sent_at
            assert WATCHDOG_PERIOD_S <= elapsed <= WATCHDOG_PERIOD_S * 1.15


async def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="TokenSpeed"):
        async with open_zmq_backend(runtime=Runtime.TOKENSPEED, engine_count=2):
            pass  # pragma: no cover
    with pytest.raises(UnsupportedRuntime):
        async with open_zmq_backend(runtime=Runtime.SGLANG):
            pass  # pragma: no cover
    with pytest.raises(ConfigError, match="data_address"):
        async with open_zmq_backend(runtime=Runtime.VLLM, data_address="udp://x"):
            pass  # pragma: no cover
    with trio.fail_after(TIMEOUT_S):
        async with (
            open_zmq_backend(runtime=Runtime.VLLM) as vllm,
            open_zmq_backend(runtime=Runtime.TOKENSPEED) as tokenspeed,
        ):
            with pytest.raises(UnsupportedRuntime, match="shaped for"):
                async with vllm.open_stream(make_request(tokenspeed, max_tokens=2)):
                    pass  # pragma: no cover


async def test_ipc_data_address_names_both_sockets_after_a_base_path() -> None:
    with private_ipc_dir() as directory, trio.fail_after(TIMEOUT_S):
        async with open_zmq_backend(runtime=Runtime.VLLM, data_address=f"ipc://{directory}/w") as b:
            assert (b.input_address, b.output_address) == (
                f"ipc://{directory}/w-in.sock",
                f"ipc://{directory}/w-out.sock",
            )
            assert (directory / "w-in.sock").exists()
        assert not (directory / "w-in.sock").exists()  # removed with the socket
