"""Opt-in: a REAL headless vLLM EngineCore (stats logging on, as `vllm serve` runs by default)
sends its `prefix_cache_stats` with its scheduler stats, and the gateway's
`smg_trio_engine_prefix_cache_queries_total` / `_hits_total` equal the sums of the prompt tokens
and cached tokens its responses reported (docs/observability.md §1, docs/wire.md §A.7.4).

Needs `SMG_TRIO_VLLM_VENV` and `SMG_TRIO_VLLM_MODEL` (docs/real-engines.md). Takes a minute:
    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest tests/e2e/test_engine_prefix_cache_real_vllm.py -m real_engine -s
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

import httpx

from tests.e2e import real_vllm
from tests.e2e.test_engine_prefix_cache_metrics import engine_counters

pytestmark = list(real_vllm.MARKS)

SHARED: Final = (
    "You answer questions about the harbor. " + "Keep every answer short and kind. " * 90
)
SETTLE_S: Final = 10.0


def test_the_engines_own_counters_equal_the_responses_usage(tmp_path: Path) -> None:
    with (
        real_vllm.smg_trio_in_front_of_vllm("zmq", tmp_path) as url,
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        prompt_tokens = cached_tokens = 0
        for user in ("first", "second", "third", "first"):
            body = {
                "model": real_vllm.SERVED_NAME,
                "prompt": f"{SHARED}\nQuestion from the {user} user:",
                "max_tokens": 2,
                "temperature": 0,
            }
            response = client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            usage = response.json()["usage"]
            prompt_tokens += usage["prompt_tokens"]
            cached_tokens += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        deadline = time.monotonic() + SETTLE_S
        while True:
            counters = engine_counters(client.get("/metrics").text, "w1")
            if counters.get("queries") == prompt_tokens or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    print(f"usage: {cached_tokens}/{prompt_tokens} cached; engine counters: {counters}")
    assert cached_tokens > 0  # the repeats found the shared prompt cached
    assert counters["queries"] == prompt_tokens
    assert counters["hits"] == cached_tokens
    assert counters["requests"] == 4
