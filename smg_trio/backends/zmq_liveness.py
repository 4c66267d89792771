"""I/O. How the ZMQ backend finds a dead or wedged engine fast and takes back one that answers
again (docs/resilience.md §1–§3). Two tasks, each owning what it reads:

- the connection watcher owns the monitor socket of the input ROUTER (the socket every engine
  dials). A peer's disconnect (a killed engine's kernel closes its sockets at once) sends a probe
  to every engine: a probe to an engine whose connection is gone fails in the writer with
  EHOSTUNREACH (ROUTER_MANDATORY), which declares it dead within milliseconds, traffic or not;
- the prober sends, every `probe_period_s`, a probe to each registered engine that said nothing
  for that long, busy or idle, and to each engine marked dead by silence. A probe is a UTILITY
  call (`is_sleeping`) whose answer nobody awaits: vLLM's busy loop answers it between steps,
  and ANY output counts as a sign of life (`EngineRegistry.dispatch`), so a long prefill that
  answers probes is not silence, an unanswered probe is (the in-flight table's watchdog judges
  it), and an engine dead by silence that answers again is taken back.

A real TokenSpeed engine drops UTILITY frames, so for it a probe only tests the connection and
an unanswered one proves nothing (`answers_probes=False`).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable, Container
from typing import Final

import trio
import zmq
from zmq.utils.monitor import parse_monitor_message

from smg_trio.backends.zmq_engines import EngineSlot
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.backends.zmq_socket import TrioZmqSocket
from smg_trio.wire import vllm_zmq
from smg_trio.wire.zmq_transport import RequestType, encode_abort

logger = logging.getLogger(__name__)

PROBE_PERIOD_S: Final = 1.0
"""Default: an engine silent this long gets a probe; keeps a dead one found within ~1 s even
when no disconnect is seen (docs/resilience.md §1)."""
PROBE_METHOD: Final = "is_sleeping"
"""A vLLM EngineCore utility that only reads a flag: the cheapest call it answers."""
DISCONNECT_RECHECKS_S: Final = (0.01, 0.1, 0.3)
"""After a disconnect, when (s) every engine is probed again. libzmq's I/O thread reports the
disconnect before it tells the ROUTER, and the ROUTER reads such news at most once a
millisecond, so a probe sent at once may still find the connection and be lost with it; by
these it is gone (the last one covers an I/O thread kept off a loaded machine's cores) and the
probe fails fast (EHOSTUNREACH). Measured: under CPU load 2 in 25 disconnects were otherwise
found only by the periodic probe, 2 s later; with the rechecks 0 in 25."""
MONITORED_EVENTS: Final = int(zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED)


def probe_frames(
    engine: EngineSlot, busy_call_ids: Container[int], client_index: int = 0
) -> list[bytes]:
    """`[identity, UTILITY, payload]` of one probe, under a call id no pending call uses (its
    answer then matches no call and is dropped after counting as a sign of life)."""
    call_id = secrets.randbits(63)
    while call_id in busy_call_ids:
        call_id = secrets.randbits(63)
    payload = vllm_zmq.encode_utility_call(
        vllm_zmq.UtilityCall(client_index=client_index, call_id=call_id, method=PROBE_METHOD)
    )
    return [engine.identity, RequestType.UTILITY.frame, payload]


class EngineProber:
    """Sends liveness probes through the backend's writer (`send_probe` queues frames)."""

    def __init__(
        self,
        registry: EngineRegistry,
        send_probe: Callable[[EngineSlot, list[bytes]], None],
        *,
        probe_period_s: float,
        answers_probes: bool,
        client_index: int = 0,
    ) -> None:
        self._registry = registry
        self._client_index = client_index
        self._send = send_probe
        self._period_s = probe_period_s
        self._answers_probes = answers_probes
        registry.on_revived = self._abort_abandoned

    def _abort_abandoned(self, engine: EngineSlot, ids: list[str]) -> None:
        """What a revived engine was given up on while silent still runs there: abort it."""
        if ids:
            self._send(engine, [engine.identity, RequestType.ABORT.frame, encode_abort(ids)])

    def probe(self, engine: EngineSlot) -> None:
        self._send(engine, probe_frames(engine, self._registry.calls, self._client_index))
        if self._answers_probes:
            self._registry.in_flight.probe_sent(engine)

    def probe_all(self) -> None:
        """Probe every registered engine that is alive or only dead by silence."""
        for engine in self._registry.engines:
            if engine.registration is not None and (engine.dead_reason is None or engine.revivable):
                self.probe(engine)

    async def probe_periodically(self) -> None:
        in_flight = self._registry.in_flight
        while True:
            await trio.sleep(self._period_s)
            now = trio.current_time()
            for engine in self._registry.engines:
                if engine.registration is None:
                    continue
                if engine.revivable or (
                    engine.dead_reason is None
                    and now - in_flight.heard_at(engine) >= self._period_s
                ):
                    self.probe(engine)

    async def watch_connections(self, monitor: TrioZmqSocket) -> None:
        """Own the input ROUTER's monitor socket: a disconnect probes every engine at once, and
        again `DISCONNECT_RECHECKS_S` later (libzmq reports the disconnect before the ROUTER has
        dropped the connection, so the first probe can still go into it and be lost)."""
        rechecks: list[float] = []
        while True:
            frames = None
            with trio.move_on_at(rechecks[0] if rechecks else math.inf):
                frames = await monitor.receive_multipart()
            if frames is None:
                del rechecks[0]
                self.probe_all()
                continue
            event = parse_monitor_message(frames)["event"]
            if event == zmq.EVENT_DISCONNECTED:
                logger.info("an engine connection closed; probing every engine")
                self.probe_all()
                now = trio.current_time()
                rechecks = [now + delay_s for delay_s in DISCONNECT_RECHECKS_S]
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                # An engine known from a sibling process reconnected to this restarted one
                # (docs/processes.md §3): its answer to a probe makes it ready here.
                for engine in self._registry.engines:
                    if engine.awaiting_answer:
                        self.probe(engine)
