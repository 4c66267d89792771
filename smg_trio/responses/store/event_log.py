"""I/O. The event log of responses that outlive their connection (docs/client-apis.md §3.5):
background responses and resumable streams, in the response store's database (SQLite or
PostgreSQL), so any process or replica sharing the store can read a response's events.

Two tables beside `smg_trio_responses`:

    smg_trio_response_runs(id PK, owner, background, status, response, next_seq,
                           cancel_requested, heartbeat_at, ended_at)
    smg_trio_response_events(id, seq, name, data, PRIMARY KEY (id, seq))

A run row is a response being generated (or generated) by the process `owner`: its current
response object, the next sequence number, and whether a cancel was asked (by any process).
The owner refreshes `heartbeat_at` of its open runs; a run whose owner stopped doing so (killed)
is ended `incomplete` by whichever process finds it (`end_stale`). Events are the response's
stream events as clients see them, numbered. Each append is one transaction: the events and the
run row's new state together, so a reader never sees an event the row does not count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from smg_trio.responses.store.pool import ConnectionPool

RUNS: Final = "smg_trio_response_runs"
EVENTS: Final = "smg_trio_response_events"
SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {RUNS} (id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
    "background INTEGER NOT NULL, status TEXT NOT NULL, response TEXT NOT NULL, "
    "next_seq BIGINT NOT NULL, cancel_requested INTEGER NOT NULL DEFAULT 0, "
    "heartbeat_at DOUBLE PRECISION NOT NULL, ended_at DOUBLE PRECISION)",
    f"CREATE TABLE IF NOT EXISTS {EVENTS} (id TEXT NOT NULL, seq BIGINT NOT NULL, "
    "name TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (id, seq))",
)


class Run(msgspec.Struct, frozen=True):
    """A run row as read."""

    id: str
    owner: str
    background: bool
    status: str
    response: bytes
    next_seq: int
    cancel_requested: bool
    ended: bool


class LoggedEvent(msgspec.Struct, frozen=True):
    seq: int
    name: bytes
    data: bytes  # the event's JSON, `sequence_number` included


class Append(msgspec.Struct, frozen=True):
    """One run's events numbered from `first_seq`, with its state after them."""

    run_id: str
    first_seq: int
    events: tuple[tuple[bytes, bytes], ...]
    status: str
    response: bytes
    ended: bool = False

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.events)


Ending = Callable[[Run], tuple[bytes, bytes, str, bytes]]
"""A stale run → its last event (name, data without number), status and response object."""


class EventLog:
    """The two tables over the store's connection pool; `mark` is the database's parameter
    mark and `sqlite` says which transaction statement it speaks."""

    def __init__(self, pool: ConnectionPool[Any], mark: str, *, sqlite: bool) -> None:
        self._pool = pool
        self._sqlite = sqlite
        m = mark
        self._run_columns = (
            "id, owner, background, status, response, next_seq, cancel_requested, "
            "ended_at IS NOT NULL"
        )
        # A run may take the id of one that ended (a client reusing its `x-request-id`, as a
        # stored response is replaced, docs/client-apis.md §3.3), never of one still open.
        self._begin = (
            f"INSERT INTO {RUNS} (id, owner, background, status, response, next_seq, "
            f"heartbeat_at) VALUES ({m}, {m}, {m}, {m}, {m}, 0, {m}) ON CONFLICT (id) DO UPDATE "
            "SET owner = excluded.owner, background = excluded.background, "
            "status = excluded.status, response = excluded.response, next_seq = 0, "
            "cancel_requested = 0, heartbeat_at = excluded.heartbeat_at, ended_at = NULL "
            f"WHERE {RUNS}.ended_at IS NOT NULL"
        )
        self._insert_event = (
            f"INSERT INTO {EVENTS} (id, seq, name, data) VALUES ({m}, {m}, {m}, {m})"
        )
        self._advance = (
            f"UPDATE {RUNS} SET next_seq = {m}, heartbeat_at = {m}, status = {m}, "
            f"response = {m} WHERE id = {m}"
        )
        self._end = f"UPDATE {RUNS} SET ended_at = {m} WHERE id = {m}"
        self._trim_window = f"DELETE FROM {EVENTS} WHERE id = {m} AND seq < {m}"
        self._run = f"SELECT {self._run_columns} FROM {RUNS} WHERE id = {m}"
        self._events = (
            f"SELECT seq, name, data FROM {EVENTS} WHERE id = {m} AND seq > {m} "
            f"ORDER BY seq LIMIT {m}"
        )
        self._first_seq = f"SELECT MIN(seq) FROM {EVENTS} WHERE id = {m}"
        self._cancel = f"UPDATE {RUNS} SET cancel_requested = 1 WHERE id = {m} AND ended_at IS NULL"
        self._cancels = (
            f"SELECT id FROM {RUNS} WHERE owner = {m} AND cancel_requested = 1 AND ended_at IS NULL"
        )
        self._heartbeat = (
            f"UPDATE {RUNS} SET heartbeat_at = {m} WHERE owner = {m} AND ended_at IS NULL"
        )
        self._stale = f"SELECT id FROM {RUNS} WHERE ended_at IS NULL AND heartbeat_at < {m}"
        # PostgreSQL: the row locked, so two processes finding it stale at once end it once
        # (the second reads it again after the first committed). SQLite's BEGIN IMMEDIATE
        # already takes the one write lock.
        self._stale_one = (
            f"SELECT {self._run_columns} FROM {RUNS} WHERE id = {m} AND ended_at IS NULL "
            f"AND heartbeat_at < {m}" + ("" if sqlite else " FOR UPDATE")
        )
        self._expire = (
            f"DELETE FROM {EVENTS} WHERE id IN (SELECT id FROM {RUNS} WHERE ended_at < {m})"
        )
        self._delete_events = f"DELETE FROM {EVENTS} WHERE id = {m}"
        self._delete_run = f"DELETE FROM {RUNS} WHERE id = {m}"

    @property
    def used(self) -> bool:
        """Whether this process used the store at all (a gateway never asked to store opens
        no database: docs/client-apis.md §3.3)."""
        return self._pool.used

    def _transaction(self, connection: Any, work: Callable[[], Any]) -> Any:
        """`work()` as one transaction (the connections are in autocommit mode)."""
        if self._sqlite:
            connection.execute("BEGIN IMMEDIATE")  # the write lock now: no upgrade deadlock
            try:
                result = work()
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            return result
        with connection.transaction():
            return work()

    async def begin(
        self, run_id: str, owner: str, *, background: bool, response: bytes, now: float
    ) -> bool:
        """A new run (status from `response`), in place of an ended one with the id (its
        events dropped); False when a run with the id is still open."""
        status = msgspec.json.decode(response)["status"]
        row = (run_id, owner, int(background), status, response.decode(), now)

        def work(connection: Any) -> bool:
            def begin() -> bool:
                if not connection.execute(self._begin, row).rowcount:
                    return False
                connection.execute(self._delete_events, (run_id,))
                return True

            began: bool = self._transaction(connection, begin)
            return began

        began: bool = await self._pool.run(work)
        return began

    async def append(
        self,
        run_id: str,
        first_seq: int,
        events: Sequence[tuple[bytes, bytes]],
        *,
        status: str,
        response: bytes,
        now: float,
        ended: bool = False,
        keep: int | None = None,
    ) -> None:
        """`events` numbered from `first_seq`, with the run's new status and object; `ended`:
        the run's last append; `keep`: at most that many events stay (the oldest go)."""
        await self.write(
            [Append(run_id, first_seq, tuple(events), status, response, ended)], now=now, keep=keep
        )

    async def write(self, appends: Sequence[Append], *, now: float, keep: int | None) -> None:
        """Several runs' appends as one transaction (one thread hop, one commit)."""
        rows = [
            (append.run_id, append.first_seq + offset, name.decode(), data.decode())
            for append in appends
            for offset, (name, data) in enumerate(append.events)
        ]
        advances = [
            (append.next_seq, now, append.status, append.response.decode(), append.run_id)
            for append in appends
        ]
        ends = [(now, append.run_id) for append in appends if append.ended]
        trims = [
            (append.run_id, append.next_seq - keep)
            for append in appends
            if keep is not None and append.next_seq > keep
        ]

        def work(connection: Any) -> None:
            def write() -> None:
                cursor = connection.cursor()
                if rows:
                    cursor.executemany(self._insert_event, rows)
                cursor.executemany(self._advance, advances)
                if ends:
                    cursor.executemany(self._end, ends)
                if trims:
                    cursor.executemany(self._trim_window, trims)

            self._transaction(connection, write)

        await self._pool.run(work)

    async def run(self, run_id: str) -> Run | None:
        def work(connection: Any) -> Any:
            return connection.execute(self._run, (run_id,)).fetchone()

        return _run_of(await self._pool.run(work))

    async def events_after(
        self, run_id: str, after: int, limit: int
    ) -> tuple[Run | None, list[LoggedEvent], int | None]:
        """The run, up to `limit` events numbered above `after`, and the oldest kept number
        (None: none kept), read in one transaction so the three agree."""

        def work(connection: Any) -> Any:
            def read() -> Any:
                run = connection.execute(self._run, (run_id,)).fetchone()
                rows = connection.execute(self._events, (run_id, after, limit)).fetchall()
                (first,) = connection.execute(self._first_seq, (run_id,)).fetchone()
                return run, rows, first

            if self._sqlite:  # one snapshot: a read transaction in WAL mode
                connection.execute("BEGIN")
                try:
                    return read()
                finally:
                    connection.execute("COMMIT")
            with connection.transaction():
                return read()

        run, rows, first = await self._pool.run(work)
        events = [LoggedEvent(int(seq), name.encode(), data.encode()) for seq, name, data in rows]
        return _run_of(run), events, None if first is None else int(first)

    async def request_cancel(self, run_id: str) -> bool:
        """Ask the owner to cancel; False when the run already ended (or is unknown)."""

        def work(connection: Any) -> bool:
            return bool(connection.execute(self._cancel, (run_id,)).rowcount)

        asked: bool = await self._pool.run(work)
        return asked

    async def beat(self, owner: str, now: float) -> list[str]:
        """Refresh the owner's open runs; the ids among them a cancel was asked for."""

        def work(connection: Any) -> list[str]:
            connection.execute(self._heartbeat, (now, owner))
            return [row[0] for row in connection.execute(self._cancels, (owner,)).fetchall()]

        cancels: list[str] = await self._pool.run(work)
        return cancels

    async def end_stale(self, before: float, ending: Ending, now: float) -> list[str]:
        """End every open run whose heartbeat is older than `before` with `ending`'s event;
        the ids ended here (a run another process ends meanwhile is left to it)."""

        def work(connection: Any) -> list[str]:
            ended: list[str] = []
            for (run_id,) in connection.execute(self._stale, (before,)).fetchall():

                def end_one(run_id: str = run_id) -> bool:
                    row = connection.execute(self._stale_one, (run_id, before)).fetchone()
                    run = _run_of(row)
                    if run is None:
                        return False
                    name, data, status, response = ending(run)
                    numbered = data[:-1] + b',"sequence_number":%d}' % run.next_seq
                    connection.execute(
                        self._insert_event,
                        (run_id, run.next_seq, name.decode(), numbered.decode()),
                    )
                    connection.execute(
                        self._advance,
                        (run.next_seq + 1, now, status, response.decode(), run_id),
                    )
                    connection.execute(self._end, (now, run_id))
                    return True

                if self._transaction(connection, end_one):
                    ended.append(run_id)
            return ended

        stale: list[str] = await self._pool.run(work)
        return stale

    async def expire(self, ended_before: float) -> None:
        """Drop the events of runs that ended before `ended_before` (the retention)."""

        def work(connection: Any) -> None:
            connection.execute(self._expire, (ended_before,))

        await self._pool.run(work)

    async def delete(self, run_id: str) -> bool:
        def work(connection: Any) -> bool:
            connection.execute(self._delete_events, (run_id,))
            return bool(connection.execute(self._delete_run, (run_id,)).rowcount)

        deleted: bool = await self._pool.run(work)
        return deleted


def _run_of(row: Any) -> Run | None:
    if row is None:
        return None
    run_id, owner, background, status, response, next_seq, cancel, ended = row
    return Run(
        run_id,
        owner,
        bool(background),
        status,
        response.encode(),
        int(next_seq),
        bool(cancel),
        bool(ended),
    )
