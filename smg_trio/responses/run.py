"""I/O. One response run this process owns, while it runs (docs/client-apis.md §3.5): its
status and current object, its numbered events (the last LOCAL_WINDOW of them in memory for
its local followers, those not yet in the log pending for the flusher), its cancel scope and
its subscribers. `ResponseRuns` (responses/runs.py) creates and ends runs; this module only
keeps one run's state as its events arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec
import trio

from smg_trio.core.run_events import (
    ENDED_STATUSES,
    FAILED,
    LIFECYCLE_EVENTS,
    error_of,
    with_status,
)
from smg_trio.core.run_output import OutputSoFar
from smg_trio.errors import GatewayError
from smg_trio.handoff import Taken
from smg_trio.responses.store.event_log import LoggedEvent

logger = logging.getLogger(__name__)

LOCAL_WINDOW: Final = 512
"""Events of a local run kept in memory for its tails (older ones are read from the log)."""
OUTPUT_LOG_INTERVAL_S: Final = 0.5
"""A running run's output is rewritten in the log at most this often (`logged_response`)."""

_decode = msgspec.json.decode

SendNow = Callable[[list[LoggedEvent]], Taken]
"""A follower's transport sending events without waiting, answered as a hand-off's `take_now`
(smg_trio/handoff.py): ALL, sent; PART, the transport holds the rest (its owner's next send
finishes it); REFUSED, nothing sent."""


class CaughtUp:
    """A follower parked at the run's newest event: the run's appends hand it their events
    themselves (`LocalRun.hand_over`) while its transport takes them at once; otherwise it is
    woken (`woken`) and goes on from `after` in its own task."""

    __slots__ = ("after", "held", "send_now", "woken")

    def __init__(self, after: int, send_now: SendNow) -> None:
        self.after = after
        """The last event it was given."""
        self.send_now = send_now
        self.held = False
        """Its transport holds the rest of the last events handed over (PART)."""
        self.woken = trio.Event()


@dataclass(eq=False)
class LocalRun:
    """A run this process owns, while it runs."""

    id: str
    background: bool
    status: str
    announced: bytes
    """The response object as its last lifecycle event announced it (its `output` filled in
    only by the generation's own last event); `response` adds the output so far."""
    next_seq: int = 0
    output: OutputSoFar = field(default_factory=OutputSoFar)
    """The output its events built so far (core/run_output.py)."""
    _shown: tuple[int, bytes, bytes] | None = field(default=None, init=False, repr=False)
    """(output changes, announced, response) of the last `response` made: made once per change."""
    _logged: tuple[float, bytes, bytes] | None = field(default=None, init=False, repr=False)
    """(when, announced, response) of the object last handed to the log (`logged_response`)."""
    window: list[LoggedEvent] = field(default_factory=list)
    """The run's last events (between LOCAL_WINDOW and twice that), oldest first."""
    changed: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    ending: bool = False
    """Its last append began (its events go to the log before its followers see them)."""
    ended: bool = False
    """Its last event is in the log and in its window."""
    cancel_asked: bool = False
    subscribers: int = 0
    early_error: GatewayError | None = None
    """A resumable stream that failed before its first event: its creator gets this error
    as the HTTP status it would have had without the log."""
    pending: list[tuple[bytes, bytes]] = field(default_factory=list)
    """Events not yet in the log, numbered from `durable_seq`."""
    durable_seq: int = 0
    caught_up: list[CaughtUp] = field(default_factory=list)
    """Followers parked at its newest event, fed by its appends (docs/client-apis.md §3.5)."""

    @property
    def response(self) -> bytes:
        """The run's current response object: as announced, with the output so far (a
        running run's text, and what a cancelled or cut-off one generated before its end)."""
        shown = self._shown
        changes, announced = self.output.changes, self.announced
        if shown is not None and shown[0] == changes and shown[1] is announced:
            return shown[2]
        response = self.output.onto(announced, ended=self.status in ENDED_STATUSES)
        self._shown = (changes, announced, response)
        return response

    def logged_response(self) -> bytes:
        """The object the flusher writes with the run's events: `response`, its output
        refreshed at most every OUTPUT_LOG_INTERVAL_S while the run goes on (the output of a
        long run is not rewritten per flush; housekeeping writes a stale one within a
        heartbeat), exact when its status changes or it ends."""
        logged, now = self._logged, trio.current_time()
        if (
            logged is not None
            and not self.ending
            and logged[1] is self.announced
            and now < logged[0] + OUTPUT_LOG_INTERVAL_S
        ):
            return logged[2]
        response = self.response
        self._logged = (now, self.announced, response)
        return response

    @property
    def output_unlogged(self) -> bool:
        """Its output changed since the log last got its object."""
        logged = self._logged
        return logged is not None and logged[2] is not self.response

    @property
    def oldest_in_memory(self) -> int:
        """The number of the oldest event the window holds (the next one's when empty)."""
        return self.window[0].seq if self.window else self.next_seq

    @property
    def kind(self) -> str:
        return "background" if self.background else "resumable"

    def take_state(self, events: Sequence[tuple[bytes, bytes]], *, end: bool) -> None:
        """The run's status and object after `events`: the object from its lifecycle events,
        the output so far from the others (core/run_output.py)."""
        status, response = self.status, self.announced
        error = None
        output = self.output
        for name, data in events:
            if name in LIFECYCLE_EVENTS:
                obj = _decode(data)["response"]
                status, response = obj["status"], msgspec.json.encode(obj)
            elif name == b"error":
                error = error_of(data)
            else:
                output.take(name, data)
        if end and status not in ENDED_STATUSES:
            # Failed before `response.created` (e.g. refused at admission): only its `error`
            # event says why, and the object keeps it as OpenAI's failed responses do.
            status, response = FAILED, with_status(response, FAILED, error=error)
        self.status, self.announced = status, response

    def show(self, first: int, events: Sequence[tuple[bytes, bytes]]) -> list[LoggedEvent]:
        """`events`, numbered from `first`, into the run's window; returns them numbered."""
        shown = [
            LoggedEvent(first + offset, name, data) for offset, (name, data) in enumerate(events)
        ]
        window = self.window
        window.extend(shown)
        if len(window) > 2 * LOCAL_WINDOW:  # trimmed by halves: amortized O(1) per event
            del window[: len(window) - LOCAL_WINDOW]
        self.next_seq = first + len(events)
        return shown

    def hand_over(self, shown: list[LoggedEvent]) -> None:
        """The events just shown (`show`), to each caught-up follower's transport at once,
        from the appending task: no task switch per batch while the client keeps up. A
        follower whose transport did not take them all is woken and leaves the list; it goes
        on in its own task from the window (or the log), so it gets each event once, in
        order, and nothing waits here (its transport's bounds and backpressure hold)."""
        if not shown:
            return
        last = shown[-1].seq
        for follower in tuple(self.caught_up):
            try:
                taken = follower.send_now(shown)
            except Exception:  # a transport's bug must not end the run: its own task retries
                logger.exception("response %s: handing events to a follower failed", self.id)
                taken = Taken.REFUSED
            if taken is Taken.ALL:
                follower.after = last
                continue
            if taken is Taken.PART:
                follower.after = last
                follower.held = True
            self.caught_up.remove(follower)
            follower.woken.set()

    def release_caught_up(self) -> None:
        """Wake every caught-up follower: the run's end goes to them from their own tasks,
        after it is in the log."""
        followers, self.caught_up = self.caught_up, []
        for follower in followers:
            follower.woken.set()

    def wake_followers(self) -> None:
        """Its local followers parked for news look again (a new event only when one was
        waiting: an append per engine batch need not make one)."""
        if self.changed.statistics().tasks_waiting:
            self.changed.set()
            self.changed = trio.Event()


class Tail(msgspec.Struct, frozen=True):
    """A checked subscription: the run exists and still holds the events after `after`."""

    run_id: str
    after: int
