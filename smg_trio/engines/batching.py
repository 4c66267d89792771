"""I/O. The reference engines' continuous-batching loop, shared by every ZMQ wire; the process
around it (signals, the handshake, exit codes) is `engines/engine_process.py`.

A real EngineCore is a blocking busy loop, and so is this one (plain pyzmq, no trio). Each
iteration drains every pending input frame (ADD / ABORT / UTILITY), admits waiting requests up
to `max_batch`, and, once `step_seconds` have passed since the last step, generates one token
for every active request and sends ONE message per output socket carrying all of them. While
idle it blocks in poll. SIGTERM/SIGINT wake the poll through a wakeup pipe and end the loop
cleanly; any other exception sends the ENGINE_CORE_DEAD sentinel (docs/wire.md §A.10) and exits 1.

Utility calls (vLLM's mechanism, docs/wire.md §A.9) are answered here for a few real method names plus
`smg_trio_counters`, which returns `Counters.snapshot()` so tests can read the engine's counters
through the normal sockets, and `smg_trio_received(id_part)`, which returns the sampling fields
the latest request whose id contains `id_part` arrived with as the wire adapter decoded them (`engines.received_log`), or None.
Both are test-only extensions no gateway sends.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

import zmq

from smg_trio.engines.handshake import OUTPUT_LINGER_MS, EngineSockets
from smg_trio.engines.kv_publisher import KvEventPublisher
from smg_trio.engines.prefix_cache import PrefixCache
from smg_trio.engines.received_log import ReceivedLog
from smg_trio.engines.wire_adapter import (
    BLOCK_SIZE,
    Abort,
    Aborted,
    ActiveRequest,
    Add,
    Command,
    Counters,
    Emission,
    EngineModel,
    Ignored,
    Load,
    OutputMessage,
    Pooled,
    Reject,
    Rejected,
    Utility,
    WireAdapter,
)
from smg_trio.engines.worker_extension import collective_rpc, load_worker
from smg_trio.wire.vllm_zmq_outputs import PrefixCacheStats

logger = logging.getLogger(__name__)

COUNTERS_METHOD = "smg_trio_counters"
RECEIVED_METHOD = "smg_trio_received"


@dataclass(frozen=True)
class EngineConfig:
    handshake_address: str
    engine_index: int = 0
    # Connect straight to these input and output addresses (no handshake: `vllm serve`'s
    # front-end hook, docs/vllm-frontend.md §1); None: the handshake at handshake_address.
    data_addresses: tuple[str, str] | None = None
    step_seconds: float = 0.0
    max_batch: int = 256
    # A prefix cache publishing vLLM's KV events there (docs/routing.md §9.4); None: no cache,
    # and nothing reported cached, as before.
    kv_events_endpoint: str | None = None
    kv_events_replay_endpoint: str | None = None
    kv_cache_blocks: int | None = None  # the cache's capacity; None: the model's GPU blocks
    # vLLM's stats logging (on unless `--disable-log-stats`): scheduler stats ride on the
    # step's outputs. Only the vLLM wire reads it.
    log_stats: bool = True
    # vLLM's --worker-extension-cls: methods `collective_rpc` can call (engines/worker_extension.py).
    worker_extension_cls: str | None = None


class KvEvents:
    """An engine's prefix cache and the publisher of its events."""

    def __init__(self, cache: PrefixCache, publisher: KvEventPublisher) -> None:
        self.cache = cache
        self.publisher = publisher


class BatchingLoop:
    def __init__(
        self,
        adapter: WireAdapter,
        model: EngineModel,
        sockets: EngineSockets,
        config: EngineConfig,
        wakeup_fd: int,
        kv_events: KvEvents | None = None,
    ) -> None:
        self.adapter = adapter
        self.kv_events = kv_events
        self.model = model
        self.sockets = sockets
        self.config = config
        self.counters = Counters()
        self.received = ReceivedLog()
        self.active: dict[str, ActiveRequest] = {}
        self.waiting: collections.OrderedDict[str, ActiveRequest] = collections.OrderedDict()
        self.stopping = False
        self._wakeup_fd = wakeup_fd
        self._poller = zmq.Poller()
        for socket in sockets.inputs:
            self._poller.register(socket, zmq.POLLIN)
        self._poller.register(wakeup_fd, zmq.POLLIN)
        if kv_events is not None and kv_events.publisher.replay is not None:
            self._poller.register(kv_events.publisher.replay, zmq.POLLIN)
        self._utilities: dict[str, Callable[[], Any]] = {
            COUNTERS_METHOD: self._counters,
            "get_supported_tasks": lambda: ["generate"],
            "is_sleeping": lambda: False,
            "list_loras": lambda: [],
            "reset_prefix_cache": self._reset_prefix_cache,
            "reset_mm_cache": self.adapter.reset_media,
        }
        self._lookups: dict[str, Callable[[str], Any]] = {RECEIVED_METHOD: self.received.latest}
        self._worker = load_worker(config.worker_extension_cls)

    def run(self) -> None:
        next_step = time.monotonic()
        while not self._stop_requested():
            busy = bool(self.active or self.waiting)
            timeout = math.ceil(max(0.0, next_step - time.monotonic()) * 1000) if busy else None
            ready = dict(self._poller.poll(timeout))
            if self._wakeup_fd in ready:
                _drain_pipe(self._wakeup_fd)
            self._drain_inputs()
            if self.kv_events is not None:
                self.kv_events.publisher.serve_replay()
            if self._stop_requested():
                break
            self._admit()
            if self.active and time.monotonic() >= next_step:
                self._step()
                next_step = time.monotonic() + self.config.step_seconds
        self._shut_down()

    def _stop_requested(self) -> bool:
        return self.stopping  # a method, so the signal handler's write is re-read every time

    def _drain_inputs(self) -> None:
        for socket in self.sockets.inputs:
            while True:
                try:
                    frames = socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle(self.adapter.parse(frames))

    def _handle(self, command: Command) -> None:
        match command:
            case Add(request, received):
                if request.request_id in self.active or request.request_id in self.waiting:
                    # Real vLLM dies on a duplicate in-flight id; an error output is kinder.
                    self._reject(Reject(request.request_id, request.client_index, "duplicate id"))
                    return
                self._check_client_index(request.client_index)
                self.counters.requests_added += 1
                self.waiting[request.request_id] = request
                if received is not None:
                    self.received.record(request.request_id, received)
            case Reject():
                self._reject(command)
            case Abort(request_ids):
                self.counters.abort_ids_received += len(request_ids)
                for request_id in request_ids:
                    removed = self.active.pop(request_id, None) or self.waiting.pop(
                        request_id, None
                    )
                    if removed is not None:
                        removed.aborted = True
                        self.counters.requests_aborted += 1
                        logger.debug(
                            "aborted %s after %d tokens",
                            request_id,
                            len(removed.generation.output_ids),
                        )
            case Utility(client_index, call_id, method, args):
                self._answer_utility(client_index, call_id, method, args)
            case Ignored(reason):
                logger.warning("dropped an input frame: %s", reason)
            case _:
                assert_never(command)
        self._update_gauges()

    def _check_client_index(self, client_index: int) -> None:
        if not 0 <= client_index < len(self.sockets.outputs):
            # vLLM's output thread dies on this: the engine is dead.
            raise RuntimeError(f"client_index {client_index} names no output socket")

    def _reject(self, reject: Reject) -> None:
        self._check_client_index(reject.client_index)
        self.counters.requests_rejected += 1
        logger.warning("rejected request %s: %s", reject.request_id, reject.message)
        emission = Emission(
            request_id=reject.request_id,
            client_index=reject.client_index,
            new_token_ids=(),
            outcome=Rejected(reject.message, reject.cache_miss),
            prompt_tokens=0,
            completion_tokens=0,
        )
        self._send(self.adapter.encode_step([emission], self._load()))

    def _answer_utility(self, client_index: int, call_id: int, method: str, args: Any) -> None:
        self._check_client_index(client_index)
        self.counters.utility_calls += 1
        handler = self._utilities.get(method)
        lookup = self._lookups.get(method)
        if method == "collective_rpc":
            try:
                payload = self.adapter.encode_utility_reply(
                    call_id, None, collective_rpc(self._worker, tuple(args))
                )
            except Exception as exc:  # the worker's failure is the caller's answer, as vLLM's
                failure = f"Call to {method} method failed: {exc}"
                payload = self.adapter.encode_utility_reply(call_id, failure, None)
        elif handler is not None and not args:
            payload = self.adapter.encode_utility_reply(call_id, None, handler())
        elif lookup is not None and len(args) == 1 and isinstance(args[0], str):
            payload = self.adapter.encode_utility_reply(call_id, None, lookup(args[0]))
        else:
            failure = f"Call to {method} method failed: unsupported by this reference engine"
            payload = self.adapter.encode_utility_reply(call_id, failure, None)
        self._send([(client_index, payload)])

    def _counters(self) -> dict[str, int]:
        self._update_gauges()
        return self.counters.snapshot()

    def _admit(self) -> None:
        events = []
        while self.waiting and len(self.active) < self.config.max_batch:
            request_id, request = self.waiting.popitem(last=False)
            self.active[request_id] = request
            if self.kv_events is not None:
                admitted = self.kv_events.cache.admit(request.prompt_ids)
                request.cached_tokens = admitted.cached_tokens
                request.cache_creation_tokens = admitted.created_tokens
                events.extend(admitted.events)
        if self.kv_events is not None:
            self.kv_events.publisher.publish(events)
        self._update_gauges()

    def _reset_prefix_cache(self) -> bool:
        if self.kv_events is not None:
            self.kv_events.publisher.publish(self.kv_events.cache.clear())
        return True

    def _step(self) -> None:
        emissions: list[Emission] = []
        for request in list(self.active.values()):
            if request.pooled is not None:  # a pooling request: done in its one forward pass
                emissions.append(self._emission(request, Pooled(request.pooled)))
                del self.active[request.request_id]
                self.counters.requests_finished += 1
                continue
            step = request.generation.step()
            self.counters.tokens_generated += 1
            if request.aborted:
                self.counters.tokens_after_abort += 1
            request.unsent.append(step.token_id)
            finished = step.finish is not None
            if request.should_emit(finished):
                emissions.append(self._emission(request, step.finish))
            if finished:
                del self.active[request.request_id]
                self.counters.requests_finished += 1
        self.counters.steps += 1
        self._update_gauges()
        cache = self.kv_events.cache.take_stats() if self.kv_events else PrefixCacheStats()
        load = dataclasses.replace(self._load(), prefix_cache_stats=cache)
        self._send(self.adapter.encode_step(emissions, load))

    def _emission(self, request: ActiveRequest, outcome: Any) -> Emission:
        emission = Emission(
            request_id=request.request_id,
            client_index=request.client_index,
            new_token_ids=tuple(request.unsent),
            outcome=outcome,
            prompt_tokens=request.generation.prompt_len,
            completion_tokens=len(request.generation.output_ids),
            logprobs=request.logprobs,
            first=not request.emitted,
            cached_tokens=request.cached_tokens,
            cache_creation_tokens=request.cache_creation_tokens,
        )
        request.unsent.clear()
        request.emitted = True
        return emission

    def _load(self) -> Load:
        used = sum(
            math.ceil((r.generation.prompt_len + len(r.generation.output_ids)) / BLOCK_SIZE)
            for r in self.active.values()
        )
        return Load(
            running=len(self.active),
            waiting=len(self.waiting),
            step_counter=self.counters.steps,
            used_blocks=used,
            total_blocks=self.model.num_gpu_blocks,
        )

    def _update_gauges(self) -> None:
        self.counters.requests_active = len(self.active)
        self.counters.requests_waiting = len(self.waiting)

    def _send(self, messages: Sequence[OutputMessage]) -> None:
        for index, payload in messages:
            if isinstance(payload, list):  # a payload and its aux frames (a pooling tensor)
                self.sockets.outputs[index].send_multipart(payload)
            else:
                self.sockets.outputs[index].send(payload)
            self.counters.output_messages += 1

    def _send_last(self, messages: Sequence[OutputMessage]) -> None:
        """Send the engine's last messages and wait (within the output linger) until libzmq has
        taken each off its queue: a socket closed while a message still waits there can drop
        it whatever LINGER says (libzmq #4660; the shutdown test lost its aborts about once in
        25 runs on a loaded machine)."""
        trackers = [
            self.sockets.outputs[index].send_multipart(
                payload if isinstance(payload, list) else [payload], copy=False, track=True
            )
            for index, payload in messages
        ]
        self.counters.output_messages += len(trackers)
        deadline = time.monotonic() + OUTPUT_LINGER_MS / 1000
        for tracker in trackers:
            assert tracker is not None  # track=True
            with contextlib.suppress(zmq.NotDone):
                tracker.wait(max(0.0, deadline - time.monotonic()))

    def _shut_down(self) -> None:
        if self.adapter.sentinel_on_shutdown:
            self.sockets.send_dead_sentinel()
            return
        in_flight = [*self.active.values(), *self.waiting.values()]
        self.active.clear()
        self.waiting.clear()
        if in_flight:
            emissions = [self._emission(request, Aborted()) for request in in_flight]
            self._send_last(self.adapter.encode_step(emissions, self._load()))


def _drain_pipe(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
