"""I/O. The gateway's client for one engine's gRPC service (SGLang, vLLM, TokenSpeed, MLX,
TRT-LLM; docs/wire.md §C): grpclib on the process's asyncio bridge, events handed into trio.

One grpclib `Channel` per engine, created on the bridge's loop and reused by every call;
grpclib reconnects lazily, so after an engine restart the next call dials again. Each engine
request (choice) is one server-streaming Generate call running as one asyncio task; its
responses are parsed on the loop and pushed, with the task's outcome, through ONE coalescing
`TrioHandoff` per backend, whose trio side maps them onto the open streams:

- chunks become `TokenDelta`s; completion tokens are counted here from the chunks, because
  the engines disagree on what the complete message counts (grpc_responses.py);
- a complete message becomes `ChoiceFinished` (after any tokens only it carried); "abort" and
  "error" finishes, and every gRPC status, become `EngineRejected` (grpc_services.py);
- leaving `open_stream` before a choice finished cancels its task (grpclib sends RST_STREAM)
  AND sends the Abort RPC, shielded and bounded by the in-flight table (in_flight.py, which
  decides what is unfinished); a finished choice is never aborted. The block is left only
  after every task of the stream has ended on the loop.

A pooling model's inputs are unary Embed calls instead (vLLM, SGLang; `grpc_embed_calls.py`),
awaited by the caller's task: cancelling it cancels the call and sends the Abort RPC.

Readiness (`grpc_readiness.py`): a HealthCheck every `health_period_s`, bounded by
`health_timeout_s`; a passing one fetches model/server info on the way to ready. A lost
connection, or silence for `watchdog_period_s` with calls in flight (`engine_silence_s` while
a first token is awaited), is engine death: every stream fails with `EngineDead` and no Abort
is sent; a check that passes again takes it back.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, TypeAlias

import outcome
import trio

from smg_trio.backends.asyncio_bridge import (
    AsyncioBridge,
    HandoffStatistics,
    TrioHandoff,
    open_asyncio_bridge,
)
from smg_trio.backends.base import BackendStatistics, EngineStatus
from smg_trio.backends.declared_model import DeclaredModel
from smg_trio.backends.event_stream import EngineEventStream, InlineBatches
from smg_trio.backends.grpc_calls import GrpcCall, apply_response, failure_of
from smg_trio.backends.grpc_embed_calls import EmbedCalls
from smg_trio.backends.grpc_readiness import EngineReadiness
from smg_trio.backends.grpc_services import (
    EngineInfo,
    LoopClient,
    generate_message,
    open_loop_client,
    parse_address,
)
from smg_trio.backends.in_flight import ENGINE_SILENCE_S, WATCHDOG_PERIOD_S, InFlightTable
from smg_trio.backends.trace_context import outgoing_trace_headers
from smg_trio.core.finalize import Finalized
from smg_trio.errors import BackendError, BackendUnavailable, ConfigError, EngineDead
from smg_trio.neutral.capabilities import require_adapter
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.wire.grpc_responses import GrpcChunk, GrpcComplete, GrpcEvent

logger = logging.getLogger(__name__)

HEALTH_PERIOD_S: Final = 1.0
"""A killed engine refuses the next check at once: out of rotation within ~1 s, idle or not
(docs/resilience.md §1)."""
HEALTH_TIMEOUT_S: Final = 5.0

_Handed: TypeAlias = tuple[GrpcCall, GrpcEvent | outcome.Outcome[None]]


class GrpcBackend:
    """A client for one engine's gRPC service. Get one with `open_grpc_backend`."""

    def __init__(
        self,
        client: LoopClient,
        bridge: AsyncioBridge,
        runtime: Runtime,
        *,
        health_period_s: float,
        health_timeout_s: float,
        declared: DeclaredModel | None = None,
    ) -> None:
        self.runtime: Final = runtime
        self._declared = declared
        self._refusal: str | None = None  # why its engine shows another model (logged once)
        self.wire: Final = Wire.GRPC
        self._client = client
        self._bridge = bridge
        self.address = client.address
        self._health_period_s = health_period_s
        self._health_timeout_s = health_timeout_s
        self._handoff: TrioHandoff[_Handed] = TrioHandoff(self._deliver)
        # The one engine is known by its address.
        self._in_flight: InFlightTable[str, GrpcCall] = InFlightTable((client.address,))
        self._inline = InlineBatches()  # flushed after each hand-off (docs/performance.md §2)
        self._protocol_errors = 0
        self._info: EngineInfo | None = None
        self._readiness = EngineReadiness(f"{runtime.value} engine at {client.address}")
        self._embeds = EmbedCalls(client, bridge, self._readiness, self._judge_failure)

    @asynccontextmanager
    async def open_stream(self, finalized: Finalized) -> AsyncIterator[EngineEventStream]:
        """Start one Generate call per engine request of `finalized`; yield their events.

        Raises before anything is sent: `UnsupportedRuntime` if `finalized` is for another
        runtime or wire, `BackendUnavailable` if the engine is not ready, `ClientError` for a
        request the engine would refuse (prompt too long, token id outside the vocabulary,
        string stops for SGLang). Leaving early cancels and aborts (module docstring).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        stream, calls = self._start_stream(finalized)
        async with self._in_flight.hold(stream, calls, self._leave) as events:
            yield events

    async def pool(self, request: PoolingRequest) -> PooledOutput:
        """One input of a pooling request as one Embed call (the `Pooler` seam,
        docs/pooling.md §1; grpc_embed_calls.py): vLLM and SGLang, task embed with the model's
        defaults only. Cancelling the caller cancels the call and aborts it."""
        engine_request_id = self._in_flight.new_engine_request_id(request.request_id, ())
        return await self._embeds.pool(engine_request_id, request, self._info)

    async def wait_ready(self) -> None:
        """Return once a health check passed; the caller bounds the wait."""
        await self._readiness.wait_ready()

    def statistics(self) -> BackendStatistics:
        ready = self._readiness.ready
        max_len = None if self._info is None else self._info.max_model_len
        in_flight = len(self._in_flight.requests) + self._embeds.in_flight
        status = EngineStatus(
            index=0,
            ready=ready,
            max_model_len=max_len,
            in_flight=in_flight,
            version="" if self._info is None else self._info.version,
            dead_reason=self._readiness.reason,
        )
        return BackendStatistics(
            runtime=self.runtime,
            wire=Wire.GRPC,
            ready=ready,
            max_model_len=max_len if ready else None,
            open_streams=self._in_flight.open_streams,
            in_flight=in_flight,
            engines=(status,),
            protocol_errors=self._protocol_errors,
            engine_deaths=self._in_flight.engine_deaths,
        )

    def handoff_statistics(self) -> HandoffStatistics:
        """Batches and items handed from the loop thread into trio so far (bench, debugging)."""
        return dataclasses.replace(self._handoff.stats)

    # --- opening and leaving streams -----------------------------------------------------------

    def _start_stream(self, finalized: Finalized) -> tuple[EngineEventStream, list[GrpcCall]]:
        """Build every request first (a ClientError leaves nothing behind), then start them."""
        in_flight = self._in_flight
        in_flight.admit(finalized, self.runtime, Wire.GRPC)
        if not self._readiness.ready:
            raise BackendUnavailable(
                f"the {self.runtime.value} engine at {self.address} is not ready: "
                f"{self._readiness.reason or 'no health check has passed yet'}"
            )
        service = self._client.service
        planned: dict[str, tuple[int, int, Any]] = {}
        for request in finalized.requests:
            engine_request_id = in_flight.new_engine_request_id(request.request_id, planned)
            message = generate_message(service, request, engine_request_id, self._info)
            planned[engine_request_id] = (request.choice_index, len(request.prompt_ids), message)
        stream = in_flight.new_stream(tuple(planned), self._inline)
        trace_metadata = outgoing_trace_headers.get()  # the request's trace, when traced
        calls = []
        for engine_request_id, (choice_index, prompt_tokens, message) in planned.items():
            call = GrpcCall(
                engine_request_id=engine_request_id,
                choice_index=choice_index,
                engine=self.address,
                stream=stream,
                prompt_tokens=prompt_tokens,
                cumulative_complete=service.cumulative_complete,
            )
            in_flight.add(call)
            call.task = self._bridge.start_soon(
                self._client.generate,
                message,
                self._pusher(call),
                trace_metadata,
                on_done=self._pusher(call),
            )
            calls.append(call)
        return stream, calls

    def _pusher(self, call: GrpcCall) -> Callable[[GrpcEvent | outcome.Outcome[None]], None]:
        """What the loop thread calls with the call's events, and with its task's outcome."""
        push = self._handoff.push

        def push_for_call(item: GrpcEvent | outcome.Outcome[None]) -> None:
            push((call, item))

        return push_for_call

    async def _leave(self, calls: Sequence[GrpcCall], unfinished: Sequence[GrpcCall]) -> None:
        """Cancel and Abort the unfinished calls; wait for every task of `calls` (the in-flight
        table shields and bounds this; at its deadline every task left is cancelled)."""
        _cancel_tasks(unfinished)  # RST_STREAM goes out before the Abort RPC (FIFO on the loop)
        try:
            if unfinished and not self._readiness.dead:
                ids = [call.engine_request_id for call in unfinished]
                try:
                    await self._bridge.run(self._client.abort, ids)
                except (BackendError, trio.ClosedResourceError) as exc:
                    logger.warning("Abort of %s failed: %s", ids, exc)
            for call in calls:
                await call.task_done.wait()
        finally:
            _cancel_tasks(calls)  # a no-op unless the grace ran out

    async def _shut_down(self) -> None:
        """Fail every open stream, cancel and abort its calls, wait for the tasks (bounded)."""
        await self._in_flight.close("the gRPC backend is shutting down", self._leave)

    # --- the trio side of the hand-off ---------------------------------------------------------

    def _deliver(self, batch: list[_Handed]) -> None:
        """Apply a batch from the loop, in order. Runs in trio from the hand-off's wake-up."""
        now = trio.current_time()
        in_flight = self._in_flight
        in_flight.heard_from(self.address, now)
        try:
            for call, item in batch:
                if isinstance(item, GrpcChunk | GrpcComplete):
                    self._readiness.engine_answered(now)
                    if call.live:
                        apply_response(in_flight, call, item)
                    continue
                call.task_done.set()
                if call.live:
                    self._call_failed(call, failure_of(call, item))
        finally:  # what was applied reaches its requests even if an item raised (a bug)
            self._inline.flush()  # the batch's events to the requests parked for them

    def _call_failed(self, call: GrpcCall, error: BackendError) -> None:
        """The call ended before its choice finished: fail its stream; judge the engine."""
        self._in_flight.fail(call, error)
        self._judge_failure(error)

    def _judge_failure(self, error: BackendError) -> None:
        """What a failed call (Generate or Embed) says about the engine."""
        if isinstance(error, EngineDead):
            self._engine_died(error.message)
        elif error.status == 503:  # unreachable or UNAVAILABLE: out until a check passes
            self._readiness.take_out(error.message)
        if error.status == 502:
            self._protocol_errors += 1

    # --- readiness and liveness ---------------------------------------------------------------

    def _engine_died(self, reason: str) -> None:
        """Fail every call with EngineDead (no Abort: nobody is listening); out until healthy."""
        message = f"the {self.runtime.value} engine at {self.address} is dead: {reason}"
        _cancel_tasks(self._in_flight.fail_engine(self.address, message))
        self._readiness.died(reason)

    async def _watch_health(self) -> None:
        while True:
            await self._check_health()
            await trio.sleep(self._health_period_s)

    async def _check_health(self) -> None:
        readiness = self._readiness
        info = None
        started = trio.current_time()
        try:
            with trio.fail_after(self._health_timeout_s):
                healthy, message = await self._bridge.run(self._client.health)
                if healthy and (not readiness.ready or self._info is None):
                    info = await self._bridge.run(self._client.info)
        except trio.TooSlowError:
            readiness.check_timed_out(started, self._health_timeout_s)
        except BackendError as exc:
            readiness.take_out(f"health check failed: {exc.message}")
        else:
            if not healthy:
                readiness.take_out(f"the engine reports itself unhealthy: {message!r}")
                return
            if info is not None and self._refused(info):
                return
            if info is not None:
                self._info = info
            readiness.check_passed(info)

    def _refused(self, info: EngineInfo) -> bool:
        """The engine shows another model than its worker's (backends/declared_model.py):
        out, one error line; checked again at the next health check (it may be replaced)."""
        declared = self._declared
        refusal = (
            None
            if declared is None
            else declared.refusal(max_model_len=info.max_model_len, name=info.served_model_name)
        )
        if refusal is not None:
            if refusal != self._refusal:
                logger.error(
                    "the %s engine at %s is refused: %s", self.runtime.value, self.address, refusal
                )
            self._readiness.take_out(f"refused: {refusal}")
        self._refusal = refusal
        return refusal is not None


def _cancel_tasks(calls: Sequence[GrpcCall]) -> None:
    for call in calls:
        if call.task is not None and not call.task_done.is_set():
            call.task.cancel()


@asynccontextmanager
async def open_grpc_backend(
    *,
    runtime: Runtime,
    address: str,
    tls: bool | ssl.SSLContext = False,
    health_period_s: float = HEALTH_PERIOD_S,
    health_timeout_s: float = HEALTH_TIMEOUT_S,
    watchdog_period_s: float = WATCHDOG_PERIOD_S,
    engine_silence_s: float = ENGINE_SILENCE_S,
    declared: DeclaredModel | None = None,
) -> AsyncIterator[GrpcBackend]:
    """A client for the engine at `address`, with its health and silence watchers running.

    `runtime`: which engine's service it speaks (never guessed). `address`: `host:port`.
    `tls`: True for TLS with grpclib's default context (ALPN h2), or an `ssl.SSLContext`.
    The engine need not be up yet: `wait_ready()` returns once a health check passed. On exit
    every open stream fails with `BackendUnavailable`, its calls are cancelled and aborted,
    and the channel is closed.
    """
    require_adapter(runtime, Wire.GRPC)
    host, port = parse_address(address)
    for name, value in (
        ("health_period_s", health_period_s),
        ("health_timeout_s", health_timeout_s),
        ("watchdog_period_s", watchdog_period_s),
        ("engine_silence_s", engine_silence_s),
    ):
        if not value > 0:
            raise ConfigError(f"{name} must be positive, got {value}")
    async with open_asyncio_bridge() as bridge:
        client = await bridge.run(open_loop_client, runtime, host, port, tls)
        backend = GrpcBackend(
            client,
            bridge,
            runtime,
            health_period_s=health_period_s,
            health_timeout_s=health_timeout_s,
            declared=declared,
        )
        try:
            async with backend._in_flight.serving(
                [backend._watch_health],
                watchdog_period_s=watchdog_period_s,
                engine_silence_s=engine_silence_s,
                engine_silent=lambda _address, reason: backend._engine_died(reason),
                shut_down=backend._shut_down,
            ):
                yield backend
        finally:
            backend._handoff.close()
            with trio.CancelScope(shield=True):
                await bridge.run(client.close)
