"""Pure. `Arrival`: who sent a request and how, as its front end knows it before the body is
prepared; the one value every front end hands `Gateway.handle` beside the path, the body and the
sink (docs/architecture.md §3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from smg_trio.observability.request_ids import new_request_id
from smg_trio.tenancy.api_keys import Tenant

if TYPE_CHECKING:
    from smg_trio.request.memory_budget import Reservation
    from smg_trio.responses.store.service import ResponsesService

DEFAULT_SESSION_HEADER: Final = "x-session-id"
"""The sticky-session header `consistent_hash` keys on (`--session-header`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrival:
    """One request's arrival.

    - `request_id`: the client's `x-request-id`, else a fresh one; the plan's id, so the
      response id and the engine request id's stem, and on every log line of the request.
    - `session_key`: the sticky-session header's value (consistent_hash); without it the body's
      `user` is the key.
    - `transport`, `client`, `trace_headers`: for the request's observation (metrics label, log
      line, the W3C trace context of its span; docs/observability.md).
    - `tenant`: the one its API key names (`--api-keys`), charged through the tenant gate
      (docs/fleet.md §2).
    - `body_reservation`: the memory budget's hold on the body's bytes, taken by the front end
      while it read them (docs/limits.md §4); None: the gateway reserves them itself.
    - `responses`: the store's side of /v1/responses for this request when the connection has
      its own (a Responses WebSocket's connection-local cache); None: the gateway's.
    """

    request_id: str = field(default_factory=new_request_id)
    session_key: str | None = None
    transport: str = "http1"
    client: str = "-"
    trace_headers: Mapping[str, str] | None = None
    tenant: Tenant | None = None
    body_reservation: Reservation | None = None
    responses: ResponsesService | None = None
