"""A worker's KV-event feed (docs/routing.md §9.2): missed batches come back from the replay
socket in order, a restarted publisher clears the worker, nothing is applied twice."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.routing.kv_feed import Apply, ClearWorker, FeedAction, KvFeed, RequestReplay
from smg_trio.wire.vllm_kv_events import EventBatch


def batch(seq: int) -> EventBatch:
    return EventBatch(float(seq), [], seq)  # the rank field carries the seq, to check order


class Publisher:
    """Batches 0..n-1, all kept for replay (vLLM keeps the last 10,000)."""

    def __init__(self, count: int, keep_from: int = 0) -> None:
        self.count = count
        self.keep_from = keep_from


def drive(feed: KvFeed, publisher: Publisher, delivered: list[int]) -> list[int | str]:
    """Feed the live batches `delivered`, serving replays from `publisher`; what got applied."""
    applied: list[int | str] = []

    def run(actions: list[FeedAction]) -> None:
        for action in actions:
            match action:
                case Apply(applied_batch):
                    assert applied_batch.data_parallel_rank is not None
                    applied.append(applied_batch.data_parallel_rank)
                case ClearWorker():
                    applied.append("clear")
                case RequestReplay(start):
                    for seq in range(max(start, publisher.keep_from), publisher.count):
                        run(feed.replayed(seq, batch(seq)))
                    run(feed.replay_done())

    for seq in delivered:
        run(feed.live(seq, batch(seq)))
    return applied


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1)))))
def test_with_replay_every_batch_is_applied_once_in_order(case: tuple[int, set[int]]) -> None:
    count, dropped = case
    delivered = [seq for seq in range(count) if seq not in dropped]
    feed = KvFeed(can_replay=True)
    applied = drive(feed, Publisher(count), delivered)
    # Every batch up to the last delivered one (and any later one a replay brought), in order,
    # once each; a dropped tail is never known to be missing until a later batch arrives.
    last = max(delivered, default=-1)
    assert applied == list(range(len(applied)))
    assert last + 1 <= len(applied) <= count


def test_without_replay_a_gap_is_counted_and_skipped() -> None:
    feed = KvFeed(can_replay=False)
    assert drive(feed, Publisher(0), [0, 1, 4, 5]) == [0, 1, 4, 5]
    assert feed.missed == 2


def test_a_late_subscriber_replays_from_zero() -> None:
    feed = KvFeed(can_replay=True)
    assert drive(feed, Publisher(8), [5, 6, 7]) == list(range(8))
    assert feed.missed == 0


def test_a_replay_buffer_that_moved_on_counts_the_loss() -> None:
    feed = KvFeed(can_replay=True)
    assert drive(feed, Publisher(8, keep_from=3), [6, 7]) == [3, 4, 5, 6, 7]
    assert feed.missed == 3


def test_a_restarted_publisher_clears_the_worker() -> None:
    feed = KvFeed(can_replay=True)
    assert drive(feed, Publisher(3), [0, 1, 2]) == [0, 1, 2]
    # The engine restarted: its publisher counts from 0 again.
    assert drive(feed, Publisher(2), [0, 1]) == ["clear", 0, 1]
    assert feed.restarts == 1


def test_live_batches_a_replay_already_applied_are_dropped() -> None:
    feed = KvFeed(can_replay=True)
    assert feed.live(0, batch(0)) == [Apply(batch(0))]
    assert feed.live(3, batch(3)) == [RequestReplay(1)]
    for seq in (1, 2, 3, 4):
        feed.replayed(seq, batch(seq))
    assert feed.replay_done() == []  # the held 3 came with the replay
    assert feed.live(4, batch(4)) == []  # queued in the SUB socket during the replay
    assert feed.live(5, batch(5)) == [Apply(batch(5))]


def test_live_batches_published_during_a_replay_are_dropped_however_late_they_come() -> None:
    """The subscriber reads live batches in rounds; those published while a replay was read
    can arrive rounds later (seen under load): still duplicates, not a restart."""
    feed = KvFeed(can_replay=True)
    assert feed.live(6, batch(6)) == [RequestReplay(0)]
    for seq in range(10):  # the publisher had reached 9 when it answered
        feed.replayed(seq, batch(seq))
    assert feed.replay_done() == []
    assert feed.live(7, batch(7)) == []
    assert feed.live(8, batch(8)) == []  # a later round of the live socket
    assert feed.live(9, batch(9)) == []
    assert feed.live(10, batch(10)) == [Apply(batch(10))]
    # Past the replay, an earlier number is a restart again.
    assert feed.live(0, batch(0)) == [ClearWorker(), Apply(batch(0))]
    assert feed.restarts == 1
