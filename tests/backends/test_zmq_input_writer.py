"""The input ROUTER's writer over a real inproc socket pair: a new stream's ADD leaves from the
request's own task while the writer is idle, and waits its turn behind anything queued; an ADD
whose stream ended is dropped; an unroutable one declares its engine dead."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import trio
import trio.testing
import zmq

from smg_trio.backends.zmq_engines import RankPolicy, Route
from smg_trio.backends.zmq_input_writer import LOST_CONNECTION, InputWriter, Outgoing
from smg_trio.backends.zmq_lifetime import open_zmq_context
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.backends.zmq_socket import TrioZmqSocket, bind_engine_socket
from smg_trio.wire.zmq_transport import RequestType, engine_identity

TEST_TIMEOUT_S: Final = 5.0
ADDRESS: Final = "inproc://input-writer"


@dataclass
class Rig:
    writer: InputWriter
    registry: EngineRegistry
    engine_input: TrioZmqSocket  # engine 0's DEALER


@contextlib.asynccontextmanager
async def rig(engines: int = 1) -> AsyncIterator[Rig]:
    async with open_zmq_context() as context, contextlib.AsyncExitStack() as stack:
        router, _ = bind_engine_socket(stack, context, zmq.ROUTER, ADDRESS)
        dealer = stack.enter_context(TrioZmqSocket(context.socket(zmq.DEALER)))
        dealer.socket.setsockopt(zmq.IDENTITY, engine_identity(0))
        dealer.connect(ADDRESS)
        await dealer.send_multipart([b"hello"])  # the ROUTER routes to it once it heard it
        await router.receive_multipart()
        registry = EngineRegistry(engines, RankPolicy.LEAST_LOADED)
        writer = InputWriter(router, registry)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.write_inputs)
            await trio.testing.wait_all_tasks_blocked()  # the writer is parked, idle
            yield Rig(writer, registry, dealer)
            nursery.cancel_scope.cancel()


def add(registry: EngineRegistry, request_id: str, engine_index: int = 0) -> Outgoing:
    engine = registry.engines[engine_index]
    stream = registry.in_flight.new_stream((request_id,))
    route = Route(
        engine_request_id=request_id, choice_index=0, engine=engine, stream=stream, prompt_tokens=1
    )
    frames = [engine.identity, RequestType.ADD.frame, request_id.encode()]
    return Outgoing(engine, frames, add_for=route)


async def test_an_add_leaves_from_the_request_task_while_the_writer_is_idle() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with rig() as r:
            item = add(r.registry, "a")
            r.writer.send_adds([item])
            assert item.add_for is not None
            assert item.add_for.add_sent  # handed to libzmq before any checkpoint
            assert (await r.engine_input.receive_multipart())[-1] == b"a"


async def test_an_add_waits_behind_what_is_queued() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with rig() as r:
            engine = r.registry.engines[0]
            r.writer.put(Outgoing(engine, [engine.identity, RequestType.ABORT.frame, b"first"]))
            item = add(r.registry, "second")
            r.writer.send_adds([item])
            assert item.add_for is not None
            assert not item.add_for.add_sent  # queued: the writer sends it, after the first
            received = [(await r.engine_input.receive_multipart())[-1] for _ in range(2)]
            assert received == [b"first", b"second"]
            assert item.add_for.add_sent


async def test_an_add_whose_stream_ended_is_dropped_and_an_unroutable_one_kills() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with rig(engines=2) as r:
            ended = add(r.registry, "ended")
            assert ended.add_for is not None
            ended.add_for.live = False
            r.registry.engines[1].said_hello = True  # it registered, and its connection is gone
            unroutable = add(r.registry, "nowhere", engine_index=1)
            r.writer.send_adds([ended, unroutable])
            assert not ended.add_for.add_sent
            assert r.registry.engines[1].dead_reason == LOST_CONNECTION
            assert r.registry.engines[0].dead_reason is None
