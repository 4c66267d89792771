"""I/O. Engine sockets inherited already listening: `vllm serve`'s front-end hook
(docs/vllm-frontend.md §1; serving/vllm_frontend.py).

`vllm serve` with `VLLM_USE_RUST_FRONTEND=1` binds the engines' input and output listeners
itself (AF_UNIX stream sockets, listening, in the temp directory), starts the EngineCores, does
their start-up handshake, and passes the two listening fds to the front end it runs. The
engines then connect a DEALER to the input and a PUSH to the output, as in headless mode, and
the first message of each DEALER is its registration (EngineCoreReadyResponse). There is no
handshake socket on our side: a registration is, for us, the engine's HELLO and READY.

libzmq takes over a listening socket with `ZMQ_USE_FD` before `bind`; the bind address must be
the socket's own name (`ipc://PATH`, or `tcp://HOST:PORT` for a TCP listener), which we read
from the fd. The socket file belongs to vLLM, which unlinks it when it stops: we never do.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass

import zmq

from smg_trio.backends.zmq_socket import TrioZmqSocket, engine_socket
from smg_trio.errors import ConfigError


@dataclass(frozen=True)
class AdoptedListeners:
    """The engines' listening input and output sockets, inherited as file descriptors, and how
    many engines will connect to them (their identities are 0 .. engine_count - 1)."""

    input_fd: int
    output_fd: int
    engine_count: int = 1


def listener_address(fd: int) -> str:
    """The ZMQ endpoint naming the listening socket `fd` (ConfigError: not a listening stream
    socket of a family ZMQ can adopt). The fd stays open."""
    try:
        probe = socket.socket(fileno=fd)
    except OSError as exc:
        raise ConfigError(f"fd {fd} is not an open socket: {exc.strerror or exc}") from exc
    try:
        if probe.type != socket.SOCK_STREAM:
            raise ConfigError(f"fd {fd} is not a stream socket")
        if not probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise ConfigError(f"fd {fd} is not listening")
        name = probe.getsockname()
        if probe.family == socket.AF_UNIX and isinstance(name, str) and name:
            return f"ipc://{name}"
        if probe.family == socket.AF_INET:
            return f"tcp://{name[0]}:{name[1]}"
        if probe.family == socket.AF_INET6:
            return f"tcp://[{name[0]}]:{name[1]}"
        raise ConfigError(f"fd {fd}: a socket of family {probe.family!r} cannot be adopted")
    finally:
        probe.detach()  # the fd is handed to libzmq, not closed here


def adopt_engine_socket(
    stack: contextlib.ExitStack | contextlib.AsyncExitStack,
    context: zmq.Context[zmq.Socket[bytes]],
    kind: int,
    fd: int,
) -> tuple[TrioZmqSocket, str]:
    """A ROUTER or PULL (options as `bind_engine_socket`'s) listening on the inherited `fd`,
    and its endpoint; closed with `stack` (libzmq then closes the fd)."""
    address = listener_address(fd)
    adopted = engine_socket(stack, context, kind)
    raw = adopted.socket
    if address.startswith("tcp://["):
        raw.setsockopt(zmq.IPV6, 1)
    raw.setsockopt(zmq.USE_FD, fd)
    try:
        raw.bind(address)
    except zmq.ZMQError as exc:
        raise ConfigError(f"cannot adopt fd {fd} ({address}): {exc.strerror}") from exc
    return adopted, address
