"""I/O. Writes the runs' events to the event log (docs/client-apis.md §3.5): an append puts a
run's events in its `pending` list and marks it dirty; the flusher writes every dirty run's
pending events and state as one transaction, at most once per FLUSH_INTERVAL_S, so a stream's
appends cost one transaction per interval, not one per engine batch, and every run of the
process shares it. A run's last append calls `flush` itself and waits for it.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import trio

from smg_trio.errors import GatewayError
from smg_trio.responses.run import LocalRun
from smg_trio.responses.store.event_log import Append, EventLog

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S: Final = 0.01
"""At most one write of the event log per interval (module doc)."""
RETRY_AFTER_S: Final = 1.0
"""A failed write (the store is down) is tried again after this long."""


class EventLogFlusher:
    """The pending events of this process's runs, on their way to `log` (module doc)."""

    def __init__(self, log: EventLog, *, keep: int) -> None:
        self.log = log
        self.keep = keep  # the events the log keeps per run (`--response-events-max`)
        self._dirty: dict[str, LocalRun] = {}  # runs with events or state not in the log yet
        self._wanted = trio.Event()
        self._lock = trio.Lock()

    def mark(self, run: LocalRun) -> None:
        """`run` has pending events or state for the next flush."""
        self._dirty[run.id] = run

    def want(self) -> None:
        """Ask for a flush within FLUSH_INTERVAL_S."""
        self._wanted.set()

    async def flush(self) -> None:
        """Write every run's pending events and state, as one transaction."""
        async with self._lock:  # one write at a time: a run's events land in order
            dirty, self._dirty = self._dirty, {}
            if not dirty:
                return
            taken = [(run, run.pending) for run in dirty.values()]
            appends = []
            for run, events in taken:
                run.pending = []
                appends.append(
                    Append(
                        run.id,
                        run.durable_seq,
                        tuple(events),
                        run.status,
                        run.logged_response(),
                        run.ending,
                    )
                )
            try:
                await self.log.write(appends, now=time.time(), keep=self.keep)
            except BaseException:
                for run, events in taken:  # kept for the next flush, in order
                    run.pending[:0] = events
                    self._dirty.setdefault(run.id, run)
                raise
            for run, events in taken:
                run.durable_seq += len(events)

    async def flush_forever(self) -> None:
        """Flush at most every FLUSH_INTERVAL_S: the appends of that interval, every run's,
        share one transaction (bench/RESULTS.md, "the event log's tail latency")."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            try:
                await self.flush()
            except GatewayError as error:
                logger.warning("response runs: flushing the event log failed: %s", error.message)
                self._wanted.set()
                await trio.sleep(RETRY_AFTER_S)
            await trio.sleep(FLUSH_INTERVAL_S)
