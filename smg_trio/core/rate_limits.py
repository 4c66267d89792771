"""Pure. A tenant's rate arithmetic: GCRA for requests per minute and tokens per minute.

GCRA (the generic cell rate algorithm) keeps one number per limit, the theoretical arrival
time `tat`: when the limit would be back to full had nothing more arrived. A limit of `limit`
units per `window_s` spends `interval_s = window_s / limit` seconds per unit and tolerates a
burst of `burst` units. A cost `c` at time `now` is allowed when

    max(tat, now) + c × interval_s − now ≤ burst × interval_s

and then `tat` becomes `max(tat, now) + c × interval_s`. Otherwise nothing changes, and the
same cost is allowed `retry_after_s` later. Over any span of `d` seconds at most
`burst + d / interval_s` units pass (docs/fleet.md §2 for why the bursts are what they are).

The same arithmetic runs in Redis as a Lua script (tenancy/redis_state.py) so that every
gateway process shares one `tat` per limit; the script and this module are tested against each
other. Times are floats in seconds on whatever clock the caller uses (Redis: its own `TIME`).
"""

from __future__ import annotations

import math
from typing import Final, Literal

import msgspec

MINUTE_S: Final = 60.0
# A rate limit of N requests per minute tolerates a burst of one second's share: OpenAI
# documents its limits as quantized the same way ("60,000 requests/minute may be enforced as
# 1,000 requests/second"), and it keeps a minute-long burst at about N, not 2N.
REQUEST_BURST_WINDOW_S: Final = 1.0
# ...and at least this much lateness is credited. With a burst of exactly one request, a
# request admitted late (the gateway busy, the client slow) pushes every later one back by its
# lateness: a minute-long flood at 60/min passed only 57 across two busy replicas. A client
# sending at exactly the limit, each request up to this late, is never refused.
REQUEST_JITTER_S: Final = 0.25

# Float rounding: a cost due within this share of an interval is due now (the Lua script too).
SLACK: Final = 1e-9

LimitKind = Literal["requests", "tokens"]


class Rate(msgspec.Struct, frozen=True):
    """`limit` units per `window_s`, with a tolerated burst of `burst` units."""

    limit: int
    window_s: float
    burst: float

    @property
    def interval_s(self) -> float:
        return self.window_s / self.limit


def requests_rate(per_minute: int) -> Rate:
    """Requests per minute: a burst of one second's share, and at least one request plus
    REQUEST_JITTER_S of lateness."""
    interval = MINUTE_S / per_minute
    share = per_minute * REQUEST_BURST_WINDOW_S / MINUTE_S
    return Rate(per_minute, MINUTE_S, max(share, 1.0 + REQUEST_JITTER_S / interval))


def tokens_rate(per_minute: int) -> Rate:
    """Tokens per minute: a burst of the whole minute, so that any prompt that fits in the
    limit at all can pass once the tenant was idle for a minute."""
    return Rate(per_minute, MINUTE_S, float(per_minute))


class Allowed(msgspec.Struct, frozen=True):
    tat: float  # the new theoretical arrival time
    remaining: int  # whole units that would still pass now


class Refused(msgspec.Struct, frozen=True):
    retry_after_s: float  # the same cost passes this much later (inf: never, it is too large)


def gcra(rate: Rate, tat: float, now: float, cost: float) -> Allowed | Refused:
    """Whether `cost` units pass now under `rate`, given the limit's `tat` (0: untouched)."""
    if cost > rate.burst:
        return Refused(math.inf)
    interval = rate.interval_s
    start = max(tat, now)
    new_tat = start + cost * interval
    allow_at = new_tat - rate.burst * interval
    if allow_at - now > interval * SLACK:
        return Refused(allow_at - now)
    return Allowed(new_tat, max(0, math.floor((now - allow_at) / interval + SLACK)))


def charge(rate: Rate, tat: float, now: float, cost: float) -> float:
    """`tat` after `cost` units that are spent whatever the limit says (the output tokens of a
    request already admitted): the debt delays the tenant's next requests instead."""
    return max(tat, now) + cost * rate.interval_s


class TenantRates(msgspec.Struct, frozen=True):
    """A tenant's rate limits; None: that limit is off."""

    requests: Rate | None = None
    tokens: Rate | None = None


class RateState(msgspec.Struct, frozen=True):
    requests_tat: float = 0.0
    tokens_tat: float = 0.0


class Admitted(msgspec.Struct, frozen=True):
    state: RateState
    requests_remaining: int | None
    tokens_remaining: int | None


class Limited(msgspec.Struct, frozen=True):
    kind: LimitKind  # which limit refused (requests first when both would)
    retry_after_s: float


def admit(rates: TenantRates, state: RateState, now: float, tokens: int) -> Admitted | Limited:
    """One request costing `tokens` prompt tokens: both limits pass (and both are charged) or
    neither is charged and the first that refuses says when to come back."""
    requests_tat, requests_left = state.requests_tat, None
    if rates.requests is not None:
        decision = gcra(rates.requests, state.requests_tat, now, 1)
        if isinstance(decision, Refused):
            return Limited("requests", decision.retry_after_s)
        requests_tat, requests_left = decision.tat, decision.remaining
    tokens_tat, tokens_left = state.tokens_tat, None
    if rates.tokens is not None:
        decision = gcra(rates.tokens, state.tokens_tat, now, tokens)
        if isinstance(decision, Refused):
            return Limited("tokens", decision.retry_after_s)
        tokens_tat, tokens_left = decision.tat, decision.remaining
    return Admitted(RateState(requests_tat, tokens_tat), requests_left, tokens_left)


def reconcile(rates: TenantRates, state: RateState, now: float, output_tokens: int) -> RateState:
    """The state after an admitted request's `output_tokens` are charged to its token limit."""
    if rates.tokens is None or output_tokens <= 0:
        return state
    return RateState(state.requests_tat, charge(rates.tokens, state.tokens_tat, now, output_tokens))


def uncharge(rate: Rate, tat: float, now: float, cost: float) -> float:
    """`tat` after `cost` units charged earlier are given back (an admission that was never
    used: the tenant pays for what runs). The cost comes off whatever was charged since; a
    `tat` in the past is as good as `now`, so the credit never goes beyond an idle limit's."""
    return max(now, tat - cost * rate.interval_s)


def refund(rates: TenantRates, state: RateState, now: float, tokens: int) -> RateState:
    """The state after an admitted request that never ran (a background response cancelled
    while it waited for a slot) gives back what `admit` charged: one request, `tokens`
    prompt tokens."""
    requests_tat, tokens_tat = state.requests_tat, state.tokens_tat
    if rates.requests is not None:
        requests_tat = uncharge(rates.requests, requests_tat, now, 1)
    if rates.tokens is not None:
        tokens_tat = uncharge(rates.tokens, tokens_tat, now, tokens)
    return RateState(requests_tat, tokens_tat)


def retry_after_header(retry_after_s: float) -> int:
    """`Retry-After` is whole seconds: rounded up, at least 1."""
    return max(1, math.ceil(retry_after_s))


def is_idle(rates: TenantRates, state: RateState, now: float) -> bool:
    """Whether the state is as good as untouched at `now` (it may be forgotten)."""
    return state.requests_tat <= now and state.tokens_tat <= now
