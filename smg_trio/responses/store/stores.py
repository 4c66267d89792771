"""I/O. The response store's two databases behind one interface: SQLite (`sqlite:///PATH`, the
embedded default) and PostgreSQL (`postgresql://...`, for replicas on several machines), and
the URL that picks one (docs/client-apis.md §3.3).

One table, the same in both:

    smg_trio_responses(id TEXT PRIMARY KEY, created_at BIGINT, response TEXT, conversation TEXT)

`response` is the response object's JSON as clients got it (GET answers it as it is);
`conversation` is the JSON array of the turn's input items followed by its output items: what a
later `previous_response_id` prepends. SQLite runs in WAL mode so several gateway processes can
share one file (readers never wait for a writer; writers wait on a lock, `busy_timeout`).
Every call is one statement in autocommit mode: atomic on its own, no transaction left open.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec

from smg_trio.errors import ConfigError
from smg_trio.responses.store.event_log import SCHEMA as EVENT_LOG_SCHEMA
from smg_trio.responses.store.event_log import EventLog
from smg_trio.responses.store.pool import ConnectionPool

TABLE: Final = "smg_trio_responses"
# How long a SQLite writer waits for another process's write lock (a lock wait, not a
# deadline: the request's own deadline still bounds the call from outside).
SQLITE_BUSY_MS: Final = 5000
POSTGRES_SCHEMA_LOCK: Final = 0x736D675F72657370  # any constant key; ours spells "smg_resp"
_SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id TEXT PRIMARY KEY, created_at BIGINT NOT NULL, "
    "response TEXT NOT NULL, conversation TEXT NOT NULL)",
    *EVENT_LOG_SCHEMA,  # responses that outlive their connection (event_log.py)
)


class StoredResponse(msgspec.Struct, frozen=True):
    id: str
    created_at: int
    response: bytes
    conversation: bytes


class ResponseStore(Protocol):
    events: EventLog
    """The event log of background responses and resumable streams (event_log.py)."""

    async def put(self, stored: StoredResponse) -> None: ...

    async def get(self, response_id: str) -> StoredResponse | None: ...

    async def delete(self, response_id: str) -> bool: ...

    async def aclose(self) -> None: ...


def default_store_url() -> str:
    """`sqlite:///` a file in the user's data dir ($XDG_DATA_HOME, else ~/.local/share)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'smg-trio' / 'responses.sqlite3'}"


def check_store_url(url: str) -> None:
    if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ConfigError(f"--response-store {url!r}: expected sqlite:///PATH or postgresql://...")


class _SqlStore:
    """What both databases share: the statements, given each one's parameter mark."""

    def __init__(self, pool: ConnectionPool[Any], mark: str) -> None:
        self._pool = pool
        self.events = EventLog(pool, mark, sqlite=mark == "?")
        self._put = (
            f"INSERT INTO {TABLE} (id, created_at, response, conversation) VALUES "
            f"({mark}, {mark}, {mark}, {mark}) ON CONFLICT (id) DO UPDATE SET "
            "created_at = excluded.created_at, response = excluded.response, "
            "conversation = excluded.conversation"
        )
        self._get = f"SELECT id, created_at, response, conversation FROM {TABLE} WHERE id = {mark}"
        self._delete = f"DELETE FROM {TABLE} WHERE id = {mark}"

    async def put(self, stored: StoredResponse) -> None:
        row = (stored.id, stored.created_at, stored.response.decode(), stored.conversation.decode())

        def work(connection: Any) -> None:
            connection.execute(self._put, row)

        await self._pool.run(work)

    async def get(self, response_id: str) -> StoredResponse | None:
        def work(connection: Any) -> Any:
            return connection.execute(self._get, (response_id,)).fetchone()

        row = await self._pool.run(work)
        if row is None:
            return None
        return StoredResponse(row[0], int(row[1]), row[2].encode(), row[3].encode())

    async def delete(self, response_id: str) -> bool:
        def work(connection: Any) -> bool:
            return bool(connection.execute(self._delete, (response_id,)).rowcount)

        deleted: bool = await self._pool.run(work)
        return await self.events.delete(response_id) or deleted

    async def aclose(self) -> None:
        await self._pool.aclose()


_SQLITE_SETUP: Final = threading.Lock()
"""Held while a connection sets up its file (journal mode, table): see `_sqlite_connect`."""


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Used by one worker thread at a time (the pool's rule), not always the same one;
    # autocommit: each statement is its own transaction.
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_MS}")
    # Switching a new file to WAL takes the file's exclusive lock, and SQLite can answer
    # "database is locked" there at once, without its busy handler, while another of our
    # connections is opening it too (seen with 40 puts on a new store). The pool's threads
    # set a file up one at a time; WAL then stays in the file, so later opens only read it.
    with _SQLITE_SETUP:
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
        if str(mode).lower() != "wal":
            connection.execute("PRAGMA journal_mode = WAL")
        for statement in _SCHEMA:
            connection.execute(statement)
    # WAL's NORMAL: a commit survives the process dying, not the machine losing power (no
    # fsync per commit, which would hold each response's last event for milliseconds).
    connection.execute("PRAGMA synchronous = NORMAL")
    return connection


def _postgres_connect(url: str) -> Any:
    import psycopg  # the `postgres` extra: imported only when a postgresql:// store is used

    connection = psycopg.connect(url, autocommit=True)
    # CREATE TABLE IF NOT EXISTS races with itself in PostgreSQL (two connections, or two
    # replicas starting, both create the table's type): one at a time, under an advisory lock.
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (POSTGRES_SCHEMA_LOCK,))
        for statement in _SCHEMA:
            connection.execute(statement)
    return connection


@asynccontextmanager
async def open_response_store(url: str) -> AsyncIterator[ResponseStore]:
    """The store at `url`; its connections open on first use and close on leaving."""
    check_store_url(url)
    store: _SqlStore
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_absolute():
            path = Path.cwd() / path
        store = _SqlStore(ConnectionPool(lambda: _sqlite_connect(path), (sqlite3.Error,)), "?")
    else:
        try:
            import psycopg
        except ImportError:
            raise ConfigError(
                "a postgresql:// response store needs psycopg: pip install 'smg-trio[postgres]'"
            ) from None
        store = _SqlStore(ConnectionPool(lambda: _postgres_connect(url), (psycopg.Error,)), "%s")
    try:
        yield store
    finally:
        await store.aclose()
