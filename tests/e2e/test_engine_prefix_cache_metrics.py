"""The engine's own prefix-cache counters in `/metrics` (docs/observability.md §1, docs/routing.md
§9.5): the reference vLLM engine keeps a prefix cache and sends vLLM's `scheduler_stats` with
`prefix_cache_stats` deltas; the gateway sums them per engine, and the sums equal what the
requests' own usage reports (cached prompt tokens, prompt tokens). A reset is counted, and an
engine started with `--disable-log-stats` sends nothing to count."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.live_server import MODEL, LiveServer, live_server

TEST_S: Final = 30.0
SHARED: Final = "Shared system prompt of the desk: " + "keep every answer short and kind " * 12
PROMPTS: Final = (
    f"{SHARED} first user",
    f"{SHARED} second user, a little longer than the first",
    "An unrelated prompt with nothing in common",
    f"{SHARED} third user",
)


def engine_counters(text: str, worker: str) -> dict[str, float]:
    """`smg_trio_engine_prefix_cache_*_total` of `worker`, summed over its engines."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        prefix = "smg_trio_engine_prefix_cache_"
        if not family.name.startswith(prefix):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("worker") == worker:
                name = family.name.removeprefix(prefix)
                found[name] = found.get(name, 0.0) + sample.value
    return found


async def complete(http: httpx.AsyncClient, prompt: str) -> tuple[int, int]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    response = await http.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return usage["prompt_tokens"], details.get("cached_tokens", 0)


async def settled_counters(http: httpx.AsyncClient, worker: str, queries: int) -> dict[str, float]:
    """The counters once they count `queries` (the stats of a step can trail its last token
    by a message), within 5 s."""
    with trio.fail_after(5):
        while True:
            counters = engine_counters((await http.get("/metrics")).text, worker)
            if counters.get("queries") == queries:
                return counters
            await trio.sleep(0.02)


def worker_name(server: LiveServer) -> str:
    return server.serving.gateway.pool.workers[0].name


async def test_the_engines_counters_equal_the_requests_usage(tmp_path: Path) -> None:
    kv = ("--kv-events-endpoint", f"ipc://{tmp_path}/kv.sock")
    with trio.fail_after(TEST_S):
        async with (
            live_server(tmp_path, step_ms=0.5, engine_args=kv) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http,
        ):
            worker = worker_name(server)
            prompt_tokens = cached_tokens = 0
            for text in PROMPTS:
                prompt, cached = await complete(http, text)
                prompt_tokens += prompt
                cached_tokens += cached
            assert cached_tokens >= 2 * 16  # the repeats found the shared prompt's blocks
            counters = await settled_counters(http, worker, prompt_tokens)
            assert counters == {
                "queries": prompt_tokens,
                "hits": cached_tokens,
                "requests": len(PROMPTS),
                "preempted_requests": 0,
                "preempted_queries": 0,
                "preempted_hits": 0,
                "resets": 0,
            }
            # vLLM's reset_prefix_cache: the next stats say so, and nothing is found cached.
            assert await server.backend.call_utility("reset_prefix_cache") is True
            prompt, cached = await complete(http, PROMPTS[0])
            assert cached == 0
            after = await settled_counters(http, worker, prompt_tokens + prompt)
            assert (after["resets"], after["hits"], after["requests"]) == (
                1,
                cached_tokens,
                len(PROMPTS) + 1,
            )


async def test_an_engine_without_stats_logging_exports_no_counters(tmp_path: Path) -> None:
    engine = ("--kv-events-endpoint", f"ipc://{tmp_path}/kv.sock", "--disable-log-stats")
    with trio.fail_after(TEST_S):
        async with (
            live_server(tmp_path, step_ms=0.5, engine_args=engine) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http,
        ):
            for text in PROMPTS[:2]:
                await complete(http, text)
            text = (await http.get("/metrics")).text
    assert engine_counters(text, worker_name(server)) == {}
    assert "smg_trio_engine_kv_cache_usage_ratio{" not in text  # no load reports either
