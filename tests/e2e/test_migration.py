"""Mid-stream migration end to end (docs/resilience.md §9): two workers with reference vLLM
engines as subprocesses in random mode (each token drawn from its whole context, as a model's
greedy choice is); over a hundred requests, half of them brought to their own token positions on
one engine (run_all's doc) before it is `kill -9`ed. Every answer must be the one the same request
gets when nothing fails, byte for byte, with one finish and the exact usage."""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from tests.e2e.live_server import LiveServer, live_server, parse_sse

TEST_TIMEOUT_S: Final = 40.0
REQUESTS: Final = 120  # round robin: half on the engine that is killed
POSITIONS: Final = 50  # requests killed mid-stream, each at its own token position
GROUP: Final = 12  # requests started together (six on the engine that is killed)
MOMENT_S: Final = 0.03  # engine 0 runs up to this long after each group: 10 x 30 ms < 80 steps
STEP_MS: Final = 4.0
# Mostly whole answers, which cost the client least; every kind of stream among them.
KINDS: Final = (
    ("chat_stream", "completion", "completion", "completion_stream")
    + ("completion",) * 4
    + ("chat_logprobs", "completion")
)
PATHS: Final = {
    "chat_stream": "/v1/chat/completions",
    "chat_logprobs": "/v1/chat/completions",
    "completion": "/v1/completions",
    "completion_stream": "/v1/completions",
}


def request_body(index: int, rng: random.Random) -> dict[str, Any]:
    kind = KINDS[index % len(KINDS)]
    body: dict[str, Any] = {
        "model": "demo_model",
        "temperature": 0,
        "ignore_eos": True,
        # Long enough that no request ends before the kill (the last starts after STAGGER_S).
        "max_tokens": rng.randint(80, 120),
    }
    if kind.startswith("chat"):
        body["messages"] = [{"role": "user", "content": f"Tell me story number {index}."}]
    else:
        body["prompt"] = f"Once upon a time, story {index} began"
    if kind.endswith("stream") or kind == "chat_logprobs":
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if kind == "chat_logprobs":
        body["logprobs"] = True
        body["top_logprobs"] = 2
    if index % 10 == 3:
        body["min_tokens"] = 60  # continued as min_tokens less what was received
    return body


def summary(body: dict[str, Any], status: int, raw: bytes) -> dict[str, Any]:
    """What must not change when the request migrates: text, finishes, usage, logprobs."""
    assert status == 200, raw
    if not body.get("stream"):
        answer = httpx.Response(200, content=raw).json()
        choice = answer["choices"][0]
        return {"text": choice["text"], "finishes": [choice["finish_reason"]], **_usage(answer)}
    events = parse_sse(raw)
    assert events[-1] == "[DONE]"
    text, finishes, logprobs, usage = "", [], [], None
    for event in events[:-1]:
        assert isinstance(event, dict), event
        assert "error" not in event, event
        usage = event.get("usage") or usage
        choices: list[dict[str, Any]] = event["choices"]  # type: ignore[assignment]
        for choice in choices:
            text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            if choice.get("finish_reason") is not None:
                finishes.append(choice["finish_reason"])
            if choice.get("logprobs"):
                logprobs.extend(choice["logprobs"]["content"])
    return {"text": text, "finishes": finishes, "logprobs": logprobs, **_usage({"usage": usage})}


def _usage(answer: dict[str, Any]) -> dict[str, Any]:
    usage = answer["usage"]
    return {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
    }


async def run_all(
    server: LiveServer,
    client: httpx.AsyncClient,
    bodies: list[dict[str, Any]],
    kill_with: random.Random | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Every request's `summary`, all started at once; or, with `kill_with`, engine 0 killed
    mid-stream, with the number of requests it had then.

    The kill: engine 0 is stopped (SIGSTOP), the requests are started in groups, and after each
    group is at an engine, engine 0 runs (SIGCONT) for a random moment. Each request there is
    thus at its own position when it is killed, the earlier groups further on, whatever the
    machine's load, and none of them ended before (their max_tokens outlast every moment)."""
    results: list[dict[str, Any]] = [{} for _ in bodies]
    before = routed(server)

    async def one(index: int) -> None:
        body = bodies[index]
        path = PATHS[KINDS[index % len(KINDS)]]
        async with client.stream("POST", path, json=body) as response:
            raw = await response.aread()
        results[index] = summary(body, response.status_code, raw)

    killed = 0
    async with trio.open_nursery() as nursery:
        if kill_with is None:
            for index in range(len(bodies)):
                nursery.start_soon(one, index)
        else:
            victim = server.processes[0]
            victim.send_signal(signal.SIGSTOP)
            for first in range(0, len(bodies), GROUP):
                group = range(first, min(first + GROUP, len(bodies)))
                for index in group:
                    nursery.start_soon(one, index)
                while routed(server) < before + group.stop:  # noqa: ASYNC110 (polls the pool)
                    await trio.sleep(0.002)
                victim.send_signal(signal.SIGCONT)
                await trio.sleep(kill_with.uniform(0.0, MOMENT_S))
                victim.send_signal(signal.SIGSTOP)
            killed = server.backend_of(0).statistics().in_flight
            victim.kill()
    return results, killed


def routed(server: LiveServer) -> int:
    """Requests the gateway has routed to a worker so far."""
    return sum(worker.requests for worker in server.serving.gateway.pool.snapshot())


def metric(exposition: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


async def test_a_killed_engine_costs_its_streams_nothing(tmp_path: Path) -> None:
    rng = random.Random(30)
    bodies = [request_body(index, rng) for index in range(REQUESTS)]
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path, workers=2, step_ms=STEP_MS, random_engines=True) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth, timeout=30) as client,
        ):
            expected, _ = await run_all(server, client, bodies)
            got, killed = await run_all(server, client, bodies, kill_with=rng)
            for index, (want, have) in enumerate(zip(expected, got, strict=True)):
                assert have == want, (index, bodies[index])
                assert have["finishes"] == ["length"]
                assert have["completion_tokens"] == bodies[index]["max_tokens"]
            exposition = (await client.get("/metrics")).text
            # Each request engine 0 had moved once, or started over if it had no token yet.
            moved = metric(exposition, "smg_trio_migrations_total{")
            retried = sum(worker.retries for worker in server.serving.gateway.pool.snapshot())
            assert moved + retried == killed
            assert moved >= POSITIONS
            assert metric(exposition, "smg_trio_migration_resume_seconds_count") == moved
            # Nothing is left running on the surviving engine.
            counters = await server.backend_of(1).call_utility("smg_trio_counters")
            assert counters["requests_active"] == 0
