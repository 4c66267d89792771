"""A tenant's budget at the create of a Responses run (docs/fleet.md §2, docs/client-apis.md
§3.5), through a real gateway and its reference engine, the budget in the process or in a real
`redis-server`: a background create over its tenant's rate is refused with the 429 a
foreground request gets and leaves nothing stored; one over `max_concurrent` waits `queued`
in the tenant's queue (a full queue: 429 at once); one cancelled while it waits gives its place
and its charge back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import openai
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from harness.redis_server import redis_server
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.request.endpoints import RESPONSES_PATH, prepare_for_path
from tests.e2e.live_server import MODEL, LiveServer, live_server
from tests.tenancy import needs_redis

TEST_TIMEOUT_S: Final = 60.0
PROMPT: Final = "How does the gateway work?"
CREATE: Final = {"model": MODEL, "input": PROMPT, "background": True}
# Long enough (the engine replays a text that cycles, 50 ms a token) to hold the slot until
# the test cancels it.
HOLD: Final = {**CREATE, "max_output_tokens": 600}
ENDED: Final = frozenset({"completed", "incomplete", "failed", "cancelled"})


def prompt_tokens(body: dict[str, Any]) -> int:
    """What the gateway charges a create at admission: its prompt's tokens."""
    model = load_model_dir(demo_model_path())
    plan, _ = prepare_for_path(
        RESPONSES_PATH, json.dumps(body).encode(), model.prompt_model(), lambda _: None, "p", []
    )
    return sum(len(part.ids) for part in plan.prompts)


P: Final = prompt_tokens(CREATE)
KEYS: Final = f"""
[keys]
"sk-acme-0001" = "acme"
"sk-solo-0001" = "solo"

[tenants.acme]
requests_per_minute = 60

[tenants.solo]
# Two prompts fit, a third does not (until 12 s of refill: far more than the test takes).
tokens_per_minute = {int(P * 2.5)}
max_concurrent = 1
max_queue = 1
"""

state = pytest.mark.parametrize(
    "shared",
    [
        pytest.param(False, id="in-process"),
        pytest.param(
            True,
            id="redis",
            marks=needs_redis,
        ),
    ],
)


@asynccontextmanager
async def tenant_server(tmp_path: Path, key: str, *, shared: bool) -> AsyncIterator[LiveServer]:
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    async with (
        state_url(shared) as url,
        live_server(tmp_path, api_key=key, api_keys=keys, step_ms=50.0, state_url=url) as server,
    ):
        yield server


@asynccontextmanager
async def state_url(shared: bool) -> AsyncIterator[str | None]:
    """A real redis-server's URL for the tenants' state, or None: in the process."""
    if not shared:
        yield None
        return
    async with redis_server() as redis:
        yield redis.url


async def ended(http: httpx.AsyncClient, response_id: str) -> dict[str, Any]:
    """Poll `GET /v1/responses/{id}` until the response ended (the caller's deadline)."""
    while True:
        got: dict[str, Any] = (await http.get(f"/v1/responses/{response_id}")).json()
        if got["status"] in ENDED:
            return got
        await trio.sleep(0.05)


async def sample(http: httpx.AsyncClient, name: str, **labels: str) -> float:
    text = (await http.get("/metrics")).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.labels == labels
    )


@state
async def test_a_background_create_over_the_rate_is_a_429_and_leaves_nothing(
    tmp_path: Path, shared: bool
) -> None:
    """At 60 a minute, a background create right after another is OpenAI's 429 itself (the
    SDK raises RateLimitError), with Retry-After and the body a foreground request gets; no
    response is kept under its id. A resumable stream's create is refused the same way. Within
    the budget again, a background create completes."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            tenant_server(tmp_path, "sk-acme-0001", shared=shared) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http,
        ):
            sdk = openai.OpenAI(
                base_url=f"{server.base_url}/v1", api_key="sk-acme-0001", max_retries=0
            )
            with sdk:
                first = await trio.to_thread.run_sync(
                    lambda: sdk.responses.create(model=MODEL, input=PROMPT, background=True)
                )
                with pytest.raises(openai.RateLimitError) as refused:
                    await trio.to_thread.run_sync(
                        lambda: sdk.responses.create(
                            model=MODEL,
                            input=PROMPT,
                            background=True,
                            extra_headers={"x-request-id": "over-budget"},
                        )
                    )
            foreground = await http.post("/v1/responses", json={"model": MODEL, "input": PROMPT})
            streamed = await http.post(
                "/v1/responses",
                json={"model": MODEL, "input": PROMPT, "stream": True},
                headers={"x-request-id": "over-budget-stream"},
            )
            kept = [
                (await http.get(f"/v1/responses/{response_id}")).status_code
                for response_id in ("resp_over-budget", "resp_over-budget-stream")
            ]
            first_end = await ended(http, first.id)
            await trio.sleep(int(refused.value.response.headers["retry-after"]))
            later = await http.post("/v1/responses", json=CREATE)
            later_end = await ended(http, later.json()["id"])
            outcomes = {
                outcome: await sample(
                    http, "smg_trio_tenant_requests_total", tenant="acme", outcome=outcome
                )
                for outcome in ("admitted", "rate_limited_requests", "refunded")
            }
    assert first.status == "queued"
    assert first_end["status"] == "completed"
    answer = refused.value.response
    assert answer.status_code == 429
    assert int(answer.headers["retry-after"]) >= 1
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "Rate limit reached for tenant 'acme' on requests per min (RPM)" in error["message"]
    # The same answer a foreground request gets
    assert foreground.status_code == 429
    assert set(foreground.json()["error"]) == set(error)
    assert foreground.json()["error"]["code"] == error["code"]
    assert "retry-after" in foreground.headers
    assert streamed.status_code == 429
    assert streamed.json()["error"]["code"] == "rate_limit_exceeded"
    assert kept == [404, 404]  # nothing stored, no run
    assert later.status_code == 200
    assert later_end["status"] == "completed"
    # Each charged once: the two that ran admitted, three refused, nothing given back.
    assert outcomes == {"admitted": 2, "rate_limited_requests": 3, "refunded": 0}


@state
async def test_over_max_concurrent_a_background_create_waits_queued_and_a_cancel_gives_back(
    tmp_path: Path, shared: bool
) -> None:
    """`solo` runs one response at a time, one more may wait, and its tokens fit two prompts:
    A runs; B is answered `queued` and waits; C finds the queue full (429 at once, nothing
    stored). B cancelled before it began gives back its place and its prompt's tokens: D is
    then admitted (without the refund its tokens would be over the budget), waits, and
    completes once A is cancelled."""
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            tenant_server(tmp_path, "sk-solo-0001", shared=shared) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth, timeout=30) as http,
        ):
            a = (await http.post("/v1/responses", json=HOLD)).json()
            b = await http.post("/v1/responses", json=CREATE)
            c = await http.post("/v1/responses", json=CREATE, headers={"x-request-id": "full"})
            c_kept = (await http.get("/v1/responses/resp_full")).status_code
            await trio.sleep(0.5)  # B still waits: its status says so
            b_waiting = (await http.get(f"/v1/responses/{b.json()['id']}")).json()["status"]
            waiting = await sample(http, "smg_trio_tenant_requests_waiting", tenant="solo")
            b_cancelled = (await http.post(f"/v1/responses/{b.json()['id']}/cancel")).json()
            d = await http.post("/v1/responses", json=CREATE)
            e = await http.post("/v1/responses", json=CREATE)  # the queue is full again
            assert d.status_code == 200, d.text  # without B's refund: a 429 `tokens`
            await http.post(f"/v1/responses/{a['id']}/cancel")
            d_end = await ended(http, d.json()["id"])
            after = {
                name: await sample(http, name, tenant="solo")
                for name in ("smg_trio_tenant_requests_waiting", "smg_trio_tenant_requests_running")
            }
            refunded = await sample(
                http, "smg_trio_tenant_requests_total", tenant="solo", outcome="refunded"
            )
    assert b.status_code == 200
    assert b.json()["status"] == "queued"
    assert b_waiting == "queued"
    assert waiting == 1
    assert c.status_code == 429
    assert c.headers["retry-after"] == "1"
    assert c.json()["error"]["code"] == "rate_limit_exceeded"
    assert "queue of 1 is full" in c.json()["error"]["message"]
    assert c_kept == 404
    assert b_cancelled["status"] == "cancelled"
    assert e.status_code == 429
    assert d_end["status"] == "completed", d_end
    assert after == {"smg_trio_tenant_requests_waiting": 0, "smg_trio_tenant_requests_running": 0}
    assert refunded == 1


async def test_a_resumable_stream_waits_for_its_slot_in_the_create_and_leaves_with_its_client(
    tmp_path: Path,
) -> None:
    """A resumable stream's client waits on its connection, so its create waits for the
    tenant's slot as a foreground request does; the client leaving takes it out of the queue at
    once and leaves nothing stored, and its place goes to the next create."""
    waiting = "smg_trio_tenant_requests_waiting"
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            tenant_server(tmp_path, "sk-solo-0001", shared=False) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth, timeout=30) as http,
        ):
            a = (await http.post("/v1/responses", json=HOLD)).json()
            leaver = trio.CancelScope()

            async def stream_create() -> None:
                with leaver:
                    async with httpx.AsyncClient(
                        base_url=server.base_url, headers=server.auth
                    ) as client:
                        await client.post(
                            "/v1/responses",
                            json={"model": MODEL, "input": PROMPT, "stream": True},
                            headers={"x-request-id": "left"},
                        )
                    raise AssertionError("the create must wait for the slot")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream_create)
                while await sample(http, waiting, tenant="solo") != 1:  # noqa: ASYNC110
                    await trio.sleep(0.01)  # the gateway's side: no event to wait on
                leaver.cancel()  # the client leaves: its connection closes
            left_at = trio.current_time()
            while await sample(http, waiting, tenant="solo") != 0:  # noqa: ASYNC110
                await trio.sleep(0.01)
            left_s = trio.current_time() - left_at
            kept = (await http.get("/v1/responses/resp_left")).status_code
            b = await http.post("/v1/responses", json=CREATE)  # the queue's place is free
            await http.post(f"/v1/responses/{a['id']}/cancel")
            b_end = await ended(http, b.json()["id"])
    assert left_s < 1.0
    assert kept == 404
    assert b.status_code == 200
    assert b_end["status"] == "completed"
