"""I/O. Several gateway processes as clients of the same ZMQ engines, as vLLM's
`--api-server-count` front ends are (docs/processes.md §3, docs/wire.md §A.1).

- The supervisor answers every engine's handshake (`answer_handshakes`): one INIT lists each
  process's input and output address, so the engine dials every process, registers on every
  input, and answers on `outputs[client_index]`.
- Process k binds `inputs[k]` and `outputs[k]` (`ZmqClient`) and stamps `client_index = k` on
  its ADDs and UTILITY calls; it has no handshake socket, so an engine's registration on its
  input is, for it, the engine's HELLO and READY.
- A restarted process rebinds the same two addresses: the engine's sockets reconnect on their
  own, but an engine registers only once per start, so every process keeps the registrations
  it received in a directory of the run (`save_registration`), and a restarted one reads them
  (`saved_registrations`) and takes the engine back once it answers a probe.
"""

from __future__ import annotations

import logging
import os
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio
import zmq

from smg_trio.backends.zmq_lifetime import open_zmq_context
from smg_trio.backends.zmq_socket import bind_engine_socket, ipc_address
from smg_trio.errors import BackendError, BackendProtocolError
from smg_trio.wire.zmq_transport import (
    HELLO,
    READY,
    decode_handshake,
    encode_init,
    engine_index_of,
)

logger = logging.getLogger(__name__)

_REGISTRATION_SUFFIX: Final = ".registration"


@dataclass(frozen=True)
class ZmqClient:
    """Gateway process `index` among several, for one ZMQ worker."""

    index: int  # client_index: INIT's inputs[index] and outputs[index] are this process's
    input_address: str
    output_address: str
    registrations: Path  # where the worker's engine registrations are kept for a restart


def client_addresses(run_dir: Path, worker: int, count: int) -> tuple[list[str], list[str]]:
    """Every process's input and output address for worker number `worker` (ipc, in the run's
    owner-only directory): what INIT lists, in client_index order."""
    inputs = [ipc_address(run_dir, f"w{worker}-c{k}-in.sock") for k in range(count)]
    outputs = [ipc_address(run_dir, f"w{worker}-c{k}-out.sock") for k in range(count)]
    return inputs, outputs


def registrations_dir(run_dir: Path, worker: int) -> Path:
    return run_dir / f"w{worker}-registrations"


def zmq_client(run_dir: Path, worker: int, count: int, index: int) -> ZmqClient:
    inputs, outputs = client_addresses(run_dir, worker, count)
    return ZmqClient(index, inputs[index], outputs[index], registrations_dir(run_dir, worker))


def save_registration(directory: Path, engine_index: int, payload: bytes) -> None:
    """Keep an engine's registration map for a process that restarts (replaced atomically: the
    engine sends the same map to every process, and any of them may write it)."""
    directory.mkdir(mode=0o700, exist_ok=True)
    final = directory / f"{engine_index}{_REGISTRATION_SUFFIX}"
    partial = directory / f"{engine_index}.{os.getpid()}.tmp"
    partial.write_bytes(payload)
    partial.replace(final)


def saved_registrations(directory: Path) -> dict[int, bytes]:
    """The registrations kept so far, by engine index (none before any engine registered)."""
    if not directory.is_dir():
        return {}
    saved = {}
    for path in directory.glob(f"*{_REGISTRATION_SUFFIX}"):
        name = path.name.removesuffix(_REGISTRATION_SUFFIX)
        if name.isdigit():
            saved[int(name)] = path.read_bytes()
    return saved


async def answer_handshakes(
    address: str,
    inputs: list[str],
    outputs: list[str],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The supervisor's handshake ROUTER for one worker: bind `address` (reported), answer every
    HELLO with one INIT naming every process's sockets; READY is only logged (each process
    learns that an engine is ready from its registration). Runs until cancelled."""
    init = encode_init(inputs, outputs)
    async with AsyncExitStack() as stack:
        context = await stack.enter_async_context(open_zmq_context())
        router, bound = bind_engine_socket(stack, context, zmq.ROUTER, address)
        task_status.started(bound)
        while True:
            frames = await router.receive_multipart()
            try:
                if len(frames) != 2:
                    raise BackendProtocolError(f"a handshake has 2 frames, got {len(frames)}")
                index = engine_index_of(frames[0])
                message = decode_handshake(frames[1])
            except BackendProtocolError as exc:
                logger.warning("dropped a handshake message: %s", exc)
                continue
            if message.status == HELLO:
                logger.info("engine %d said HELLO: INIT for %d processes", index, len(inputs))
                try:
                    await router.send_multipart([frames[0], init])
                except BackendError as exc:  # it hung up right after HELLO; it will dial again
                    logger.warning("engine %d: INIT not sent: %s", index, exc.message)
            elif message.status == READY:
                logger.info("engine %d said READY", index)
