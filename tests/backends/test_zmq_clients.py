"""The ZMQ backend as one of several gateway processes (`ZmqClient`, docs/processes.md §3),
against an in-process peer engine over real sockets: its registration alone makes it ready,
every ADD and UTILITY call carries this process's client_index, the registration is kept for
a restarted process, which takes the engine back at its first answer, and outputs for ids no
stream here holds (a killed predecessor's requests) are aborted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
import trio
import zmq

from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.backends.zmq_clients import ZmqClient, saved_registrations, zmq_client
from smg_trio.backends.zmq_lifetime import open_zmq_context
from smg_trio.backends.zmq_socket import TrioZmqSocket, private_ipc_dir
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire import vllm_zmq
from smg_trio.wire.vllm_zmq_outputs import EngineCoreOutput, EngineCoreOutputs, encode_outputs
from smg_trio.wire.zmq_transport import RequestType, decode_abort, engine_identity
from tests.backends.conformance import make_request

Context = zmq.Context[zmq.Socket[bytes]]
TIMEOUT_S: Final = 5.0
CLIENT: Final = 1  # the second of two processes


@pytest.fixture
async def context() -> AsyncIterator[Context]:
    async with open_zmq_context() as context:
        yield context


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with private_ipc_dir() as directory:
        yield directory


class Engine:
    """The engine's side of one client: an input DEALER and an output PUSH."""

    def __init__(self, context: Context, client: ZmqClient, *, connect_input: bool = True) -> None:
        self.input = TrioZmqSocket(context.socket(zmq.DEALER))
        self.input.socket.setsockopt(zmq.IDENTITY, engine_identity(0))
        self.output = TrioZmqSocket(context.socket(zmq.PUSH))
        self.output.connect(client.output_address)
        self.client = client
        if connect_input:
            self.input.connect(client.input_address)

    def close(self) -> None:
        self.input.close()
        self.output.close()

    async def register(self) -> None:
        response = vllm_zmq.ReadyResponse(max_model_len=64, vllm_version="0.33.0")
        await self.input.send_multipart([vllm_zmq.encode_ready_response(response)])

    async def next_input(self) -> tuple[RequestType, bytes]:
        frames = await self.input.receive_multipart()
        return RequestType.of_frame(frames[0]), frames[1]

    async def emit(self, *outputs: EngineCoreOutput) -> None:
        await self.output.send_multipart([encode_outputs(EngineCoreOutputs(outputs=outputs))])


@asynccontextmanager
async def client_backend(client: ZmqClient) -> AsyncIterator[ZmqBackend]:
    async with open_zmq_backend(
        runtime=Runtime.VLLM, handshake_address="tcp://127.0.0.1:1", vocab_size=1000, client=client
    ) as backend:
        yield backend


async def until_ready(backend: ZmqBackend) -> None:
    while not backend.statistics().ready:  # noqa: ASYNC110 (the state crosses libzmq's thread)
        await trio.sleep(0.001)


async def test_a_registration_makes_it_ready_and_every_call_carries_its_client_index(
    context: Context, run_dir: Path
) -> None:
    client = zmq_client(run_dir, 0, 2, CLIENT)
    with trio.fail_after(TIMEOUT_S):
        async with client_backend(client) as backend:
            engine = Engine(context, client)
            try:
                await engine.register()
                await until_ready(backend)
                assert list(saved_registrations(client.registrations)) == [0]
                async with backend.open_stream(make_request(backend, max_tokens=4)):
                    kind, payload = await engine.next_input()
                    while kind is RequestType.UTILITY:  # a liveness probe may come first
                        probe = vllm_zmq.decode_utility_call(payload)
                        assert probe.client_index == CLIENT
                        kind, payload = await engine.next_input()
                    assert kind is RequestType.ADD
                    assert vllm_zmq.decode_request(payload).client_index == CLIENT
            finally:
                engine.close()


async def test_a_restarted_process_takes_the_engine_back_at_its_first_answer(
    context: Context, run_dir: Path
) -> None:
    client = zmq_client(run_dir, 0, 2, CLIENT)
    with trio.fail_after(TIMEOUT_S):
        async with client_backend(client) as backend:  # the first life: the engine registers
            engine = Engine(context, client)
            try:
                await engine.register()
                await until_ready(backend)
            finally:
                engine.close()
        async with client_backend(client) as restarted:  # no registration will come again
            # Its output socket reconnects first: outputs alone do not prove the input is back.
            engine = Engine(context, client, connect_input=False)
            try:
                await engine.emit()
                await trio.sleep(0.05)
                assert not restarted.statistics().ready
                engine.input.connect(client.input_address)
                kind, payload = await engine.next_input()  # the probe the registration made
                assert kind is RequestType.UTILITY
                call = vllm_zmq.decode_utility_call(payload)
                assert call.client_index == CLIENT
                await trio.sleep(0.05)
                assert not restarted.statistics().ready  # not before the engine answered
                await engine.emit()  # any output is an answer
                await until_ready(restarted)
            finally:
                engine.close()


async def test_outputs_for_ids_no_stream_holds_are_aborted(context: Context, run_dir: Path) -> None:
    client = zmq_client(run_dir, 0, 2, CLIENT)
    with trio.fail_after(TIMEOUT_S):
        async with client_backend(client) as backend:
            engine = Engine(context, client)
            try:
                await engine.register()
                await until_ready(backend)
                running = EngineCoreOutput(request_id="predecessor-1", new_token_ids=(3,))
                finished = EngineCoreOutput(
                    request_id="predecessor-2", new_token_ids=(4,), finish_reason=1
                )
                await engine.emit(running, finished)
                while True:
                    kind, payload = await engine.next_input()
                    if kind is RequestType.ABORT:
                        break
                assert decode_abort(payload) == ("predecessor-1",)  # a finished one needs none
            finally:
                engine.close()
