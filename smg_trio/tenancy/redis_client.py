"""I/O. A small Redis client for trio: RESP over trio sockets, replies parsed by hiredis.

Chosen over redis-py's asyncio client through the asyncio bridge by measurement (bench/RESULTS.md,
"Redis client under trio"): the calls here are one round trip each (a Lua script per request
admission), and crossing into the asyncio thread and back costs more than the round trip.

- `open_redis(url)` yields a `RedisClient`; `redis://[:PASSWORD@]HOST[:PORT][/DB]`.
- `call(*args)` checks out one idle connection (opening one if fewer than `max_connections`
  exist, else waiting for one), writes the command, reads exactly one reply and checks the
  connection back in. One call owns its connection for its whole round trip, so a reply can
  never be read by the wrong caller. A call cancelled or failed mid-round-trip closes its
  connection (its reply may still arrive), so the next call starts on a clean one.
- An error reply raises `RedisReplyError`; a socket or protocol failure raises
  `RedisUnavailable`. Deadlines are the caller's (a cancel scope around `call`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final
from urllib.parse import unquote, urlsplit

import hiredis
import trio

from smg_trio.errors import ConfigError

DEFAULT_PORT: Final = 6379
DEFAULT_MAX_CONNECTIONS: Final = 8
RECEIVE_BYTES: Final = 65536

Arg = bytes | str | int | float
Reply = bytes | int | list["Reply"] | None


class RedisUnavailable(Exception):
    """The server could not be reached, or the connection broke mid-call."""


class RedisReplyError(Exception):
    """The server answered with an error reply (e.g. NOSCRIPT, a script's error)."""


class RedisAddress:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "redis" or not parts.hostname:
            raise ConfigError(f"state URL {url!r}: expected redis://[:PASSWORD@]HOST[:PORT][/DB]")
        self.host = parts.hostname
        try:
            self.port = parts.port or DEFAULT_PORT
        except ValueError as exc:
            raise ConfigError(f"state URL {url!r}: bad port") from exc
        self.password = None if parts.password is None else unquote(parts.password)
        self.username = unquote(parts.username) if parts.username else None
        database = parts.path.strip("/")
        if database and not database.isdigit():
            raise ConfigError(f"state URL {url!r}: the path must be a database number")
        self.database = int(database) if database else 0
        if parts.query or parts.fragment:
            raise ConfigError(f"state URL {url!r}: query options are not supported")


class _Connection:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = hiredis.Reader(replyError=RedisReplyError)

    async def call(self, args: tuple[Arg, ...]) -> Reply:
        await self.stream.send_all(hiredis.pack_command(args))  # type: ignore[arg-type]
        while True:
            reply = self.reader.gets()
            if reply is not False:
                if isinstance(reply, RedisReplyError):
                    raise reply
                return reply  # type: ignore[no-any-return]
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise RedisUnavailable("the Redis server closed the connection")
            self.reader.feed(data)


class RedisClient:
    def __init__(
        self, address: RedisAddress, *, max_connections: int = DEFAULT_MAX_CONNECTIONS
    ) -> None:
        self.address = address
        self._idle: list[_Connection] = []
        self._slots = trio.Semaphore(max_connections)
        self._closed = False

    async def call(self, *args: Arg) -> Reply:
        async with self._slots:
            connection = self._idle.pop() if self._idle else await self._connect()
            try:
                reply = await connection.call(args)
            except RedisReplyError:
                self._idle.append(connection)  # a whole reply was read: still in step
                raise
            except BaseException as exc:
                connection.stream.socket.close()  # mid-round-trip: never reused
                if isinstance(exc, OSError | trio.BrokenResourceError | hiredis.ProtocolError):
                    raise RedisUnavailable(f"Redis call failed: {exc!r}") from exc
                raise
            if self._closed:
                connection.stream.socket.close()
            else:
                self._idle.append(connection)
            return reply

    async def _connect(self) -> _Connection:
        address = self.address
        try:
            stream = await trio.open_tcp_stream(address.host, address.port)
        except OSError as exc:
            raise RedisUnavailable(f"cannot reach Redis at {address.host}:{address.port}") from exc
        connection = _Connection(stream)
        try:
            if address.password is not None:
                auth: tuple[Arg, ...] = (address.password,)
                if address.username is not None:
                    auth = (address.username, address.password)
                await connection.call(("AUTH", *auth))
            if address.database:
                await connection.call(("SELECT", address.database))
        except BaseException as exc:
            stream.socket.close()
            if isinstance(exc, OSError | trio.BrokenResourceError):
                raise RedisUnavailable(f"Redis connection setup failed: {exc!r}") from exc
            raise
        return connection

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().stream.socket.close()


@asynccontextmanager
async def open_redis(url: str) -> AsyncIterator[RedisClient]:
    """A client for `url`; nothing is connected until the first call."""
    client = RedisClient(RedisAddress(url))
    try:
        yield client
    finally:
        client.close()
