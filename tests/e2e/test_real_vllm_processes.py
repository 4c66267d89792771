"""Opt-in: two gateway processes (as `serve --processes 2` runs them, docs/processes.md §3) as
the two clients of a REAL headless vLLM EngineCore: one handshake lists both, each process's
greedy text equals vLLM's own HTTP server's, a router stop on either process leaves the
engine with no work, and a restarted process takes the running engine back.

Needs `SMG_TRIO_VLLM_VENV` and `SMG_TRIO_VLLM_MODEL` (docs/real-engines.md). Takes minutes:
    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest tests/e2e/test_real_vllm_processes.py -m real_engine -s
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from smg_trio.model.folder import load_model_dir
from tests.backends.test_real_vllm_zmq import (
    MODEL,
    PROMPT_TEXT,
    STARTUP_S,
    VENV,
    run_http,
    start_vllm,
    stop_vllm,
)
from tests.e2e.two_processes import GatewayProcess, two_processes

ABORT_SETTLE_S: Final = 0.5  # as tests/backends/test_real_vllm_zmq.py; the figure is printed
GREEDY_TOKENS: Final = 16
RESTART_READY_S: Final = 10.0

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(
        not (VENV and MODEL),
        reason="set SMG_TRIO_VLLM_VENV and SMG_TRIO_VLLM_MODEL to run against a real vLLM",
    ),
    pytest.mark.timeout(900),
]


async def completion(process: GatewayProcess, **body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=process.base_url, timeout=120) as client:
        response = await client.post("/v1/completions", json=body)
    response.raise_for_status()
    choice: dict[str, Any] = response.json()["choices"][0]
    return choice


async def router_stop_leaves_no_work(
    process: GatewayProcess, prompt: list[int], stop: str
) -> float:
    """A stop the router finds (EngineCore never matches strings): the engine's own `has_work()`
    must turn False; returns how long after the answer that took."""
    choice = await completion(
        process, prompt=prompt, max_tokens=400, temperature=0, ignore_eos=True, stop=[stop]
    )
    assert choice["finish_reason"] == "stop"
    answered = trio.current_time()
    with trio.fail_after(ABORT_SETTLE_S):
        while await process.backend.call_utility("has_work"):
            pass
    return trio.current_time() - answered


async def test_two_processes_match_vllm_http_and_both_abort(tmp_path: Path) -> None:
    model = load_model_dir(MODEL)
    prompt = list(model.tokenizer.encode(PROMPT_TEXT, add_special_tokens=True))
    log_path = tmp_path / "vllm.log"
    try:
        with log_path.open("ab") as log:
            async with two_processes(
                tmp_path, "", 0.0, model_path=Path(MODEL), with_engine=False
            ) as setup:
                port = setup.handshake.rsplit(":", 1)[1]
                vllm = await start_vllm(
                    [
                        *("--headless", "--data-parallel-size", "1"),
                        *("--data-parallel-size-local", "1"),
                        *("--data-parallel-address", "127.0.0.1"),
                        *("--data-parallel-rpc-port", port),
                    ],
                    log,
                )
                try:
                    await setup.wait_ready(STARTUP_S)
                    greedy = {"prompt": prompt, "max_tokens": GREEDY_TOKENS, "temperature": 0}
                    texts = [(await completion(p, **greedy))["text"] for p in setup.processes]
                    stop = texts[0].split()[len(texts[0].split()) // 2]
                    settled = [
                        await router_stop_leaves_no_work(p, prompt, stop) for p in setup.processes
                    ]
                    # A restarted process: vLLM's sockets reconnect, and it answers the probe
                    # the kept registration makes us send (docs/processes.md §3).
                    await setup.stop(1)
                    restarted = await setup.start(1)
                    started = trio.current_time()
                    with trio.fail_after(RESTART_READY_S):
                        await restarted.backend.wait_ready()
                    back_after = trio.current_time() - started
                    texts.append((await completion(restarted, **greedy))["text"])
                finally:
                    await stop_vllm(vllm)
            http = await run_http(tuple(prompt), log)
    except BaseException:
        sys.stderr.write(log_path.read_text(errors="replace")[-20_000:])
        raise
    print(f"process 0: {texts[0]!r}\nprocess 1: {texts[1]!r}\nvLLM HTTP: {http['text']!r}")
    print(f"router stop {stop!r}: has_work() False after {[f'{s * 1000:.1f} ms' for s in settled]}")
    print(f"restarted process 1: ready after {back_after * 1000:.0f} ms: {texts[2]!r}")
    assert texts[0] == texts[1] == texts[2] == http["text"]
