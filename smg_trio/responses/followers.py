"""I/O. Following a response run (docs/client-apis.md §3.5): a subscription is checked before
any byte goes out (`open_tail`), then `follow` hands its transport the run's events after the
point it names, a batch at a time, until the run's last event:

- a run this process owns is read from its window in memory (its appends wake the followers
  at once), as long as the window still holds the follower's next event;
- anything else (a run of another process, a follower far behind, a run that ended) is read
  from the event log, polled every TAIL_POLL_S while there is nothing new.

A follower caught up with a local run (it sent the run's newest event) whose transport can send
without waiting (`send_now`, HTTP's `SseResponse.send_chunks_now`) parks on the run
(`LocalRun.caught_up`): the run's appends hand it their events themselves, from the generating
task, as the request's scanner does for a stream without the log, so a batch costs no task
switch (bench/RESULTS.md, "what a resumable stream costs"). When its transport does not take a
batch whole (the client reads slowly) the follower is woken and catches up in its own task from
the window: each event once, in order, and the generating task never waits for a client. A
run's last event is never handed over: it is in the log before any follower sees it.

A run's subscribers keep a resumable stream going; with none left it has `resume_grace_s` for
someone to resume it before it is abandoned (its cancel scope's deadline).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import trio

from smg_trio.errors import ClientError
from smg_trio.responses.run import CaughtUp, LocalRun, SendNow, Tail
from smg_trio.responses.store.event_log import EventLog, LoggedEvent

TAIL_POLL_S: Final = 0.01
"""How often a tail of another process's run reads the log (bench: `response_tail`)."""
TAIL_BATCH: Final = 512

SendEvents = Callable[[list[LoggedEvent]], Awaitable[None]]


class RunFollowers:
    """Subscriptions to the runs `local` holds (this process's) and to those of `log`."""

    def __init__(
        self,
        local: Mapping[str, LocalRun],
        log: EventLog | None,
        *,
        events_max: int,
        resume_grace_s: float,
    ) -> None:
        self._local = local
        self._log = log
        self._events_max = events_max
        self.resume_grace_s = resume_grace_s

    async def first_event(self, run: LocalRun) -> None:
        """Wait for the run's first event; a resumable stream that failed before it raises
        its error (its creator answers it as the HTTP status it would have had)."""
        while not run.next_seq and not run.ended:
            await run.changed.wait()
        if run.early_error is not None:
            raise run.early_error

    async def open_tail(self, run_id: str, after: int) -> Tail | None:
        """Check a subscription before any byte is sent: None when no run has the id; a 400
        naming `starting_after` when the events after it are no longer kept."""
        run = self._local.get(run_id)
        if run is not None and run.oldest_in_memory <= after + 1:
            return Tail(run_id, after)
        if self._log is None:
            return None
        found, _, first = await self._log.events_after(run_id, after, 1)
        if found is None:
            return None
        if (first is None and found.next_seq > after + 1) or (
            first is not None and first > after + 1
        ):
            raise ClientError(
                f"the events after {after} are no longer kept (the log keeps the last "
                f"{self._events_max} events of a response, for the retention after it ended)",
                param="starting_after",
            )
        return Tail(run_id, after)

    async def follow(self, tail: Tail, send: SendEvents, send_now: SendNow | None = None) -> None:
        """Hand `send` the run's events after `tail.after`, then the live ones as they come,
        a batch at a time, until its last event (each transport frames them its own way: SSE
        named events here, a WebSocket's frames elsewhere). With `send_now` (the transport's
        send that never waits), a follower caught up with a local run gets its live events
        from the run's appends themselves while the transport takes them (module doc); when
        `send_now` answered PART, `send([])` finishes what it began."""
        after = tail.after
        subscribed = self._local.get(tail.run_id)
        if subscribed is not None:
            self.subscribe(subscribed)
        try:
            while True:
                # The run it subscribed to, once ended, stays readable from memory after the
                # registry forgot it (its end then costs no read of the log).
                ended_here = subscribed is not None and subscribed.ended
                run = subscribed if ended_here else self._local.get(tail.run_id)
                oldest = 0 if run is None else run.oldest_in_memory
                if run is not None and oldest <= after + 1:
                    ended = run.ended
                    fresh = run.window[after + 1 - oldest :]
                    if not fresh and not ended:
                        if send_now is None:
                            await run.changed.wait()
                        else:
                            after = await self._caught_up(run, after, send_now, send)
                        continue
                else:
                    assert self._log is not None
                    found, fresh, _ = await self._log.events_after(tail.run_id, after, TAIL_BATCH)
                    ended = found is None or (found.ended and len(fresh) < TAIL_BATCH)
                    if not fresh and not ended:
                        await trio.sleep(TAIL_POLL_S)
                        continue
                if fresh:
                    await send(fresh)
                    after = fresh[-1].seq
                if ended and (run is None or after + 1 >= run.next_seq):
                    return
        finally:
            if subscribed is not None:
                self.unsubscribe(subscribed)

    @staticmethod
    async def _caught_up(run: LocalRun, after: int, send_now: SendNow, send: SendEvents) -> int:
        """Park at the run's newest event, fed by its appends until woken; the last event
        handed over (module doc)."""
        follower = CaughtUp(after, send_now)
        run.caught_up.append(follower)
        try:
            await follower.woken.wait()
        finally:
            if follower in run.caught_up:  # (cancelled while parked)
                run.caught_up.remove(follower)
        if follower.held:
            await send([])
        return follower.after

    def subscribe(self, run: LocalRun) -> None:
        """Someone follows the run: a resumable stream goes on however long it takes."""
        run.subscribers += 1
        run.scope.deadline = float("inf")

    def unsubscribe(self, run: LocalRun) -> None:
        """One follower fewer; with none left, a resumable stream has `resume_grace_s` for
        someone to resume it before it is abandoned (its scope's deadline)."""
        run.subscribers -= 1
        if run.subscribers == 0 and not run.background and not run.ended:
            run.scope.deadline = trio.current_time() + self.resume_grace_s
