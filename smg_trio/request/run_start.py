"""I/O. The create of a `/v1/responses` request that outlives its connection: a background
response, or a stream a client may resume (docs/client-apis.md §3.5). `admit_response` is the
one place such a run is admitted; everything that can refuse it does so there, before the
create is answered and before anything is stored:

1. a draining gateway (503), the body (every 400, as `Gateway.handle` prepares it), no ready
   worker (503), no store to keep the run (400);
2. the tenant's budget (`--api-keys`; docs/fleet.md §2): `TenantGate.reserve` charges the
   rates (a request and its prompt tokens, as a foreground request is charged) and takes a
   slot. A background create does not wait for a slot: it holds a place in the tenant's queue
   and its run waits there; a resumable stream's client waits for the slot here, as a
   foreground request does. Over the budget: the 429 with Retry-After a foreground request
   gets, and no run, no stored response.

Then `AdmittedResponse.start` (`ResponseRuns.start`) writes the run's row and starts its task:
`Gateway.handle` of the prepared plan with the reservation (`used` by the generation, so it is
charged once), the reservation `release`d when the task ends, giving back what was not used (a
run cancelled or failed before its generation began). A start that fails (a 409 on the id)
releases it too. The two steps are apart so that a caller may cancel the first (its client
left while it waited for a slot) and not the second (a run's row half written).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import msgspec

from smg_trio.core.endpoint_renderers import response_id
from smg_trio.core.run_events import QUEUED
from smg_trio.errors import BackendUnavailable, Draining
from smg_trio.request.arrival import Arrival
from smg_trio.request.endpoints import RESPONSES_PATH
from smg_trio.request.gateway import AdmittedRun, Gateway
from smg_trio.responses.run import LocalRun
from smg_trio.responses.runs import ResponseRuns
from smg_trio.routing.workers import NO_READY_WORKER
from smg_trio.sink import ClientSink
from smg_trio.tenancy.gate import TenantReservation
from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.responses_objects import Response


class AdmittedResponse:
    """A run `admit_response` let through: its response object, its generation and its
    tenant's reservation, held until `start` begins it (the caller's next step, with no
    checkpoint between). Nothing is stored before."""

    def __init__(
        self,
        runs: ResponseRuns,
        response: Response,
        handle: Callable[[ClientSink], Awaitable[None]],
        reservation: TenantReservation,
        *,
        background: bool,
    ) -> None:
        self._runs = runs
        self.response = response
        self._handle = handle
        self.reservation = reservation
        self.background = background

    async def start(self, *, creator_follows: bool = False) -> LocalRun:
        """Write the run's row and start its task (`ResponseRuns.start`); returns it at once.
        With `creator_follows`, it is subscribed for the caller (`runs.unsubscribe` when
        done). A start that fails (a 409 on the id) gives the reservation back."""
        try:
            return await self._runs.start(
                self.response.id,
                JSON_ENCODER.encode(self.response),
                self._generate,
                background=self.background,
                creator_follows=creator_follows,
            )
        except BaseException:  # no run took the reservation
            await self.reservation.release()
            raise

    async def _generate(self, sink: ClientSink) -> None:
        """The run's generation; the reservation's unused part is given back however it ends."""
        try:
            await self._handle(sink)
        finally:
            await self.reservation.release()


async def admit_response(
    gateway: Gateway,
    body: bytes,
    *,
    background: bool,
    arrival: Arrival,
) -> AdmittedResponse:
    """Everything that may refuse the create (module doc), `tenant`'s budget last; a
    resumable stream's create (not `background`) may wait here for the tenant's slot."""
    if gateway.live_requests.draining:
        raise Draining()
    plan, user = await gateway.prepare(
        RESPONSES_PATH, body, arrival.request_id, gateway.responses, arrival.tenant
    )
    if not gateway.ready_for(body):  # a worker of the body's model (docs/fleet.md §4)
        raise BackendUnavailable(NO_READY_WORKER)  # 503 now, not a run that fails
    gateway.runs.check_accepting(background=background)
    # A run always streams: its events are the log clients read.
    plan = msgspec.structs.replace(plan, stream=True, include_usage=True)
    assert plan.responses is not None
    response = Response.of(response_id(plan), int(time.time()), plan.model, plan.responses)
    if background:
        response = msgspec.structs.replace(response, status=QUEUED)
    prompt_tokens = sum(len(part.ids) for part in plan.prompts)
    reservation = await gateway.tenant_gate.reserve(
        arrival.tenant, prompt_tokens, wait=not background
    )
    run = AdmittedRun(plan, user, reservation)

    async def handle(sink: ClientSink) -> None:
        await gateway.handle_admitted(body, sink, arrival, run)

    return AdmittedResponse(gateway.runs, response, handle, reservation, background=background)
