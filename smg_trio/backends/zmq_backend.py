"""I/O. The gateway's client for vLLM EngineCore and TokenSpeed engines over ZMQ (docs/wire.md §A, §B).

We bind three sockets and the engines dial in: a handshake ROUTER (tcp), an input ROUTER and an
output PULL (private ipc dir by default). Each engine says HELLO, gets INIT with the data
addresses, registers on the input socket (max_model_len, version) and says READY; it is routed
requests only once both arrived. One task owns each direction of each socket:

- handshake: HELLO -> INIT, READY; a second HELLO from an identity is a restarted engine;
- registrations: receives on the input ROUTER (engines send nothing else there);
- writer (zmq_input_writer.py): sends on the input ROUTER what request tasks queue into a
  coalescing outbox, so opening or aborting a stream never waits on the socket (a new stream's
  ADD goes out from its own task when the writer is idle and the socket takes it at once);
- reader: drains the output PULL in batches and demultiplexes steps into per-stream mailboxes
  with `put_nowait`, so one slow consumer never stalls the others;
- watchdog: an engine with requests in flight that says nothing for `watchdog_period_s` is dead
  (sooner, `engine_silence_s`, while a first token or a probe answer is awaited);
- connection watcher and prober (zmq_liveness.py): disconnects and silence are probed.

What is in flight for which stream, and what leaving a stream aborts, is the registry's
`InFlightTable` (in_flight.py); this module sends the ADDs and ABORTs it decides on.

Decisions: `open_stream` fails fast with `BackendUnavailable` when no engine is ready (callers
that want to wait use `wait_ready()` under their own deadline). An engine-dead sentinel, silence,
or a lost input connection fails every stream on that engine with `EngineDead`, and the engine
stays out of rotation until it says HELLO again; the sentinel carries no identity, so it takes
every engine of this socket set out. An engine "abort" or "error" finish raises
`EngineRejected`. ADDs carry client_index 0, or this process's of several (docs/processes.md).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any, Final

import trio
import zmq

from smg_trio.backends.base import BackendStatistics
from smg_trio.backends.declared_model import DeclaredModel
from smg_trio.backends.event_stream import EngineEventStream, InlineBatches
from smg_trio.backends.in_flight import ENGINE_SILENCE_S, WATCHDOG_PERIOD_S
from smg_trio.backends.zmq_adds import StreamStarter
from smg_trio.backends.zmq_adopted import AdoptedListeners, adopt_engine_socket
from smg_trio.backends.zmq_arrivals import serve_handshake, serve_registrations
from smg_trio.backends.zmq_clients import ZmqClient, saved_registrations
from smg_trio.backends.zmq_engines import EngineSlot, RankPolicy, Route, check_settings
from smg_trio.backends.zmq_input_writer import InputWriter, Outgoing
from smg_trio.backends.zmq_lifetime import open_socket_monitor, open_zmq_context
from smg_trio.backends.zmq_liveness import MONITORED_EVENTS, PROBE_PERIOD_S, EngineProber
from smg_trio.backends.zmq_outputs import OutputReader
from smg_trio.backends.zmq_pooling import ZmqPooler
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.backends.zmq_socket import (
    TrioZmqSocket,
    any_port,
    bind_engine_socket,
    data_bind_addresses,
    ipc_address,
    private_ipc_dir,
)
from smg_trio.core.finalize import Finalized
from smg_trio.errors import BackendUnavailable, ConfigError
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.wire import vllm_zmq
from smg_trio.wire.zmq_transport import (
    RequestType,
    encode_abort,
)

logger = logging.getLogger(__name__)

OUTPUT_BATCH_MAX: Final = 256
"""Output messages demultiplexed per reader wake-up before yielding to other tasks."""


class ZmqBackend:
    """A bound ZMQ socket set serving `engine_count` engines of one runtime. See the module doc."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        engine_count: int,
        vocab_size: int | None,
        rank_policy: RankPolicy,
        sockets: tuple[TrioZmqSocket, TrioZmqSocket],  # input ROUTER, output PULL
        addresses: tuple[str, str, str],
        client: ZmqClient | None = None,
    ) -> None:
        self._runtime = runtime
        self._input, self._output = sockets
        self.handshake_address, self.input_address, self.output_address = addresses
        """The bound endpoints (ports resolved): what INIT tells the engines."""
        self._registry = EngineRegistry(engine_count, rank_policy)
        self._in_flight = self._registry.in_flight
        self._inline = InlineBatches()  # docs/performance.md §2
        self.client_index = 0 if client is None else client.index
        """INIT's outputs[client_index] is ours: stamped on every ADD and UTILITY call."""
        if client is not None:
            self._registry.strays = {}
            for index, payload in saved_registrations(client.registrations).items():
                self._registry.recover(runtime, index, payload)
        self._writer = InputWriter(self._input, self._registry)
        self._streams = StreamStarter(
            runtime=runtime,
            registry=self._registry,
            writer=self._writer,
            inline=self._inline,
            vocab_size=vocab_size,
            client_index=self.client_index,
            one_client=client is None,
        )
        self._outputs = OutputReader(runtime, self._registry, self._inline, self._writer.put)
        self._pooler = ZmqPooler(  # docs/pooling.md §2
            runtime, self._registry, self._writer, self._abort, vocab_size, self.client_index
        )

    def _queue_probe(self, engine: EngineSlot, frames: list[bytes]) -> None:
        self._writer.put(Outgoing(engine, frames, probe=True))

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def wire(self) -> Wire:
        return Wire.ZMQ

    @property
    def handshake_port(self) -> int | None:
        """The bound tcp port engines dial (`--data-parallel-rpc-port`); None for ipc."""
        if not self.handshake_address.startswith("tcp://"):
            return None
        return int(self.handshake_address.rsplit(":", 1)[1])

    @asynccontextmanager
    async def open_stream(self, finalized: Finalized) -> AsyncIterator[EngineEventStream]:
        """Send one ADD per engine request of `finalized`; yield their events; abort on leaving.

        Raises before sending anything: `UnsupportedRuntime` if `finalized` is for another
        runtime or wire, `BackendUnavailable` if no engine is ready, `ClientError` for a value
        the engine would refuse (prompt too long, token id outside the vocabulary, ...).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        stream, routes = self._streams.start(finalized)
        async with self._in_flight.hold(stream, routes, self._abort) as events:
            yield events

    async def pool(self, request: PoolingRequest) -> PooledOutput:
        """One pooling engine request's result; leaving first aborts it (zmq_pooling.py)."""
        return await self._pooler.pool(request)

    async def wait_ready(self, *, all_engines: bool = False) -> None:
        """Return once one engine (or every engine) is ready; the caller bounds the wait."""
        condition = all if all_engines else any
        while not condition(engine.ready for engine in self._registry.engines):
            await self._registry.readiness_changed.wait()
        await trio.lowlevel.checkpoint()

    async def call_utility(self, method: str, *args: Any, engine_index: int = 0) -> Any:
        """vLLM UTILITY call (docs/wire.md §A.9): run `method(*args)` on one engine, return its value.

        Raises `EngineRejected` with the engine's failure message, `EngineDead` if the engine
        dies first. The caller bounds the wait. A real TokenSpeed engine drops UTILITY frames
        (the call then waits for the caller's deadline); our reference TokenSpeed engine
        answers them in vLLM's shape, which is how tests read its counters.
        """
        engine = self._registry.engines[engine_index]
        if not engine.ready:
            raise BackendUnavailable(f"engine {engine_index} is not ready")
        call_id, call = self._registry.begin_call(engine)
        try:
            payload = vllm_zmq.encode_utility_call(
                vllm_zmq.UtilityCall(
                    client_index=self.client_index, call_id=call_id, method=method, args=args
                )
            )
            frames = [engine.identity, RequestType.UTILITY.frame, payload]
            self._writer.put(Outgoing(engine, frames))
            await call.done.wait()
        finally:
            self._registry.end_call(call_id)
        if call.error is not None:
            raise call.error
        return call.value

    async def call_utility_all(self, method: str, *args: Any) -> list[Any]:
        """`call_utility` on every engine at once; their values in engine order (vLLM's
        `call_utility_all_async`: what its front end does for a data-parallel group)."""
        values: list[Any] = [None] * len(self._registry.engines)

        async def call(index: int) -> None:
            values[index] = await self.call_utility(method, *args, engine_index=index)

        async with trio.open_nursery() as nursery:
            for index in range(len(values)):
                nursery.start_soon(call, index)
        return values

    def statistics(self) -> BackendStatistics:
        engines = self._registry.statuses()
        lengths = [e.max_model_len for e in engines if e.ready and e.max_model_len is not None]
        return BackendStatistics(
            runtime=self._runtime,
            wire=Wire.ZMQ,
            ready=any(e.ready for e in engines),
            max_model_len=min(lengths) if lengths else None,
            open_streams=self._in_flight.open_streams,
            in_flight=len(self._in_flight.requests),
            engines=engines,
            protocol_errors=self._registry.protocol_errors,
            engine_deaths=self._in_flight.engine_deaths,
        )

    async def _abort(self, _given_up: Sequence[Route], unfinished: Sequence[Route]) -> None:
        """Queue one ABORT per live engine for the unfinished routes whose ADD went out, and
        wait until the writer sent them (the in-flight table shields and bounds the wait)."""
        ids_by_engine: dict[EngineSlot, list[str]] = {}
        for route in unfinished:
            if route.add_sent and route.engine.dead_reason is None:
                ids_by_engine.setdefault(route.engine, []).append(route.engine_request_id)
        outgoing = [
            Outgoing(
                engine,
                [engine.identity, RequestType.ABORT.frame, encode_abort(ids)],
                sent=trio.Event(),
            )
            for engine, ids in ids_by_engine.items()
        ]
        for item in outgoing:
            self._writer.put(item)
        for item in outgoing:
            assert item.sent is not None
            await item.sent.wait()

    async def _shut_down(self) -> None:
        """Fail open streams and calls, and abort their engine requests."""
        reason = "the ZMQ backend is shutting down"
        self._registry.fail_calls(BackendUnavailable(reason))
        await self._in_flight.close(reason, self._abort)

    # --- socket owners (background tasks) ---------------------------------------------------

    async def _read_outputs(self) -> None:
        while True:
            batch = await self._output.receive_batch(OUTPUT_BATCH_MAX)
            self._outputs.apply(batch, trio.current_time())


@asynccontextmanager
async def open_zmq_backend(
    *,
    runtime: Runtime,
    handshake_address: str = "tcp://127.0.0.1:0",
    data_address: str | None = None,
    engine_count: int = 1,
    vocab_size: int | None = None,
    watchdog_period_s: float = WATCHDOG_PERIOD_S,
    engine_silence_s: float = ENGINE_SILENCE_S,
    probe_period_s: float = PROBE_PERIOD_S,
    rank_policy: RankPolicy = RankPolicy.LEAST_LOADED,
    client: ZmqClient | None = None,
    declared: DeclaredModel | None = None,
    adopted: AdoptedListeners | None = None,
) -> AsyncIterator[ZmqBackend]:
    """Bind the sockets, run the socket-owner tasks, and yield the engine client.

    `handshake_address`: `tcp://HOST:PORT` (port 0 picks one; read `handshake_port`) or ipc.
    `data_address`: None = a private ipc directory; `ipc://BASE` = `BASE-in.sock`/`BASE-out.sock`;
    `tcp://HOST:0` = two picked ports; `tcp://HOST:PORT` = PORT and PORT+1.
    `engine_count`: data-parallel engines (identities 0..count-1); TokenSpeed supports 1.
    `vocab_size`: token ids are checked against it before sending.
    `watchdog_period_s`, `engine_silence_s`, `probe_period_s`: docs/resilience.md §1–§2.
    `client`: this process is one of several (docs/processes.md §3): bind its own input and
    output (not `data_address`) and no handshake (`handshake_address` is only reported).
    `declared`: the model the worker serves; an engine registering another is refused
    (backends/declared_model.py).
    `adopted`: `vllm serve`'s listening input and output sockets, inherited (zmq_adopted.py):
    no handshake either; `engine_count` must be the count they carry.
    On exit every open stream fails with BackendUnavailable and its engine requests are aborted.
    """
    check_settings(
        runtime,
        engine_count,
        watchdog_period_s=watchdog_period_s,
        engine_silence_s=engine_silence_s,
        probe_period_s=probe_period_s,
    )
    if adopted is not None and (client is not None or adopted.engine_count != engine_count):
        raise ConfigError("adopted engine sockets: one client, and their own engine count")
    async with AsyncExitStack() as stack:
        context = await stack.enter_async_context(open_zmq_context())
        if client is not None:
            input_bind, output_bind = client.input_address, client.output_address
        elif data_address is None:
            directory = stack.enter_context(private_ipc_dir())
            input_bind, output_bind = ipc_address(directory, "in"), ipc_address(directory, "out")
        else:
            input_bind, output_bind = data_bind_addresses(data_address)
        # One of several processes: the supervisor answers the handshake (zmq_clients.py).
        handshake: tuple[TrioZmqSocket | None, str] = (None, handshake_address)
        if adopted is not None:  # vLLM did the handshake; it bound these (zmq_adopted.py)
            inputs = adopt_engine_socket(stack, context, zmq.ROUTER, adopted.input_fd)
            outputs = adopt_engine_socket(stack, context, zmq.PULL, adopted.output_fd)
            handshake = (None, inputs[1])
        else:
            if client is None:
                handshake = bind_engine_socket(
                    stack, context, zmq.ROUTER, any_port(handshake_address)
                )
            inputs = bind_engine_socket(stack, context, zmq.ROUTER, input_bind)
            outputs = bind_engine_socket(stack, context, zmq.PULL, output_bind)
        engine = ZmqBackend(
            runtime=runtime,
            engine_count=engine_count,
            vocab_size=vocab_size,
            rank_policy=rank_policy,
            sockets=(inputs[0], outputs[0]),
            addresses=(handshake[1], inputs[1], outputs[1]),
            client=client,
        )
        engine._registry.declared = declared
        monitor = stack.enter_context(open_socket_monitor(inputs[0], MONITORED_EVENTS))
        prober = EngineProber(
            engine._registry,
            engine._queue_probe,
            probe_period_s=probe_period_s,
            answers_probes=runtime is Runtime.VLLM,
            client_index=engine.client_index,
        )
        socket_owners: list[Callable[[], Awaitable[None]]] = [
            partial(serve_handshake, engine._registry, handshake[0], inputs[1], outputs[1]),
            partial(
                serve_registrations,
                engine._registry,
                runtime,
                inputs[0],
                client,
                hello_first=client is None and adopted is None,
            ),
            engine._writer.write_inputs,
            engine._read_outputs,
            partial(prober.watch_connections, monitor),
            prober.probe_periodically,
        ]
        async with engine._in_flight.serving(
            socket_owners,
            watchdog_period_s=watchdog_period_s,
            engine_silence_s=engine_silence_s,
            engine_silent=partial(engine._registry.engine_died, revivable=True),
            shut_down=engine._shut_down,
        ):
            yield engine
