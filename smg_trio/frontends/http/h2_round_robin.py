"""I/O. The order in which hypercorn's h2 sender serves the streams with body to send: plain
round robin instead of `priority.PriorityTree` (docs/http.md §3)."""

from __future__ import annotations

from priority.priority import DeadlockError, DuplicateStreamError, MissingStreamError


class RoundRobinStreams:
    """What hypercorn's sender asks of `priority.PriorityTree` (which stream's queued body to
    send next), as plain round robin over the streams with something to send. RFC 9113 §5.3
    deprecated HTTP/2's priority scheme and lets a server ignore it; the tree kept every
    stream's weights and dependencies in heaps, a cost paid by every request (7.5 % of a
    1-token request's instructions with 64 streams on the connection, docs/http.md §3). The
    same exceptions for the same misuses, which hypercorn catches."""

    __slots__ = ("_active", "_streams")

    def __init__(self) -> None:
        self._streams: set[int] = set()
        self._active: dict[int, None] = {}  # ordered: the next to send first

    def insert_stream(self, stream_id: int, *_: object, **__: object) -> None:
        if stream_id in self._streams:
            raise DuplicateStreamError(stream_id)
        self._streams.add(stream_id)
        self._active[stream_id] = None

    def reprioritize(self, stream_id: int, *_: object, **__: object) -> None:
        self._known(stream_id)  # weights and dependencies are not kept

    def block(self, stream_id: int) -> None:
        self._known(stream_id)
        self._active.pop(stream_id, None)

    def unblock(self, stream_id: int) -> None:
        self._known(stream_id)
        self._active.setdefault(stream_id)

    def remove_stream(self, stream_id: int) -> None:
        self._known(stream_id)
        self._streams.discard(stream_id)
        self._active.pop(stream_id, None)

    def __iter__(self) -> RoundRobinStreams:
        return self

    def __next__(self) -> int:
        """The stream whose turn it is (it goes to the back); `DeadlockError` if none is active."""
        active = self._active
        if not active:
            raise DeadlockError("no stream has anything to send")
        stream_id = next(iter(active))
        del active[stream_id]
        active[stream_id] = None
        return stream_id

    def _known(self, stream_id: int) -> None:
        if stream_id not in self._streams:
            raise MissingStreamError(f"stream {stream_id} is not known")
