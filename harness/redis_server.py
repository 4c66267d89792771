"""I/O. A throwaway `redis-server` on a free loopback port, in the foreground, no persistence;
stopped by its PID (`kill` ends it at once: it keeps nothing) and waited for. Tests that need
it skip with a reason when the binary is absent (`make test` installs Debian's `redis-server`);
the fleet bench refuses to run."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

import trio

from harness.ports import free_port
from smg_trio.tenancy.redis_client import RedisUnavailable, open_redis

READY_S: Final = 10.0
REDIS_SERVER: Final = shutil.which("redis-server")


@dataclass
class RedisServer:
    url: str
    process: trio.Process

    async def kill(self) -> None:
        self.process.kill()
        with trio.CancelScope(shield=True):
            await self.process.wait()


@asynccontextmanager
async def redis_server() -> AsyncIterator[RedisServer]:
    assert REDIS_SERVER is not None
    port = free_port()
    argv = [
        REDIS_SERVER,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server = RedisServer(f"redis://127.0.0.1:{port}/0", process)
    try:
        async with open_redis(server.url) as redis:
            with trio.fail_after(READY_S):
                while True:
                    try:
                        if await redis.call("PING") == b"PONG":
                            break
                    except RedisUnavailable:
                        await trio.sleep(0.02)
        yield server
    finally:
        await server.kill()
