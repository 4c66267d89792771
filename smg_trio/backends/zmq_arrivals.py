"""I/O. How engines arrive at a ZMQ backend (docs/wire.md §A.3): the two socket owners that take
their handshake and their registration.

- handshake ROUTER: HELLO -> INIT (the data addresses), READY; a second HELLO from an identity
  is a restarted engine;
- registrations: the input ROUTER's only incoming messages. With one process they complete a
  handshake; as one of several processes (`ZmqClient`, docs/processes.md §3) there is no
  handshake socket here, a registration is the engine's HELLO and READY, and it is kept for a
  sibling that restarts; likewise, not kept, under `vllm serve`'s front-end hook
  (zmq_adopted.py), where vLLM did the handshake.
"""

from __future__ import annotations

import logging

from smg_trio.backends.zmq_clients import ZmqClient, save_registration
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.backends.zmq_socket import TrioZmqSocket
from smg_trio.errors import BackendError
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.zmq_transport import encode_init, engine_index_of

logger = logging.getLogger(__name__)


async def serve_handshake(
    registry: EngineRegistry, handshake: TrioZmqSocket | None, inputs: str, outputs: str
) -> None:
    """Answer HELLO with INIT naming `inputs` and `outputs`; record READY. Returns at once
    without a handshake socket (the supervisor answers it, zmq_clients.py)."""
    if handshake is None:
        return
    init = encode_init([inputs], [outputs])
    while True:
        frames = await handshake.receive_multipart()
        engine = registry.on_handshake(frames)
        if engine is None:
            continue
        try:
            await handshake.send_multipart([engine.identity, init])
        except BackendError as exc:  # it hung up right after HELLO; it will dial again
            logger.warning("engine %d: INIT not sent: %s", engine.index, exc.message)
            engine.said_hello = False


async def serve_registrations(
    registry: EngineRegistry,
    runtime: Runtime,
    inputs: TrioZmqSocket,
    client: ZmqClient | None,
    *,
    hello_first: bool = True,
) -> None:
    """Own the input ROUTER's receiving side: every message on it is a registration. Without
    `hello_first` (no handshake socket here: one of several processes, or sockets inherited from
    `vllm serve`, zmq_adopted.py) a registration is the engine's HELLO and READY."""
    while True:
        frames = await inputs.receive_multipart()
        if hello_first:
            registry.on_registration(runtime, frames)
        elif registry.on_client_registration(runtime, frames) and client is not None:
            save_registration(client.registrations, engine_index_of(frames[0]), frames[1])
