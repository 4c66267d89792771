"""I/O. A trio adapter over a pyzmq socket, and private ipc addresses (the context and socket
monitors: zmq_lifetime.py).

pyzmq's `ZMQ_FD` is edge-triggered: it becomes readable when libzmq has *commands* to process,
not when a message is ready, and ANY call that processes commands (send, recv, reading
`ZMQ_EVENTS`) can consume that edge. So every operation is tried with `NOBLOCK` first, `EVENTS`
is re-checked before sleeping, and after an operation made while another task is parked, the
parked task is woken explicitly if `EVENTS` now has what it waits for (a send that swallowed the
receiver's POLLIN edge is the classic deadlock). trio allows one waiter per fd, so a single
"fd waiter" sleeps in `wait_readable` and any other task parks behind it; whenever the fd
waiter leaves, everyone retries. `receive_batch` drains while `EVENTS` says a message is queued
(no `zmq.Again` raised to end a batch) and yields once per batch: a checkpoint per message costs
~5 µs, more than the message itself.

Foreign errors are translated here: bind/connect failures become `ConfigError` naming the
address, an unroutable ROUTER send becomes `BackendUnavailable`, a closed socket or terminated
context becomes `trio.ClosedResourceError`, anything else `BackendError`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeAlias, overload

import trio
import zmq

from smg_trio.errors import BackendError, BackendUnavailable, ConfigError

SendableFrame: TypeAlias = bytes | bytearray | memoryview | zmq.Frame

IPC_PATH_MAX_BYTES = 107
"""Linux `sun_path` holds 108 bytes including the terminating NUL."""

# Plain ints: pyzmq's IntFlag constants cost an enum construction per `&` or `|`.
_NOBLOCK = int(zmq.NOBLOCK)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_EVENTS = int(zmq.EVENTS)

_SHORT_TEMP_PARENT = "/tmp"  # a long $TMPDIR would push ipc paths past IPC_PATH_MAX_BYTES


class TrioZmqSocket:
    """A non-blocking view of one `zmq.Socket` for trio tasks; owns and closes the socket.

    Usually one task owns a socket, but a sender task and a receiver task may share it safely.
    Closing while tasks wait makes them raise `trio.ClosedResourceError`.
    """

    def __init__(self, zmq_socket: zmq.Socket[bytes]) -> None:
        self._socket = zmq_socket
        self._fd: int = zmq_socket.FD
        self._fd_waiter: trio.CancelScope | None = None
        self._wanted_events = 0  # POLLIN/POLLOUT wanted by the fd waiter and parked tasks
        self._parked = trio.lowlevel.ParkingLot()
        self._closed = False
        self._bound_ipc_paths: list[tuple[Path, int]] = []  # (path, inode) to remove on close

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """The raw socket, for options (ROUTER_MANDATORY, IDENTITY, HWMs). Do not send on it."""
        return self._socket

    def bind(self, address: str) -> str:
        """Bind and return the actual endpoint (resolves `tcp://127.0.0.1:*`).

        A leftover ipc socket file from a dead process is removed first; a live one, or a path
        that is not a socket, is a `ConfigError` (libzmq would silently take it over).
        """
        ipc_path = _filesystem_ipc_path(address)
        if ipc_path is not None:
            _remove_stale_ipc_socket(address, ipc_path)
        try:
            self._socket.bind(address)
        except zmq.ZMQError as exc:
            raise ConfigError(f"cannot bind ZMQ socket to {address}: {exc.strerror}") from exc
        endpoint = self._socket.get_string(zmq.LAST_ENDPOINT)
        bound_path = _filesystem_ipc_path(endpoint)
        if bound_path is not None:
            self._bound_ipc_paths.append((bound_path, os.lstat(bound_path).st_ino))
        return endpoint

    def connect(self, address: str) -> None:
        """Start connecting (libzmq connects and reconnects in the background)."""
        try:
            self._socket.connect(address)
        except zmq.ZMQError as exc:
            raise ConfigError(f"cannot connect ZMQ socket to {address}: {exc.strerror}") from exc

    def send_multipart_nowait(self, frames: Sequence[SendableFrame], *, copy: bool = True) -> None:
        """Send one multipart message now, or raise `trio.WouldBlock` (HWM reached, no peer).

        No checkpoint: a task sending a burst yields once per burst, not once per message.
        """
        self._raise_if_closed()
        try:
            self._socket.send_multipart(frames, _NOBLOCK, copy=copy)
        except zmq.Again:
            self._wake_parked_if_ready()
            raise trio.WouldBlock from None
        except zmq.ZMQError as exc:
            raise _translate(exc, "send") from exc
        self._wake_parked_if_ready()

    async def send_multipart(self, frames: Sequence[SendableFrame], *, copy: bool = True) -> None:
        """Send one multipart message, waiting while the socket cannot take it (HWM, no peer)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        waited = retried = False
        while True:
            self._raise_if_closed()
            try:
                self._socket.send_multipart(frames, _NOBLOCK, copy=copy)
                break
            except zmq.Again:
                pass
            except zmq.ZMQError as exc:
                raise _translate(exc, "send") from exc
            # A ROUTER can report POLLOUT while one peer's pipe is full: retry once, then sleep.
            if not retried and self._ready_after_refresh(_POLLOUT):
                retried = True
                continue
            await self._wait(_POLLOUT)
            waited, retried = True, False
        await self._finish_operation(waited)

    @overload
    async def receive_multipart(self, *, copy: Literal[True] = True) -> list[bytes]: ...
    @overload
    async def receive_multipart(self, *, copy: Literal[False]) -> list[zmq.Frame]: ...
    async def receive_multipart(self, *, copy: bool = True) -> list[bytes] | list[zmq.Frame]:
        """Receive one multipart message. Prefer `receive_batch` on hot paths."""
        await trio.lowlevel.checkpoint_if_cancelled()
        waited = retried = False
        while True:
            self._raise_if_closed()
            try:
                message = self._socket.recv_multipart(_NOBLOCK, copy=copy)
                break
            except zmq.Again:
                pass
            except zmq.ZMQError as exc:
                raise _translate(exc, "receive") from exc
            if not retried and self._ready_after_refresh(_POLLIN):
                retried = True
                continue
            await self._wait(_POLLIN)
            waited, retried = True, False
        await self._finish_operation(waited)
        return message

    async def receive_batch(self, max_n: int) -> list[list[bytes]]:
        """Wait for at least one message, then take every message already queued (up to `max_n`).

        Returns 1..max_n messages in arrival order, yielding to other tasks exactly once.
        """
        if max_n < 1:
            raise ValueError(f"max_n must be at least 1, got {max_n}")
        await trio.lowlevel.checkpoint_if_cancelled()
        batch: list[list[bytes]] = []
        receive = self._socket.recv_multipart
        events = self._socket.get
        waited = retried = False
        while True:
            self._raise_if_closed()
            try:
                batch.append(receive(_NOBLOCK))
                # The batch ends where EVENTS (which processes pending commands, as a failed
                # recv does) has no message: no `zmq.Again` raised and caught per batch.
                while len(batch) < max_n and int(events(_EVENTS)) & _POLLIN:
                    batch.append(receive(_NOBLOCK))
                break
            except zmq.Again:
                pass
            except zmq.ZMQError as exc:
                raise _translate(exc, "receive") from exc
            if batch:  # (EVENTS said a message was queued: never, unless libzmq changes)
                break
            if not retried and self._ready_after_refresh(_POLLIN):
                retried = True
                continue
            await self._wait(_POLLIN)
            waited, retried = True, False
        await self._finish_operation(waited)
        return batch

    def close(self) -> None:
        """Close now, dropping unsent messages (linger 0), and remove our ipc socket files.

        Idempotent. Tasks waiting on this socket raise `trio.ClosedResourceError`.
        """
        if self._closed:
            return
        self._closed = True
        if self._fd_waiter is not None:
            trio.lowlevel.notify_closing(self._fd)
        self._parked.unpark_all()
        self._socket.close(linger=0)
        for path, inode in self._bound_ipc_paths:
            with contextlib.suppress(OSError):
                if os.lstat(path).st_ino == inode:  # not a file another process bound since
                    path.unlink()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> TrioZmqSocket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the ZMQ socket was closed")

    def _ready_after_refresh(self, flag: int) -> bool:
        """Read EVENTS (which processes pending commands) and report whether `flag` is set.

        Reading EVENTS may swallow the edge a parked task sleeps on, so wake it if its
        events became ready too.
        """
        try:
            events = int(self._socket.get(_EVENTS))
        except zmq.ZMQError as exc:
            raise _translate(exc, "poll") from exc
        if self._fd_waiter is not None and events & self._wanted_events:
            self._fd_waiter.cancel()
        return bool(events & flag)

    def _wake_parked_if_ready(self) -> None:
        """After an operation: free parked tasks whose edge the operation may have swallowed."""
        if self._fd_waiter is not None:
            self._ready_after_refresh(0)

    async def _finish_operation(self, waited: bool) -> None:
        self._wake_parked_if_ready()
        if not waited:  # waiting already yielded
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _wait(self, flag: int) -> None:
        """Sleep until the socket's state may have changed; the caller then retries."""
        self._wanted_events |= flag
        if self._fd_waiter is not None:
            await self._parked.park()
            return
        with trio.CancelScope() as scope:
            self._fd_waiter = scope
            try:
                await trio.lowlevel.wait_readable(self._fd)
            finally:
                self._fd_waiter = None
                self._wanted_events = 0
                self._parked.unpark_all()


def _translate(exc: zmq.ZMQError, action: str) -> Exception:
    if exc.errno in (zmq.ETERM, zmq.ENOTSOCK):
        return trio.ClosedResourceError(f"ZMQ {action} on a closed socket or terminated context")
    if exc.errno == zmq.EHOSTUNREACH:
        return BackendUnavailable(f"ZMQ {action}: the peer is not connected")
    return BackendError(f"ZMQ {action} failed: {exc.strerror}")


@contextlib.contextmanager
def private_ipc_dir() -> Iterator[Path]:
    """A fresh directory only this user can enter (mode 0700), removed with its contents."""
    parent = tempfile.gettempdir()
    if len(parent) > len(_SHORT_TEMP_PARENT) + 20 and os.path.isdir(_SHORT_TEMP_PARENT):
        parent = _SHORT_TEMP_PARENT
    directory = Path(tempfile.mkdtemp(prefix="smgt-", dir=parent))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def ipc_address(directory: Path, name: str) -> str:
    """`ipc://<directory>/<name>`, refusing paths the kernel would reject or truncate."""
    path = os.fsencode(directory / name)
    if len(path) > IPC_PATH_MAX_BYTES:
        raise ConfigError(
            f"ipc path {os.fsdecode(path)!r} is {len(path)} bytes; the limit is "
            f"{IPC_PATH_MAX_BYTES} (use a shorter directory, e.g. private_ipc_dir())"
        )
    return f"ipc://{os.fsdecode(path)}"


def _filesystem_ipc_path(address: str) -> Path | None:
    """The socket file behind an ipc address; None for other transports and abstract names."""
    if not address.startswith("ipc://"):
        return None
    path = address.removeprefix("ipc://")
    if not path or path.startswith("@") or path == "*":
        return None
    return Path(path)


def _remove_stale_ipc_socket(address: str, path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"cannot bind {address}: the path exists and is not a socket")
    if _unix_socket_is_live(path):
        raise ConfigError(f"cannot bind {address}: another live process is bound to it")
    path.unlink()


def _unix_socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except BlockingIOError:
        return True  # backlog full: someone is listening
    finally:
        probe.close()
    return True


def any_port(address: str) -> str:
    """libzmq spells "pick a port" as `*`; accept the conventional 0 as well."""
    if address.startswith("tcp://") and address.endswith(":0"):
        return address[:-1] + "*"
    return address


def data_bind_addresses(address: str) -> tuple[str, str]:
    """The input and output bind addresses for a data address: `ipc://BASE` gives
    `BASE-in.sock`/`BASE-out.sock`; `tcp://HOST:0` two picked ports; `tcp://HOST:PORT` PORT, PORT+1."""
    if address.startswith("ipc://"):
        return f"{address}-in.sock", f"{address}-out.sock"
    if address.startswith("tcp://"):
        host, _, port = address.removeprefix("tcp://").rpartition(":")
        if port in ("0", "*"):
            return f"tcp://{host}:*", f"tcp://{host}:*"
        if port.isdigit() and 0 < int(port) < 65535:
            return f"tcp://{host}:{port}", f"tcp://{host}:{int(port) + 1}"
    raise ConfigError(f"data_address must be ipc://BASE or tcp://HOST:PORT, got {address!r}")


def bind_engine_socket(
    stack: contextlib.ExitStack | contextlib.AsyncExitStack,
    context: zmq.Context[zmq.Socket[bytes]],
    kind: int,
    address: str,
) -> tuple[TrioZmqSocket, str]:
    """A ROUTER or PULL the engines dial, bound to `address` (the bound address is returned),
    closed with `stack`. Unbounded queues (a ROUTER at its HWM drops silently); a ROUTER
    refuses unroutable sends and lets a restarted engine reuse its identity (docs/wire.md §A.1)."""
    socket = engine_socket(stack, context, kind)
    return socket, socket.bind(address)


def engine_socket(
    stack: contextlib.ExitStack | contextlib.AsyncExitStack,
    context: zmq.Context[zmq.Socket[bytes]],
    kind: int,
) -> TrioZmqSocket:
    """A ROUTER or PULL for engines to dial, with the options of `bind_engine_socket`, not yet
    bound (`zmq_adopted.py` binds it over an inherited listening socket)."""
    raw = context.socket(kind)
    socket = stack.enter_context(TrioZmqSocket(raw))
    raw.setsockopt(zmq.SNDHWM, 0)
    raw.setsockopt(zmq.RCVHWM, 0)
    if kind == zmq.ROUTER:
        raw.setsockopt(zmq.ROUTER_MANDATORY, 1)
        raw.setsockopt(zmq.ROUTER_HANDOVER, 1)
    return socket
