"""I/O. The sink a response run's generation writes to (docs/client-apis.md §3.5): the run's
`Gateway.handle` renders the Responses events as for any stream; this `ClientSink` numbers them
with the Responses dialect and appends them to the run (`ResponseRuns.append_now`, to memory, so
it never waits), its end and its failure as the run's last append (in the log first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio

from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.core.run_events import INCOMPLETE, SHUTDOWN_REASON
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import Draining, GatewayError
from smg_trio.handoff import Taken
from smg_trio.responses.run import LocalRun


class RunAppends(Protocol):
    """What a sink asks of the runs (`ResponseRuns`)."""

    def append_now(self, run: LocalRun, events: Sequence[tuple[bytes, bytes]]) -> None: ...

    async def append(
        self, run: LocalRun, events: Sequence[tuple[bytes, bytes]], *, end: bool = False
    ) -> None: ...

    async def end_with(self, run: LocalRun, status: str, reason: str | None = None) -> None: ...


class LogSink:
    """The `ClientSink` of a run: numbered events onto the event log (module doc)."""

    def __init__(self, runs: RunAppends, run: LocalRun) -> None:
        self._runs = runs
        self._run = run
        self._dialect = ResponsesDialect()

    def gone_before_engine(self) -> bool:
        return False

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        if payloads:
            self._runs.append_now(self._run, self._dialect.numbered(payloads))
        await trio.lowlevel.checkpoint()

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        # An append is to memory (the log is written by the flusher): never waits, so the
        # request's scanner hands it over itself, without a hop to its writer task.
        if payloads:
            self._runs.append_now(self._run, self._dialect.numbered(payloads))
        return Taken.ALL

    async def send_body(self, body: bytes) -> None:
        raise AssertionError("a run's plan always streams (request/run_start.py)")

    async def end_stream(self, end: StreamEnd) -> None:
        await self._runs.append(self._run, self._dialect.numbered(end.payloads), end=True)

    async def fail(self, error: GatewayError) -> None:
        run = self._run
        if run.ending:
            return
        if isinstance(error, Draining) and run.background:
            await self._runs.end_with(run, INCOMPLETE, SHUTDOWN_REASON)
            return
        if run.next_seq == 0 and not run.background:
            run.early_error = error  # its creator answers the status (responses/runs.py's doc)
        events = self._dialect.numbered(self._dialect.failure_events(error))
        await self._runs.append(run, events, end=True)
