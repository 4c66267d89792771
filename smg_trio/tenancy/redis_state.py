"""I/O. Tenant budgets shared by every gateway process and replica through Redis.

Each decision is one Lua script, atomic on the server, on the server's clock (`TIME`), so
replicas with skewed clocks still share one timeline:

- ADMIT: core/rate_limits.py's `admit` (both GCRA limits pass and are charged, or neither);
  the tenant's hash `smg_trio:tenant:{NAME}:rates` holds the two `tat`s and expires once both
  are in the past, so idle tenants cost nothing.
- RECONCILE: `reconcile` (output tokens charged at the end of a request).
- REFUND: `refund` (an admission that never ran given back: a background response cancelled
  while it waited for a slot).
- LEASE / RELEASE: max concurrent as a sorted set of leases scored by their expiry; expired
  leases (a process that died holding them) are dropped before counting. A lease lives for the
  request's deadline plus a grace, so a crashed replica's slots come back by themselves.

Scripts run by EVALSHA, loaded again on NOSCRIPT (a restarted or flushed server).
tests/tenancy/test_redis_state.py checks ADMIT against `admit` on the same inputs.
"""

from __future__ import annotations

import hashlib
import math
from typing import Final

from smg_trio.core.rate_limits import Admitted, Limited, LimitKind, Rate, RateState
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.tenancy.redis_client import Arg, RedisClient, RedisReplyError, Reply

KEY_PREFIX: Final = "smg_trio:tenant:"

_GCRA: Final = """
local function gcra(tat, now, cost, interval, burst)
  if cost > burst then return nil, -1 end
  local new_tat = math.max(tat, now) + cost * interval
  local allow_at = new_tat - burst * interval
  if allow_at - now > interval * 1e-9 then return nil, allow_at - now end
  return new_tat, math.max(0, math.floor((now - allow_at) / interval + 1e-9))
end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function tats(key)
  return tonumber(redis.call('HGET', key, 'r') or '0'), tonumber(redis.call('HGET', key, 't') or '0')
end
local function keep(key, rtat, ttat, now)
  redis.call('HSET', key, 'r', string.format('%.6f', rtat), 't', string.format('%.6f', ttat))
  local ms = math.ceil((math.max(rtat, ttat) - now) * 1000) + 1000
  redis.call('PEXPIRE', key, ms)
end
"""

# ARGV: requests interval, requests burst, tokens interval, tokens burst (burst < 0: off), cost
ADMIT_SCRIPT: Final = (
    _GCRA
    + """
local now = clock()
local rtat, ttat = tats(KEYS[1])
local rleft, tleft = -1, -1
if tonumber(ARGV[2]) >= 0 then
  local tat, left = gcra(rtat, now, 1, tonumber(ARGV[1]), tonumber(ARGV[2]))
  if tat == nil then return {0, 'requests', string.format('%.6f', left)} end
  rtat, rleft = tat, left
end
if tonumber(ARGV[4]) >= 0 then
  local tat, left = gcra(ttat, now, tonumber(ARGV[5]), tonumber(ARGV[3]), tonumber(ARGV[4]))
  if tat == nil then return {0, 'tokens', string.format('%.6f', left)} end
  ttat, tleft = tat, left
end
keep(KEYS[1], rtat, ttat, now)
return {1, rleft, tleft}
"""
)

# ARGV: tokens interval, output tokens
RECONCILE_SCRIPT: Final = (
    _GCRA
    + """
local now = clock()
local rtat, ttat = tats(KEYS[1])
ttat = math.max(ttat, now) + tonumber(ARGV[2]) * tonumber(ARGV[1])
keep(KEYS[1], rtat, ttat, now)
return 1
"""
)

# ARGV: requests interval (< 0: off), tokens interval (< 0: off), prompt tokens
REFUND_SCRIPT: Final = (
    _GCRA
    + """
local now = clock()
local rtat, ttat = tats(KEYS[1])
if tonumber(ARGV[1]) >= 0 then
  rtat = math.max(now, rtat - tonumber(ARGV[1]))
end
if tonumber(ARGV[2]) >= 0 then
  ttat = math.max(now, ttat - tonumber(ARGV[3]) * tonumber(ARGV[2]))
end
keep(KEYS[1], rtat, ttat, now)
return 1
"""
)

# ARGV: limit, lease id, lease lifetime (s)
LEASE_SCRIPT: Final = (
    _GCRA
    + """
local now = clock()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local expiry = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], string.format('%.6f', expiry), ARGV[2])
redis.call('EXPIREAT', KEYS[1], math.ceil(expiry) + 1)
return 1
"""
)

RELEASE_SCRIPT: Final = "return redis.call('ZREM', KEYS[1], ARGV[1])"


class Script:
    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def run(self, redis: RedisClient, keys: tuple[str, ...], *args: Arg) -> Reply:
        try:
            return await redis.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except RedisReplyError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await redis.call("EVAL", self.source, len(keys), *keys, *args)


_ADMIT: Final = Script(ADMIT_SCRIPT)
_RECONCILE: Final = Script(RECONCILE_SCRIPT)
_REFUND: Final = Script(REFUND_SCRIPT)
_LEASE: Final = Script(LEASE_SCRIPT)
_RELEASE: Final = Script(RELEASE_SCRIPT)


def _limit_args(rate: Rate | None) -> tuple[float, float]:
    return (1.0, -1.0) if rate is None else (rate.interval_s, rate.burst)


def _number(reply: Reply) -> float:
    assert isinstance(reply, bytes | int), reply
    return float(reply)


def _left(reply: Reply) -> int | None:
    value = int(_number(reply))
    return None if value < 0 else value


class RedisState:
    def __init__(self, redis: RedisClient, *, lease_s: float) -> None:
        self.redis = redis
        self.lease_s = lease_s

    async def admit(self, tenant: Tenant, tokens: int) -> Admitted | Limited:
        rates = tenant.rates
        reply = await _ADMIT.run(
            self.redis,
            (_key(tenant, "rates"),),
            *_limit_args(rates.requests),
            *_limit_args(rates.tokens),
            tokens,
        )
        assert isinstance(reply, list), reply
        if reply[0] == 1:
            # The state lives in Redis; the struct says only how much is left.
            return Admitted(RateState(), _left(reply[1]), _left(reply[2]))
        kind = reply[1]
        assert kind in (b"requests", b"tokens"), kind
        wait = _number(reply[2])
        limited: LimitKind = "requests" if kind == b"requests" else "tokens"
        return Limited(limited, math.inf if wait < 0 else wait)

    async def reconcile(self, tenant: Tenant, output_tokens: int) -> None:
        if tenant.rates.tokens is None or output_tokens <= 0:
            return
        await _RECONCILE.run(
            self.redis, (_key(tenant, "rates"),), tenant.rates.tokens.interval_s, output_tokens
        )

    async def refund(self, tenant: Tenant, tokens: int) -> None:
        rates = tenant.rates
        if rates.requests is None and rates.tokens is None:
            return
        await _REFUND.run(
            self.redis,
            (_key(tenant, "rates"),),
            -1.0 if rates.requests is None else rates.requests.interval_s,
            -1.0 if rates.tokens is None else rates.tokens.interval_s,
            tokens,
        )

    async def try_lease(self, tenant: Tenant, lease_id: str) -> bool:
        assert tenant.max_concurrent is not None
        reply = await _LEASE.run(
            self.redis, (_key(tenant, "leases"),), tenant.max_concurrent, lease_id, self.lease_s
        )
        return reply == 1

    async def release(self, tenant: Tenant, lease_id: str) -> None:
        await _RELEASE.run(self.redis, (_key(tenant, "leases"),), lease_id)


def _key(tenant: Tenant, what: str) -> str:
    # The braces make both of a tenant's keys one hash slot (Redis Cluster).
    return f"{KEY_PREFIX}{{{tenant.name}}}:{what}"
