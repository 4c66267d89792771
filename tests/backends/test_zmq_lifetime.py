"""How ZMQ contexts and socket monitors end (backends/zmq_lifetime.py, docs/resilience.md §1):
leftover sockets are closed and named, a termination that cannot finish is abandoned within its
bound, a stopped monitor leaves the context's I/O thread working through later disconnects,
and the backends that own contexts leave nothing open when cancelled at any step of their
start."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import zmq
from zmq.utils.monitor import parse_monitor_message

from smg_trio.backends.zmq_backend import open_zmq_backend
from smg_trio.backends.zmq_lifetime import (
    open_socket_monitor,
    open_zmq_context,
    terminate_within,
)
from smg_trio.backends.zmq_socket import TrioZmqSocket, ipc_address, private_ipc_dir
from smg_trio.engines.kv_publisher import KvEventPublisher
from smg_trio.neutral.runtime import Runtime
from smg_trio.routing.kv_event_subscriber import subscribe_kv_events
from smg_trio.routing.kv_index import KvIndex

TEST_TIMEOUT_S: Final = 10
LIFETIME_LOGGER: Final = "smg_trio.backends.zmq_lifetime"

Context = zmq.Context[zmq.Socket[bytes]]


def lifetime_problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What zmq_lifetime complained about: sockets left open, a context abandoned."""
    return [r.getMessage() for r in caplog.records if r.name == LIFETIME_LOGGER]


async def test_leaving_closes_and_names_the_sockets_left_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, LIFETIME_LOGGER)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with open_zmq_context() as context:
            push = context.socket(zmq.PUSH)  # default linger: wait for ever to deliver
            push.connect("tcp://127.0.0.1:9")  # nobody listens; the message stays queued
            push.send(b"undeliverable", zmq.NOBLOCK)
    assert push.closed
    assert context.closed
    assert lifetime_problems(caplog) == ["closed 1 ZMQ socket(s) left open by their owner: PUSH"]


async def test_a_termination_that_cannot_finish_is_abandoned_within_its_bound() -> None:
    context: Context = zmq.Context()
    # Made without `context.socket()`, so nothing closes it for us: `zmq_ctx_term` waits
    # for it (and its queued message, linger -1) for ever.
    hidden = zmq.Socket(context, zmq.PUSH)
    hidden.connect("tcp://127.0.0.1:9")
    hidden.send(b"undeliverable", zmq.NOBLOCK)
    with trio.fail_after(TEST_TIMEOUT_S):
        assert not await terminate_within(context, 0.2)
        (abandoned,) = [t for t in threading.enumerate() if t.name == "zmq-context-term"]
        hidden.close(linger=0)  # the abandoned termination can now end
        await trio.to_thread.run_sync(abandoned.join, TEST_TIMEOUT_S)
    assert not abandoned.is_alive()
    assert context.closed


@contextmanager
def peer_context() -> Iterator[Context]:
    """Another process's sockets, as far as libzmq is concerned: a context of their own, with
    their own I/O thread."""
    context: Context = zmq.Context()
    try:
        yield context
    finally:
        context.destroy(linger=0)


def dealer(context: Context, endpoint: str) -> TrioZmqSocket:
    socket = TrioZmqSocket(context.socket(zmq.DEALER))
    socket.connect(endpoint)
    return socket


async def test_a_stopped_monitor_leaves_the_context_working_through_disconnects() -> None:
    """Leaving the monitor's block while the monitored ROUTER stays open, then peers leaving and
    coming: each new peer is still heard. Closing the PAIR before stopping the monitor fails
    this: the first disconnect after it blocks the context's I/O thread for good (libzmq
    #3575), and nothing reaches the ROUTER any more."""
    events = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
    with trio.fail_after(TEST_TIMEOUT_S):
        async with open_zmq_context() as context:
            with (
                peer_context() as peers,
                TrioZmqSocket(context.socket(zmq.ROUTER)) as router,
            ):
                endpoint = router.bind("tcp://127.0.0.1:*")
                with open_socket_monitor(router, events) as monitor:
                    peer = dealer(peers, endpoint)
                    while True:  # the monitor works while it is on
                        event = parse_monitor_message(await monitor.receive_multipart())
                        if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                            break
                assert monitor.closed
                for round_number in range(3):
                    peer.close()  # a disconnect the stopped monitor must not try to report
                    peer = dealer(peers, endpoint)
                    await peer.send_multipart([b"round %d" % round_number])
                    frames = await router.receive_multipart()
                    assert frames[1:] == [b"round %d" % round_number]
                peer.close()


# --- cancelled at every step of a start --------------------------------------------------------


class CancelAtStep(trio.abc.Instrument):
    """A trio instrument that cancels `scope` just before the `at`-th step of any task whose
    name starts with one of `prefix` (the code under test, not the test)."""

    def __init__(self, prefix: tuple[str, ...], at: int, scope: trio.CancelScope) -> None:
        self.prefix = prefix
        self.at = at
        self.scope = scope
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith(self.prefix):
            self.steps += 1
            if self.steps == self.at:
                self.scope.cancel()


Starter = Callable[[trio.TaskStatus[Any]], Awaitable[object]]


async def start_cancelled_at(start: Starter, prefix: tuple[str, ...], at: int) -> tuple[bool, int]:
    """Start `start` in a nursery, cancelled at its `at`-th step (if it gets that far before
    it has started, else right after). Whether it started; the steps it took."""
    started = False
    with trio.CancelScope() as scope:
        instrument = CancelAtStep(prefix, at, scope)
        trio.lowlevel.add_instrument(instrument)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(start)
                started = True
                scope.cancel()
        finally:
            trio.lowlevel.remove_instrument(instrument)
    assert scope.cancelled_caught
    return started, instrument.steps


async def cancel_at_every_step(
    start: Starter, prefix: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> int:
    """Cancel `start` at each of its steps up to its start, one run each; after every run
    nothing was left open and the context terminated. The number of runs."""
    caplog.set_level(logging.WARNING, LIFETIME_LOGGER)
    at = 0
    while True:
        at += 1
        with trio.fail_after(TEST_TIMEOUT_S):
            started, _ = await start_cancelled_at(start, prefix, at)
        assert lifetime_problems(caplog) == [], f"cancelled at step {at}"
        if started:
            return at


@asynccontextmanager
async def kv_publisher(directory: Path) -> AsyncIterator[tuple[str, str]]:
    context: Context = zmq.Context()
    endpoints = ipc_address(directory, "kv.sock"), ipc_address(directory, "kvr.sock")
    publisher = KvEventPublisher(context, *endpoints)
    try:
        yield endpoints
    finally:
        publisher.close()
        context.term()


async def test_a_kv_subscriber_cancelled_at_any_step_of_its_start_leaves_nothing_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with private_ipc_dir() as directory:
        async with kv_publisher(directory) as (events, replay):
            start = partial(subscribe_kv_events, "w1", events, replay, KvIndex())
            runs = await cancel_at_every_step(
                start, ("smg_trio.routing.kv_event_subscriber",), caplog
            )
    assert runs >= 2  # at least one step before it started


async def test_a_zmq_backend_cancelled_at_any_step_of_its_start_leaves_nothing_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def hold_backend(task_status: trio.TaskStatus[None]) -> None:
        async with open_zmq_backend(runtime=Runtime.VLLM):
            task_status.started()
            await trio.sleep_forever()

    runs = await cancel_at_every_step(hold_backend, ("smg_trio.backends", __name__), caplog)
    assert runs >= 2
