"""I/O. A reference engine's side of the ZMQ handshake (docs/wire.md §A.3, §B.1) and the data sockets it
leaves connected: dial the frontend's handshake ROUTER, say HELLO, take INIT, connect the input
DEALERs (which register) and output PUSHes, say READY, in the order the engine's wire uses.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import zmq

from smg_trio.engines.wire_adapter import WireAdapter
from smg_trio.wire.zmq_transport import ENGINE_CORE_DEAD, decode_init, engine_identity

logger = logging.getLogger(__name__)

HANDSHAKE_LINGER_MS = 5000
OUTPUT_LINGER_MS = 2000  # vLLM uses 4000; shorter keeps SIGTERM-to-exit well under 5 s


@dataclass(frozen=True)
class HandshakeTarget:
    handshake_address: str  # tcp://HOST:PORT of the frontend's handshake ROUTER
    engine_index: int = 0  # the 2-byte identity on every socket
    data_addresses: tuple[str, str] | None = None
    """Input and output addresses to connect to without a handshake, as vLLM's engines do
    under `vllm serve`'s front-end hook, where vLLM's launcher did their handshake
    (docs/vllm-frontend.md §1); then `handshake_address` is unused."""


class EngineSockets:
    """The data-plane sockets an engine holds after the handshake."""

    def __init__(self, inputs: list[zmq.Socket[bytes]], outputs: list[zmq.Socket[bytes]]) -> None:
        self.inputs = inputs
        self.outputs = outputs

    def send_dead_sentinel(self) -> None:
        for output in self.outputs:
            try:
                output.send(ENGINE_CORE_DEAD, zmq.NOBLOCK)
            except zmq.ZMQError:
                logger.warning("could not queue the engine-dead sentinel")

    def close(self) -> None:
        for socket in self.inputs:
            socket.close(linger=0)
        for socket in self.outputs:
            socket.close(linger=OUTPUT_LINGER_MS)


def _socket(context: zmq.Context[zmq.Socket[bytes]], kind: int) -> zmq.Socket[bytes]:
    socket = context.socket(kind)
    socket.setsockopt(zmq.SNDHWM, 0)  # unbounded, as vLLM sets it: a ROUTER at HWM drops silently
    socket.setsockopt(zmq.RCVHWM, 0)
    return socket


def connect(
    context: zmq.Context[zmq.Socket[bytes]],
    adapter: WireAdapter,
    target: HandshakeTarget,
    sockets: EngineSockets,
) -> None:
    """HELLO → INIT → data sockets and READY, in the order the adapter's engine uses (docs/wire.md §A.3, §B.1).

    Data sockets are added to `sockets` as they are made, so the caller closes them on failure.
    """
    identity = engine_identity(target.engine_index)
    if target.data_addresses is not None:
        input_address, output_address = target.data_addresses
        _connect_outputs(context, sockets, [output_address])
        _connect_inputs(context, sockets, [input_address], identity, adapter)
        return
    handshake = _socket(context, zmq.DEALER)
    handshake.setsockopt(zmq.IDENTITY, identity)
    handshake.setsockopt(zmq.LINGER, HANDSHAKE_LINGER_MS)
    handshake.connect(target.handshake_address)
    try:
        handshake.send(adapter.hello())
        if not handshake.poll(int(adapter.handshake_timeout_seconds * 1000)):
            raise TimeoutError(f"no INIT from {target.handshake_address}")
        init = decode_init(handshake.recv_multipart()[-1])
        input_addresses, output_addresses = adapter.addresses(init.addresses)
        if adapter.ready_before_registration:
            handshake.send(adapter.ready())
            _connect_inputs(context, sockets, input_addresses, identity, adapter)
            _connect_outputs(context, sockets, output_addresses)
        else:
            _connect_outputs(context, sockets, output_addresses)
            _connect_inputs(context, sockets, input_addresses, identity, adapter)
            handshake.send(adapter.ready())
    except BaseException:
        handshake.close(linger=0)  # an unanswered HELLO must not hold up the exit
        raise
    handshake.close()  # lingers until READY is delivered


def _connect_inputs(
    context: zmq.Context[zmq.Socket[bytes]],
    sockets: EngineSockets,
    addresses: Sequence[str],
    identity: bytes,
    adapter: WireAdapter,
) -> None:
    for address in addresses:
        socket = _socket(context, zmq.DEALER)
        socket.setsockopt(zmq.IDENTITY, identity)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(address)
        socket.send(adapter.registration())
        sockets.inputs.append(socket)


def _connect_outputs(
    context: zmq.Context[zmq.Socket[bytes]], sockets: EngineSockets, addresses: Sequence[str]
) -> None:
    for address in addresses:
        socket = _socket(context, zmq.PUSH)
        socket.setsockopt(zmq.LINGER, OUTPUT_LINGER_MS)
        socket.connect(address)
        sockets.outputs.append(socket)
