"""Pure. Which failures a request may be retried after, and how long it waits first
(docs/routing.md §3).

Only failures that say the worker could not take the request at all are retried: no engine
ready or reachable (`BackendUnavailable`), the engine died or went silent (`EngineDead`), or it
refused the request as overloaded or unavailable (`EngineRejected` with 429 or 503). A refusal
of the request itself (a 400, an engine's 500 on its content) would fail again anywhere. The
gateway retries only while nothing reached the client (`request/retrying.py`).
"""

from __future__ import annotations

import random
from typing import Final

from smg_trio.errors import (
    BackendProtocolError,
    BackendUnavailable,
    EngineDead,
    EngineRejected,
    GatewayError,
)

DEFAULT_MAX_RETRIES: Final = 2
DEFAULT_MIGRATION_LIMIT: Final = 1  # moves after output began (docs/resilience.md §9)
BACKOFF_BASE_S: Final = 0.02
BACKOFF_CAP_S: Final = 0.5
RETRYABLE_REJECTIONS: Final = frozenset({429, 503})


def retryable(error: GatewayError) -> bool:
    """The worker could not take the request; another worker may."""
    if isinstance(error, BackendUnavailable | EngineDead):
        return True
    return isinstance(error, EngineRejected) and error.status in RETRYABLE_REJECTIONS


def counts_against_worker(error: GatewayError) -> bool:
    """A failure its worker's circuit breaker counts (the retryable ones, and garbled replies)."""
    return retryable(error) or isinstance(error, BackendProtocolError)


def backoff_s(retry: int, rng: random.Random) -> float:
    """The wait before retry number `retry` (1, 2, ...): exponential, capped, and jittered
    between half and all of it so requests failed together do not come back together."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (retry - 1))
    return rng.uniform(ceiling / 2, ceiling)
