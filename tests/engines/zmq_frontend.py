"""A minimal blocking ZMQ frontend for the reference engines' tests, and the engine subprocess.

The frontend binds what a gateway binds (handshake ROUTER on loopback tcp, input ROUTER and
output PULL on ipc in a private temporary directory), answers HELLO with INIT and collects
READY and the registration, then sends requests and reads outputs. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import zmq

from smg_trio.engines.launch import EngineCommand
from smg_trio.wire import vllm_zmq
from smg_trio.wire.vllm_zmq_outputs import EngineCoreOutputs, decode_outputs
from smg_trio.wire.zmq_transport import (
    HandshakeMessage,
    RequestType,
    decode_handshake,
    encode_abort,
    encode_init,
    engine_identity,
    is_engine_dead,
)

WAIT_SECONDS = 10.0


class Timeout(AssertionError):
    pass


@dataclass
class Handshake:
    hello: HandshakeMessage
    ready: HandshakeMessage
    hello_raw: dict[str, Any]
    registration: bytes


class Frontend:
    def __init__(self, engine_index: int = 0) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="smgt-", dir="/tmp"))
        self.directory.chmod(0o700)
        self.identity = engine_identity(engine_index)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.handshake = self._socket(zmq.ROUTER)
        self.handshake.bind("tcp://127.0.0.1:0")
        endpoint = self.handshake.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(endpoint, bytes)
        self.handshake_address = endpoint.decode()
        self.input_address = f"ipc://{self.directory}/in.sock"
        self.output_address = f"ipc://{self.directory}/out.sock"
        self.input = self._socket(zmq.ROUTER)
        self.input.bind(self.input_address)
        self.output = self._socket(zmq.PULL)
        self.output.bind(self.output_address)
        self._call_id = 0

    def _socket(self, kind: int) -> zmq.Socket[bytes]:
        socket = self.context.socket(kind)
        socket.setsockopt(zmq.SNDHWM, 0)
        socket.setsockopt(zmq.RCVHWM, 0)
        socket.setsockopt(zmq.LINGER, 0)
        return socket

    def close(self) -> None:
        self.context.destroy(linger=0)
        shutil.rmtree(self.directory, ignore_errors=True)

    def accept(self) -> Handshake:
        """HELLO → INIT, then READY and the registration in whatever order they come."""
        identity, hello_payload = _recv(self.handshake)
        assert identity == self.identity
        hello = decode_handshake(hello_payload)
        assert hello.status == "HELLO"
        init = encode_init([self.input_address], [self.output_address])
        self.handshake.send_multipart([identity, init])
        ready: HandshakeMessage | None = None
        registration: bytes | None = None
        deadline = time.monotonic() + WAIT_SECONDS
        poller = zmq.Poller()
        poller.register(self.handshake, zmq.POLLIN)
        poller.register(self.input, zmq.POLLIN)
        while ready is None or registration is None:
            remaining = deadline - time.monotonic()
            events = dict(poller.poll(max(0, int(remaining * 1000))))
            if not events:
                raise Timeout("no READY and registration from the engine")
            if self.handshake in events:
                frames = self.handshake.recv_multipart()
                assert frames[0] == identity
                assert len(frames) == 2
                ready = decode_handshake(frames[1])
                assert ready.status == "READY"
            if self.input in events:
                frames = self.input.recv_multipart()
                assert frames[0] == identity
                assert len(frames) == 2
                registration = frames[1]
        return Handshake(hello, ready, msgspec.msgpack.decode(hello_payload), registration)

    def send(self, kind: RequestType, payload: bytes) -> None:
        self.input.send_multipart([self.identity, kind.frame, payload])

    def add_vllm(self, request: vllm_zmq.EngineCoreRequest) -> None:
        self.send(RequestType.ADD, vllm_zmq.encode_request(request))

    def abort(self, *request_ids: str) -> None:
        self.send(RequestType.ABORT, encode_abort(request_ids))

    def receive(self, timeout: float = WAIT_SECONDS) -> list[bytes]:
        if not self.output.poll(int(timeout * 1000)):
            raise Timeout(f"no output within {timeout} s")
        return self.output.recv_multipart()

    def receive_vllm(self, timeout: float = WAIT_SECONDS) -> EngineCoreOutputs:
        frames = self.receive(timeout)
        assert not is_engine_dead(frames)
        return decode_outputs(frames)

    def quiet_for(self, seconds: float) -> bool:
        return not self.output.poll(int(seconds * 1000))

    def utility(self, method: str, *args: Any) -> tuple[str | None, Any]:
        """(failure message, value) of a UTILITY call; step outputs meanwhile are dropped."""
        self._call_id += 1
        call = vllm_zmq.UtilityCall(client_index=0, call_id=self._call_id, method=method, args=args)
        self.send(RequestType.UTILITY, vllm_zmq.encode_utility_call(call))
        deadline = time.monotonic() + WAIT_SECONDS
        while (
            reply := decode_outputs(self.receive(deadline - time.monotonic()))
        ).utility_output is None:
            pass
        answer = reply.utility_output
        assert answer.call_id == self._call_id
        return answer.failure_message, None if answer.result is None else answer.result[1]

    def counters(self) -> dict[str, int]:
        failure, value = self.utility("smg_trio_counters")
        assert failure is None
        assert isinstance(value, dict)
        return value


def _recv(socket: zmq.Socket[bytes]) -> list[bytes]:
    if not socket.poll(int(WAIT_SECONDS * 1000)):
        raise Timeout("nothing arrived on the handshake socket")
    return socket.recv_multipart()


def engine_command(wire: str, handshake: str, *flags: str) -> list[str]:
    return EngineCommand(wire, handshake=handshake, extra=flags).argv()


@contextlib.contextmanager
def running_engine(
    wire: str, *flags: str, frontend: Frontend | None = None
) -> Iterator[tuple[Frontend, Handshake, subprocess.Popen[bytes]]]:
    """A frontend, an engine subprocess dialing it, and the finished handshake."""
    own = frontend or Frontend()
    process = subprocess.Popen(
        engine_command(wire, own.handshake_address, *flags),
        stdout=subprocess.DEVNULL,
    )
    try:
        yield own, own.accept(), process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(5)
        own.close()


def stop_engine(process: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> float:
    """Signal the engine and return how long it took to exit (it must exit with status 0)."""
    started = time.monotonic()
    process.send_signal(sig)
    assert process.wait(5) == 0
    return time.monotonic() - started


def collect_until(
    receive: Callable[[], EngineCoreOutputs], done: Callable[[Sequence[EngineCoreOutputs]], bool]
) -> list[EngineCoreOutputs]:
    messages: list[EngineCoreOutputs] = []
    while not done(messages):
        messages.append(receive())
    return messages
