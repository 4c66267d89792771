"""`RoundRobinStreams`, hypercorn's sender scheduler in place of `priority.PriorityTree`: every
stream with something to send gets its turn in order, blocked ones are skipped, and misuses
raise what the tree raised (hypercorn catches exactly those)."""

from __future__ import annotations

import itertools

import pytest
from priority.priority import DeadlockError, DuplicateStreamError, MissingStreamError

from smg_trio.frontends.http.h2_round_robin import RoundRobinStreams


def test_active_streams_take_turns_and_blocked_ones_are_skipped() -> None:
    streams = RoundRobinStreams()
    for stream_id in (1, 3, 5):
        streams.insert_stream(stream_id)
    assert list(itertools.islice(streams, 6)) == [1, 3, 5, 1, 3, 5]
    streams.block(3)
    assert list(itertools.islice(streams, 4)) == [1, 5, 1, 5]
    streams.unblock(3)
    streams.unblock(3)  # unblocking an active stream changes nothing
    assert list(itertools.islice(streams, 3)) == [1, 5, 3]
    streams.remove_stream(1)
    assert list(itertools.islice(streams, 4)) == [5, 3, 5, 3]


def test_nothing_to_send_is_a_deadlock_until_a_stream_is_unblocked() -> None:
    streams = RoundRobinStreams()
    with pytest.raises(DeadlockError):
        next(streams)
    streams.insert_stream(1)
    streams.block(1)  # what hypercorn does to a new stream until its body comes
    with pytest.raises(DeadlockError):
        next(streams)
    streams.unblock(1)
    assert next(streams) == 1


def test_misuses_raise_what_the_priority_tree_raised() -> None:
    streams = RoundRobinStreams()
    streams.insert_stream(1, depends_on=None, weight=16, exclusive=False)
    with pytest.raises(DuplicateStreamError):
        streams.insert_stream(1)
    for operation in (streams.block, streams.unblock, streams.remove_stream):
        with pytest.raises(MissingStreamError):
            operation(7)
    with pytest.raises(MissingStreamError):
        streams.reprioritize(7, depends_on=None, weight=32, exclusive=False)
    streams.reprioritize(1, depends_on=None, weight=32, exclusive=False)
    streams.remove_stream(1)
    with pytest.raises(MissingStreamError):
        streams.remove_stream(1)
