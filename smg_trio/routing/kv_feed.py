"""Pure. One worker's KV-event feed in publisher order: which batches to apply, when to ask the
publisher's replay socket for missed ones, and when the worker's set must be cleared
(docs/routing.md §9.2).

The publisher numbers its batches 0, 1, 2, ... from its start. The feed expects the next number:
- the expected one is applied;
- a later one means batches were missed (a slow joiner, a dropped message): with a replay
  socket the feed holds it and asks for a replay from the expected number; without one the
  miss is counted and the batch applied (a missed removal may leave a stale entry until the
  index's bound evicts it);
- an earlier one, on the live socket, is a restarted publisher (its numbers start again at 0)
  unless a replay delivered it (live batches published while the replay was read still come
  after it, however late: until the first live batch past the replay's last): the worker's set
  is cleared and the batch applied;
- replayed batches fill the gap in order; a replay that cannot reach back far enough (the
  publisher's buffer moved on) counts the loss and goes on from what it has.
The very first batch ever seen starts a replay from 0 when it is not 0 itself, so a gateway
started after its engines learns what they already cache. A dropped connection to the publisher
(`restart`, from the subscriber's socket monitor) starts over the same way, after the worker was
cleared: a publisher that restarted and passed our expected number before we reconnected is
still noticed.
"""

from __future__ import annotations

import msgspec

from smg_trio.wire.vllm_kv_events import EventBatch


class Apply(msgspec.Struct, frozen=True):
    batch: EventBatch


class ClearWorker(msgspec.Struct, frozen=True):
    """Drop everything known of the worker (its engine restarted)."""


class RequestReplay(msgspec.Struct, frozen=True):
    start_seq: int


FeedAction = Apply | ClearWorker | RequestReplay


class KvFeed:
    """The ordering state of one worker's publisher (see the module doc)."""

    def __init__(self, *, can_replay: bool) -> None:
        self.can_replay = can_replay
        self.expected: int | None = None
        self.replaying = False
        self.missed = 0  # batches known lost
        self.restarts = 0
        self._held: list[tuple[int, EventBatch]] = []
        self._replayed_to = -1  # the last seq a replay applied, until a later live one came

    def live(self, seq: int, batch: EventBatch) -> list[FeedAction]:
        """A batch from the PUB socket."""
        if self.replaying:
            self._held.append((seq, batch))
            return []
        if self.expected is None:
            if seq > 0 and self.can_replay:
                return self._start_replay(0, seq, batch)
            self.missed += seq
            self.expected = seq + 1
            return [Apply(batch)]
        if seq > self._replayed_to:
            # One connection delivers in order: every live batch the replay already brought
            # came before this one, so from here an earlier number can only be a restart.
            self._replayed_to = -1
        if seq == self.expected:
            self.expected += 1
            return [Apply(batch)]
        if seq > self.expected:
            if self.can_replay:
                return self._start_replay(self.expected, seq, batch)
            self.missed += seq - self.expected
            self.expected = seq + 1
            return [Apply(batch)]
        if seq <= self._replayed_to:
            return []  # already applied from the replay
        self.restarts += 1
        self.expected = seq + 1
        return [ClearWorker(), Apply(batch)]

    def replayed(self, seq: int, batch: EventBatch) -> list[FeedAction]:
        """A batch from the replay socket."""
        if self.expected is None or seq < self.expected:
            return []  # (None: the publisher restarted meanwhile; its replay is stale)
        if seq > self.expected:
            self.missed += seq - self.expected
        self.expected = seq + 1
        self._replayed_to = seq
        return [Apply(batch)]

    def replay_done(self) -> list[FeedAction]:
        """The replay ended (its end marker, or the caller gave up waiting)."""
        self.replaying = False
        held, self._held = self._held, []
        actions: list[FeedAction] = []
        for seq, batch in held:
            assert self.expected is not None
            if seq < self.expected:
                continue
            if seq > self.expected:
                self.missed += seq - self.expected
            self.expected = seq + 1
            actions.append(Apply(batch))
        return actions

    def restart(self) -> None:
        """The publisher went away (its connection dropped): the worker was cleared, and the
        next batch is taken as a first one."""
        self.restarts += 1
        self.expected = None
        self.replaying = False
        self._held = []
        self._replayed_to = -1

    def _start_replay(self, start: int, seq: int, batch: EventBatch) -> list[FeedAction]:
        self.replaying = True
        self.expected = start
        self._held.append((seq, batch))
        return [RequestReplay(start)]
