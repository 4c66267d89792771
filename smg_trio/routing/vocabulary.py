"""Pure. What routing talks about: a `Worker`, the `RoutingContext` of one request, and the
`Policy` that picks a worker for it (docs/routing.md §1).

A policy only ever sees candidates: workers that are ready, whose breaker lets a request
through and that are not being removed; the pool (`workers.py`) filters, the policy chooses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from smg_trio.backends.base import Backend
from smg_trio.core.finalize import WorkerTarget
from smg_trio.neutral.media import MediaSpan


class Worker(msgspec.Struct, frozen=True):
    """One engine worker: how requests are shaped for it, and its client."""

    name: str  # its id in the pool (`w1`, `w2`, ...): unique, URL-safe (DELETE /workers/{id})
    target: WorkerTarget
    backend: Backend
    spec: str = ""  # RUNTIME+WIRE://HOST:PORT with the bound port (a ZMQ port 0 resolved)
    model: str = ""  # the key (first served name) of the model it serves (docs/fleet.md §4)


class RoutingContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a policy may know of a request, built once it was prepared (before finalize)."""

    model: str | None = None
    """The served model name the client asked for (None: the first), for per-model policies."""
    model_key: str | None = None
    """The key of the model serving the request: only its workers are candidates (None: every
    worker, as for a pool of one model's workers)."""
    prompt_ids: tuple[int, ...] = ()
    """The (first) prompt's token ids: cache_aware and kv_events match their prefix."""
    media: tuple[MediaSpan, ...] = ()
    """Its images' spans by identifier: both policies key an image's blocks by it, as the
    engine's prefix cache does (docs/images.md §5)."""
    session_key: str | None = None
    """The sticky-session key: the configured header's value, else the body's `user`."""


EMPTY_CONTEXT = RoutingContext()


def in_flight(worker: Worker) -> int:
    """The worker's load: engine requests its backend has sent and not yet seen end (every
    data-parallel rank's together), the backends' own count (backends/in_flight.py)."""
    return worker.backend.statistics().in_flight


class Policy(Protocol):
    """Chooses the worker for one request."""

    def choose(self, candidates: Sequence[Worker], context: RoutingContext) -> Worker:
        """One of `candidates` (in pool order, never empty)."""
        ...
