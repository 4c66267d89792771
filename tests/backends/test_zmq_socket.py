"""TrioZmqSocket against real ZMQ peers over ipc and tcp: throughput patterns that deadlock a
naive edge-triggered adapter, sharing one socket between tasks, cancellation, close, and the
address helpers (private ipc dir, stale socket files, bind errors)."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing
import zmq

from smg_trio.backends.zmq_lifetime import open_zmq_context
from smg_trio.backends.zmq_socket import (
    IPC_PATH_MAX_BYTES,
    TrioZmqSocket,
    ipc_address,
    private_ipc_dir,
)
from smg_trio.errors import BackendUnavailable, ConfigError

TEST_TIMEOUT_S = 5
BULK_TIMEOUT_S = 60  # 100k messages on a shared 2-core machine; a deadlock still fails it
PEER_TIMEOUT_MS = 10_000  # blocking peers in threads give up instead of hanging the run

Context = zmq.Context[zmq.Socket[bytes]]


@pytest.fixture
def ipc_dir(tmp_path: Path) -> Iterator[Path]:
    if len(os.fsencode(tmp_path)) < 80:
        yield tmp_path
        return
    with private_ipc_dir() as short:
        yield short


@pytest.fixture
async def context() -> AsyncIterator[Context]:
    async with open_zmq_context() as context:
        yield context


@pytest.fixture(params=["ipc", "tcp"])
def address(request: pytest.FixtureRequest, ipc_dir: Path) -> str:
    """A bindable address; tcp uses a wildcard port, so use the endpoint `bind` returns."""
    if request.param == "ipc":
        return ipc_address(ipc_dir, "sock")
    return "tcp://127.0.0.1:*"


def sequence_bytes(number: int) -> bytes:
    return number.to_bytes(4, "big")


def sequence_number(frame: bytes) -> int:
    return int.from_bytes(frame[:4], "big")


# --- blocking peers, each in its own thread and context, like a separate engine process -----
# A peer stays up until the test has everything: closing right after the last send can lose
# queued messages whatever LINGER says (libzmq #4660, reproduced here with ipc + HWM).

PEER_TIMEOUT_S = PEER_TIMEOUT_MS / 1000


def run_blocking_push(endpoint: str, count: int, release: threading.Event) -> None:
    peer_context: Context = zmq.Context()
    push = peer_context.socket(zmq.PUSH)
    push.sndtimeo = PEER_TIMEOUT_MS
    try:
        push.connect(endpoint)
        for number in range(count):
            push.send(sequence_bytes(number))
    finally:
        release.wait(PEER_TIMEOUT_S)
        push.close(linger=0)
        peer_context.term()


def run_blocking_dealer_echo(endpoint: str, count: int, release: threading.Event) -> None:
    peer_context: Context = zmq.Context()
    dealer = peer_context.socket(zmq.DEALER)
    dealer.rcvtimeo = dealer.sndtimeo = PEER_TIMEOUT_MS
    dealer.routing_id = b"peer"
    try:
        dealer.connect(endpoint)
        dealer.send(b"hello")
        for _ in range(count):
            dealer.send_multipart(dealer.recv_multipart())
    finally:
        release.wait(PEER_TIMEOUT_S)
        dealer.close(linger=0)
        peer_context.term()


@contextlib.asynccontextmanager
async def open_thread_peer(
    peer: Callable[[str, int, threading.Event], None], endpoint: str, count: int
) -> AsyncIterator[None]:
    """Run a blocking peer in a thread; leaving the block releases it and waits for it."""
    release = threading.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(trio.to_thread.run_sync, abandon_on_cancel=True),
            peer,
            endpoint,
            count,
            release,
        )
        try:
            yield
        finally:
            release.set()


# --- throughput patterns -------------------------------------------------------------------


async def receive_in_order(pull: TrioZmqSocket, count: int) -> list[int]:
    batch_sizes = []
    expected = 0
    while expected < count:
        batch = await pull.receive_batch(256)
        batch_sizes.append(len(batch))
        for [frame] in batch:
            assert sequence_number(frame) == expected
            expected += 1
    return batch_sizes


async def test_push_pull_100k_from_a_blocking_peer_arrive_in_order(
    context: Context, address: str
) -> None:
    with trio.fail_after(BULK_TIMEOUT_S), TrioZmqSocket(context.socket(zmq.PULL)) as pull:
        endpoint = pull.bind(address)
        async with open_thread_peer(run_blocking_push, endpoint, 100_000):
            batch_sizes = await receive_in_order(pull, 100_000)
        assert sum(batch_sizes) == 100_000
        assert max(batch_sizes) > 1


async def test_push_pull_between_two_trio_sockets_with_small_hwms(
    context: Context, address: str
) -> None:
    """Both ends in one trio run: the sender keeps hitting the HWM and waits for POLLOUT.
    (Fewer messages than above: a checkpoint per send makes this pattern ~50 µs/message; 5,000
    is still fifty times the HWMs, each crossing a wait for POLLOUT.)"""
    count = 5_000
    with (
        trio.fail_after(BULK_TIMEOUT_S),
        TrioZmqSocket(context.socket(zmq.PULL)) as pull,
        TrioZmqSocket(context.socket(zmq.PUSH)) as push,
    ):
        push.socket.sndhwm = 100
        pull.socket.rcvhwm = 100
        push.connect(pull.bind(address))

        async def send_all() -> None:
            for number in range(count):
                await push.send_multipart([sequence_bytes(number)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_all)
            await receive_in_order(pull, count)


async def echo_with_trio_dealer(
    context: Context, endpoint: str, count: int, release: trio.Event
) -> None:
    with TrioZmqSocket(context.socket(zmq.DEALER)) as dealer:
        dealer.socket.routing_id = b"peer"
        dealer.connect(endpoint)
        await dealer.send_multipart([b"hello"])
        for _ in range(count):
            await dealer.send_multipart(await dealer.receive_multipart())
        await release.wait()  # closing with linger 0 would drop the last replies


@contextlib.asynccontextmanager
async def open_echo_peer(
    kind: str, context: Context, endpoint: str, count: int
) -> AsyncIterator[None]:
    if kind == "blocking-thread":
        async with open_thread_peer(run_blocking_dealer_echo, endpoint, count):
            yield
        return
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo_with_trio_dealer, context, endpoint, count, release)
        try:
            yield
        finally:
            release.set()


async def send_one_at_a_time(
    router: TrioZmqSocket, peer_id: bytes, count: int, credits: trio.Semaphore
) -> None:
    for number in range(count):
        await credits.acquire()
        await router.send_multipart([peer_id, sequence_bytes(number)])


async def send_in_bursts_without_checkpoints(
    router: TrioZmqSocket, peer_id: bytes, count: int, credits: trio.Semaphore
) -> None:
    number = 0
    while number < count:
        await credits.acquire()
        burst = 1
        while number + burst < count:
            try:
                credits.acquire_nowait()
            except trio.WouldBlock:
                break
            burst += 1
        for _ in range(burst):
            request = [peer_id, sequence_bytes(number)]
            try:
                router.send_multipart_nowait(request)
            except trio.WouldBlock:
                await router.send_multipart(request)
            number += 1


@pytest.mark.parametrize(
    ("peer", "send_requests"),
    [
        ("blocking-thread", send_one_at_a_time),
        ("trio", send_one_at_a_time),
        ("blocking-thread", send_in_bursts_without_checkpoints),
    ],
    ids=["blocking-peer", "trio-peer", "blocking-peer-nowait-sends"],
)
async def test_router_dealer_echo_with_64_in_flight_completes(
    context: Context,
    address: str,
    peer: str,
    send_requests: Callable[[TrioZmqSocket, bytes, int, trio.Semaphore], Awaitable[None]],
) -> None:
    """A sender and a receiver task share the ROUTER; each send can swallow the POLLIN edge
    the receiver sleeps on. A naive adapter stalls after about a thousand replies: 5,000 is
    five times that (it was 20,000, 1.5 s of CPU a run; the sustained volume is
    `python -m bench zmq_throughput`'s, through the same socket adapter)."""
    count, window = 5_000, 64
    with trio.fail_after(BULK_TIMEOUT_S), TrioZmqSocket(context.socket(zmq.ROUTER)) as router:
        router.socket.router_mandatory = 1
        endpoint = router.bind(address)
        received: list[int] = []
        async with open_echo_peer(peer, context, endpoint, count):
            peer_id, hello = await router.receive_multipart()
            assert hello == b"hello"
            credits = trio.Semaphore(window)

            async def receive_replies() -> None:
                while len(received) < count:
                    for _peer, body in await router.receive_batch(window):
                        received.append(sequence_number(body))
                        credits.release()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_requests, router, peer_id, count, credits)
                nursery.start_soon(receive_replies)
        assert received == list(range(count))


async def test_receive_batch_takes_many_queued_messages_but_at_most_max_n(
    context: Context, address: str
) -> None:
    with (
        trio.fail_after(TEST_TIMEOUT_S),
        TrioZmqSocket(context.socket(zmq.PULL)) as pull,
        TrioZmqSocket(context.socket(zmq.PUSH)) as push,
    ):
        push.connect(pull.bind(address))
        for number in range(1_000):
            await push.send_multipart([sequence_bytes(number)])
        batch_sizes = []
        received: list[int] = []
        while len(received) < 1_000:
            batch = await pull.receive_batch(64)
            batch_sizes.append(len(batch))
            received.extend(sequence_number(frame) for [frame] in batch)
        assert received == list(range(1_000))
        assert max(batch_sizes) == 64
        assert len(batch_sizes) < 100


async def test_receive_batch_rejects_a_non_positive_max_n(context: Context) -> None:
    with (
        trio.fail_after(TEST_TIMEOUT_S),
        TrioZmqSocket(context.socket(zmq.PULL)) as pull,
        pytest.raises(ValueError, match="max_n"),
    ):
        await pull.receive_batch(0)


@pytest.mark.parametrize("receive", ["receive_multipart", "receive_batch"])
async def test_cancel_while_waiting_to_receive_leaves_the_socket_usable(
    context: Context, address: str, receive: str
) -> None:
    with (
        trio.fail_after(TEST_TIMEOUT_S),
        TrioZmqSocket(context.socket(zmq.PULL)) as pull,
        TrioZmqSocket(context.socket(zmq.PUSH)) as push,
    ):
        push.connect(pull.bind(address))

        async def receive_once() -> None:
            if receive == "receive_batch":
                await pull.receive_batch(8)
            else:
                await pull.receive_multipart()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive_once)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        await push.send_multipart([b"after", b"cancel"])
        assert await pull.receive_multipart() == [b"after", b"cancel"]


async def test_receive_multipart_can_return_frames_without_copying(
    context: Context, address: str
) -> None:
    with (
        trio.fail_after(TEST_TIMEOUT_S),
        TrioZmqSocket(context.socket(zmq.PULL)) as pull,
        TrioZmqSocket(context.socket(zmq.PUSH)) as push,
    ):
        push.connect(pull.bind(address))
        await push.send_multipart([b"x" * 4096, memoryview(b"tail")])
        frames = await pull.receive_multipart(copy=False)
        assert [frame.bytes for frame in frames] == [b"x" * 4096, b"tail"]


# --- one socket shared by a sender and a receiver task -------------------------------------


def open_unconnected_dealer(context: Context, endpoint: str) -> TrioZmqSocket:
    """A DEALER whose sends must wait (IMMEDIATE: no pipe until the peer exists)."""
    dealer = TrioZmqSocket(context.socket(zmq.DEALER))
    dealer.socket.immediate = 1
    dealer.socket.routing_id = b"dealer"
    dealer.connect(endpoint)
    return dealer


async def reply_to_one(context: Context, endpoint: str, release: trio.Event) -> None:
    with TrioZmqSocket(context.socket(zmq.ROUTER)) as router:
        router.bind(endpoint)
        peer_id, body = await router.receive_multipart()
        await router.send_multipart([peer_id, b"reply to " + body])
        await release.wait()  # closing with linger 0 would drop the reply


@pytest.mark.parametrize("first", ["receiver", "sender"])
async def test_a_sender_and_a_receiver_can_wait_on_one_socket_at_once(
    context: Context, ipc_dir: Path, first: str
) -> None:
    endpoint = ipc_address(ipc_dir, "shared")
    with trio.fail_after(TEST_TIMEOUT_S), open_unconnected_dealer(context, endpoint) as dealer:
        replies: list[list[bytes]] = []
        replied = trio.Event()

        async def receive() -> None:
            replies.append(await dealer.receive_multipart())
            replied.set()

        async def send() -> None:
            await dealer.send_multipart([b"request"])

        async with trio.open_nursery() as nursery:
            tasks = [receive, send] if first == "receiver" else [send, receive]
            for task in tasks:
                nursery.start_soon(task)
                await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(reply_to_one, context, endpoint, replied)
        assert replies == [[b"reply to request"]]


async def test_send_nowait_raises_would_block_until_a_peer_can_take_it(
    context: Context, ipc_dir: Path
) -> None:
    endpoint = ipc_address(ipc_dir, "nowait")
    with (
        trio.fail_after(TEST_TIMEOUT_S),
        open_unconnected_dealer(context, endpoint) as dealer,
        TrioZmqSocket(context.socket(zmq.ROUTER)) as router,
    ):
        with pytest.raises(trio.WouldBlock):
            dealer.send_multipart_nowait([b"too early"])
        router.bind(endpoint)
        await dealer.send_multipart([b"first"])  # waits for the connection
        dealer.send_multipart_nowait([b"second"])
        assert [await router.receive_multipart() for _ in range(2)] == [
            [b"dealer", b"first"],
            [b"dealer", b"second"],
        ]


async def test_a_waiting_task_takes_over_when_the_fd_waiter_is_cancelled(
    context: Context, ipc_dir: Path
) -> None:
    endpoint = ipc_address(ipc_dir, "takeover")
    with trio.fail_after(TEST_TIMEOUT_S), open_unconnected_dealer(context, endpoint) as dealer:
        receiver_scope = trio.CancelScope()

        async def receive_until_cancelled() -> None:
            with receiver_scope:
                await dealer.receive_multipart()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive_until_cancelled)  # sleeps on the fd
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(dealer.send_multipart, [b"request"])  # parks behind it
            await trio.testing.wait_all_tasks_blocked()
            receiver_scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            # The sender now sleeps on the fd itself; the peer appearing must wake it.
            nobody_reads_the_reply = trio.Event()
            nobody_reads_the_reply.set()
            nursery.start_soon(reply_to_one, context, endpoint, nobody_reads_the_reply)
        assert receiver_scope.cancelled_caught


# --- close, errors, addresses --------------------------------------------------------------


async def test_close_wakes_waiting_tasks_and_later_operations_fail(
    context: Context, address: str
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        pull = TrioZmqSocket(context.socket(zmq.PULL))
        pull.bind(address)
        outcomes: list[type[BaseException]] = []

        async def receive() -> None:
            with pytest.raises(trio.ClosedResourceError) as raised:
                await pull.receive_batch(8)
            outcomes.append(type(raised.value))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            pull.close()
        assert outcomes == [trio.ClosedResourceError, trio.ClosedResourceError]
        pull.close()
        with pytest.raises(trio.ClosedResourceError):
            await pull.send_multipart([b"x"])


async def test_unroutable_router_send_is_backend_unavailable(context: Context) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), TrioZmqSocket(context.socket(zmq.ROUTER)) as router:
        router.socket.router_mandatory = 1
        router.bind("tcp://127.0.0.1:*")
        with pytest.raises(BackendUnavailable):
            await router.send_multipart([b"nobody", b"request"])


async def test_bind_to_a_busy_tcp_port_is_a_config_error_naming_the_address(
    context: Context,
) -> None:
    with TrioZmqSocket(context.socket(zmq.PULL)) as first:
        endpoint = first.bind("tcp://127.0.0.1:*")
        with TrioZmqSocket(context.socket(zmq.PULL)) as second:
            with pytest.raises(ConfigError, match=endpoint.replace(".", r"\.")):
                second.bind(endpoint)
            with pytest.raises(ConfigError, match="no-such-transport"):
                second.connect("no-such-transport://x")


async def test_bind_replaces_a_stale_ipc_socket_file(context: Context, ipc_dir: Path) -> None:
    path = ipc_dir / "stale"
    dead_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead_listener.bind(os.fspath(path))
    dead_listener.close()  # the file stays behind, as after a crash
    with TrioZmqSocket(context.socket(zmq.PULL)) as pull:
        assert pull.bind(f"ipc://{path}") == f"ipc://{path}"
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    assert not path.exists()  # close removes the file it bound


async def test_bind_refuses_an_ipc_path_a_live_process_is_bound_to(
    context: Context, ipc_dir: Path
) -> None:
    address = ipc_address(ipc_dir, "live")
    with TrioZmqSocket(context.socket(zmq.PULL)) as owner:
        owner.bind(address)
        with (
            TrioZmqSocket(context.socket(zmq.PULL)) as intruder,
            pytest.raises(ConfigError, match="live process"),
        ):
            intruder.bind(address)
        assert stat.S_ISSOCK(os.lstat(address.removeprefix("ipc://")).st_mode)


async def test_bind_refuses_to_replace_a_file_that_is_not_a_socket(
    context: Context, ipc_dir: Path
) -> None:
    path = ipc_dir / "notes.txt"
    path.write_text("keep me")
    with (
        TrioZmqSocket(context.socket(zmq.PULL)) as pull,
        pytest.raises(ConfigError, match="not a socket"),
    ):
        pull.bind(f"ipc://{path}")
    assert path.read_text() == "keep me"


def test_ipc_address_refuses_paths_longer_than_the_kernel_allows(ipc_dir: Path) -> None:
    with pytest.raises(ConfigError, match="limit"):
        ipc_address(ipc_dir, "x" * IPC_PATH_MAX_BYTES)
    assert ipc_address(ipc_dir, "ok") == f"ipc://{ipc_dir}/ok"


def test_private_ipc_dir_is_private_short_and_removed() -> None:
    with private_ipc_dir() as directory:
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert len(os.fsencode(directory)) < 60
        (directory / "leftover").write_text("x")
    assert not directory.exists()
