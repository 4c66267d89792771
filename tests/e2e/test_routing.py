"""Routing end to end with the reference engines on loopback (docs/routing.md): power_of_two
favours the fast engine, cache_aware keeps a prefix on its worker, a dead engine's requests
are retried before their first byte, and admission control holds the engines to the limit."""

from __future__ import annotations

import signal
from collections import Counter
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Final

import httpx
import trio

from smg_trio.backends.base import EngineStream
from smg_trio.core.finalize import Finalized
from smg_trio.errors import EngineRejected
from smg_trio.routing.vocabulary import Worker
from tests.e2e.live_server import MODEL
from tests.e2e.routed_server import routed_server
from tests.routing.loaded_workers import TARGET, LoadedBackend

TEST_TIMEOUT_S: Final = 20.0
COMPLETIONS: Final = "/v1/completions"
P2C_REQUESTS: Final = 48


class AtCapacity(LoadedBackend):
    """A worker whose engine says it is ready and refuses every request as overloaded (429),
    as an engine at capacity does: each request it gets must be retried on another worker."""

    def open_stream(self, finalized: Finalized) -> AbstractAsyncContextManager[EngineStream]:
        return self

    async def __aenter__(self) -> EngineStream:
        await trio.lowlevel.checkpoint()
        raise EngineRejected("the engine is at capacity", status=429)

    async def __aexit__(self, *exc_info: object) -> None:
        await trio.lowlevel.checkpoint()

    async def wait_ready(self) -> None:
        await trio.lowlevel.checkpoint()


def completion(prompt: str, max_tokens: int = 4, **extra: object) -> dict[str, object]:
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, **extra}


async def send_all(
    base_url: str, bodies: list[dict[str, object]], concurrency: int
) -> list[httpx.Response]:
    """POST every body to /v1/completions, `concurrency` at a time, in order of `bodies`."""
    responses: list[httpx.Response | None] = [None] * len(bodies)
    limiter = trio.CapacityLimiter(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=20) as client:

        async def one(index: int) -> None:
            async with limiter:
                responses[index] = await client.post(COMPLETIONS, json=bodies[index])

        async with trio.open_nursery() as nursery:
            for index in range(len(bodies)):
                nursery.start_soon(one, index)
    return [response for response in responses if response is not None]


async def test_power_of_two_sends_most_requests_to_the_faster_engine(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with routed_server(tmp_path, [5.0, 50.0], policy="power_of_two") as server:
            fast, slow = server.backend_of(0), server.backend_of(1)
            served: Counter[str] = Counter()
            before = {"fast": fast.statistics(), "slow": slow.statistics()}
            assert before["fast"].in_flight == before["slow"].in_flight == 0
            bodies = [completion(f"request {i}", max_tokens=6) for i in range(P2C_REQUESTS)]
            responses = await send_all(server.base_url, bodies, concurrency=4)
            assert [response.status_code for response in responses] == [200] * P2C_REQUESTS
            rows = {row.id: row for row in server.serving.gateway.pool.snapshot()}
            served["fast"], served["slow"] = rows["w1"].requests, rows["w2"].requests
            assert served["fast"] + served["slow"] == P2C_REQUESTS
            # The full 400-request figure is `python -m bench routing` (bench/RESULTS.md).
            assert served["fast"] / P2C_REQUESTS >= 0.75, served


async def test_cache_aware_keeps_each_shared_prefix_on_one_worker(tmp_path: Path) -> None:
    # 8 distinct long prefixes (~500 tokens of the demo tokenizer each; the 2k-token figure is
    # tests/routing/test_cache_aware.py's) with short tails, 2 requests per prefix.
    prefixes = [f"Document {d}: " + f"paragraph {d} words " * 100 for d in range(8)]
    bodies = [completion(prefixes[i % 8] + f" question {i}?", max_tokens=1) for i in range(16)]
    with trio.fail_after(TEST_TIMEOUT_S):
        async with routed_server(tmp_path, [1.0, 1.0], policy="cache_aware") as server:
            landed: dict[int, Counter[str]] = {d: Counter() for d in range(8)}
            for index, body in enumerate(bodies):  # one at a time: the worker is the snapshot's
                before = {row.id: row.requests for row in server.serving.gateway.pool.snapshot()}
                responses = await send_all(server.base_url, [body], concurrency=1)
                assert responses[0].status_code == 200, responses[0].text
                after = server.serving.gateway.pool.snapshot()
                (worker,) = [row.id for row in after if row.requests > before[row.id]]
                landed[index % 8][worker] += 1
    same = sum(counts.most_common(1)[0][1] for counts in landed.values())
    assert same / len(bodies) >= 0.9, landed
    totals = sum(landed.values(), Counter())
    assert max(totals.values()) / len(bodies) <= 0.65, totals


async def test_requests_to_a_killed_engine_are_retried_on_the_other(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with routed_server(tmp_path, [2.0, 2.0], policy="round_robin") as server:
            victim = server.processes[0]
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            bodies = [completion(f"after the kill {i}", stream=i % 2 == 0) for i in range(20)]
            responses = await send_all(server.base_url, bodies, concurrency=4)
            assert [response.status_code for response in responses] == [200] * 20
            for response in responses:
                assert "error" not in response.text
            rows = {row.id: row for row in server.serving.gateway.pool.snapshot()}
            # Every attempt on the dead engine (those sent before the backend knew it dead)
            # failed before its first byte and was retried: each request ended on w2, once.
            assert rows["w1"].retries == rows["w1"].requests
            assert rows["w1"].failures == rows["w1"].requests
            assert rows["w2"].requests == 20


async def test_at_four_times_the_limit_the_engines_never_see_more_than_it(
    tmp_path: Path,
) -> None:
    limit = 4
    settings = {"max_concurrent_requests": limit, "max_queue": 4, "queue_timeout_s": 0.3}
    with trio.fail_after(TEST_TIMEOUT_S):
        # 50 ms steps: the admitted requests hold their slots 1.5 s, far longer than the 16
        # arrivals take even on a loaded machine (with 20 ms steps they once spread past the
        # 0.3 s queue timeout in the parallel phase, and late arrivals found freed slots).
        async with routed_server(tmp_path, [50.0, 50.0], **settings) as server:
            peak = 0
            done = trio.Event()

            async def watch() -> None:
                nonlocal peak
                while not done.is_set():
                    seen = sum(server.backend_of(i).statistics().in_flight for i in range(2))
                    peak = max(peak, seen)
                    await trio.sleep(0.002)

            bodies = [completion(f"load {i}", max_tokens=30, ignore_eos=True) for i in range(16)]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                responses = await send_all(server.base_url, bodies, concurrency=16)
                done.set()
            statuses = Counter(response.status_code for response in responses)
            # 30 steps of 50 ms: nobody finishes within the 0.3 s queue timeout, so the limit
            # runs, and the rest (queued or not) are turned away.
            assert statuses == {200: limit, 429: 16 - limit}, statuses
            for response in responses:
                if response.status_code == 429:
                    assert response.headers["retry-after"] == "1"
                    assert response.json()["error"]["code"] == "too_many_requests"
            assert 0 < peak <= limit
            assert server.serving.gateway.admission.rejected == 16 - limit
            # Every engine request finished before its response did: nothing left over.
            assert sum(server.backend_of(i).statistics().in_flight for i in range(2)) == 0


async def test_consistent_hash_keeps_a_session_on_its_worker(tmp_path: Path) -> None:
    sessions = [f"session-{i}" for i in range(4)]
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            routed_server(tmp_path, [1.0, 1.0], policy="consistent_hash") as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=10) as client,
        ):
            landed: dict[str, set[str]] = {session: set() for session in sessions}
            for turn in range(2):
                for session in sessions:
                    before = {r.id: r.requests for r in server.serving.gateway.pool.snapshot()}
                    # The header names the session; the body's `user` is the fallback key.
                    headers = {"x-session-id": session} if turn % 2 == 0 else {}
                    body = completion(f"turn {turn}", user=session)
                    response = await client.post(COMPLETIONS, json=body, headers=headers)
                    assert response.status_code == 200, response.text
                    after = server.serving.gateway.pool.snapshot()
                    landed[session] |= {r.id for r in after if r.requests > before[r.id]}
    assert all(len(workers) == 1 for workers in landed.values()), landed
    assert set().union(*landed.values()) == {"w1", "w2"}  # the sessions use both workers


async def test_a_refusing_worker_is_retried_around_then_its_breaker_opens(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with routed_server(tmp_path, [1.0], policy="round_robin") as server:
            pool = server.serving.gateway.pool
            pool.add(Worker("busy", TARGET, AtCapacity()))
            bodies = [completion(f"request {i}", stream=i % 2 == 1) for i in range(10)]
            responses = await send_all(server.base_url, bodies, concurrency=1)
            assert [response.status_code for response in responses] == [200] * 10
            assert all("error" not in response.text for response in responses)
            rows = {row.id: row for row in pool.snapshot(trio.current_time())}
            # Round-robin sent requests 2, 3 and 4 to "busy" first; each was refused before its
            # first byte and retried on w1, and the third failure in a row opened the breaker.
            busy = rows["busy"]
            assert (busy.requests, busy.failures, busy.retries) == (3, 3, 3)
            assert (busy.breaker, busy.routable) == ("open", False)
            assert rows["w1"].requests == 10
