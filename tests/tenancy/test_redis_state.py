"""tenancy/redis_state.py against a real redis-server: the Lua script decides as the pure
`core.rate_limits.admit` does on the same state, and the client recovers from a flushed script
cache and a restarted server."""

from __future__ import annotations

import math
import random
from typing import Final

import pytest
import trio

from harness.redis_server import redis_server
from smg_trio.core.rate_limits import (
    Admitted,
    Limited,
    RateState,
    TenantRates,
    admit,
    requests_rate,
    tokens_rate,
)
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.tenancy.redis_client import RedisClient, RedisUnavailable, open_redis
from smg_trio.tenancy.redis_state import RedisState
from tests.tenancy import needs_redis

TEST_TIMEOUT_S: Final = 30.0
CASES: Final = 300


async def redis_now(redis: RedisClient) -> float:
    reply = await redis.call("TIME")
    assert isinstance(reply, list)
    seconds, micros = reply
    assert isinstance(seconds, bytes)
    assert isinstance(micros, bytes)
    return int(seconds) + int(micros) / 1e6


def kind(decision: Admitted | Limited) -> str:
    return "admitted" if isinstance(decision, Admitted) else decision.kind


@needs_redis
async def test_the_script_decides_as_the_pure_arithmetic() -> None:
    rng = random.Random(32)
    compared = 0  # cases whose answer is the same anywhere in [now, after]
    with trio.fail_after(TEST_TIMEOUT_S):
        async with redis_server() as server, open_redis(server.url) as redis:
            state = RedisState(redis, lease_s=30.0)
            for case in range(CASES):
                rates = TenantRates(
                    requests=rng.choice([None, requests_rate(rng.randint(1, 6000))]),
                    tokens=rng.choice([None, tokens_rate(rng.randint(1, 100_000))]),
                )
                tenant = Tenant(f"t{case}", rates)
                tokens = rng.randint(0, 120_000)
                now = await redis_now(redis)
                before = RateState(now + rng.uniform(-5, 70), now + rng.uniform(-5, 70))
                await redis.call(
                    "HSET",
                    f"smg_trio:tenant:{{t{case}}}:rates",
                    "r",
                    f"{before.requests_tat:.6f}",
                    "t",
                    f"{before.tokens_tat:.6f}",
                )
                got = await state.admit(tenant, tokens)
                after = await redis_now(redis)  # the script's clock read was in [now, after]
                early = admit(rates, before, now, tokens)
                late = admit(rates, before, after, tokens)
                if kind(early) != kind(late):
                    continue  # on a boundary: either answer is right
                compared += 1
                assert kind(got) == kind(early), (rates, before, now, tokens)
                if isinstance(got, Limited):
                    assert isinstance(early, Limited)
                    if math.isinf(early.retry_after_s):
                        assert math.isinf(got.retry_after_s)
                    else:
                        assert early.retry_after_s - (after - now) <= got.retry_after_s
                        assert got.retry_after_s <= early.retry_after_s
                else:
                    assert isinstance(early, Admitted)
                    assert got.requests_remaining == early.requests_remaining or (
                        early.requests_remaining is not None
                        and got.requests_remaining is not None
                        and abs(got.requests_remaining - early.requests_remaining) <= 1
                    )
    assert compared > CASES * 0.9


@needs_redis
async def test_a_flushed_script_cache_and_a_restarted_server_are_recovered() -> None:
    tenant = Tenant("acme", TenantRates(requests=requests_rate(6000)))
    with trio.fail_after(TEST_TIMEOUT_S):
        async with redis_server() as server, open_redis(server.url) as redis:
            state = RedisState(redis, lease_s=30.0)
            assert isinstance(await state.admit(tenant, 1), Admitted)
            await redis.call("SCRIPT", "FLUSH")  # NOSCRIPT next: loaded again by EVAL
            assert isinstance(await state.admit(tenant, 1), Admitted)
            await server.kill()
            with pytest.raises(RedisUnavailable):
                await state.admit(tenant, 1)
