"""Opt-in: our ZMQ backend drives a REAL headless vLLM EngineCore, and its greedy tokens match
those of vLLM's own HTTP server run from the same venv on the same model.

Needs `SMG_TRIO_VLLM_VENV` (a venv with vllm, e.g. /opt/venvs/vllm) and `SMG_TRIO_VLLM_MODEL`
(e.g. /work/shared/models/tiny-llama); see docs/real-engines.md. Takes minutes:
    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest tests/backends/test_real_vllm_zmq.py -m real_engine -s
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

import httpx
import pytest
import trio

from smg_trio.backends.zmq_backend import ZmqBackend, open_zmq_backend
from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.model.folder import ModelDir, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams
from tests.backends.conformance import collect, finishes_of, tokens_of

VENV: Final = os.environ.get("SMG_TRIO_VLLM_VENV", "")
MODEL: Final = os.environ.get("SMG_TRIO_VLLM_MODEL", "")
PROMPT_TEXT: Final = "def hello(world):"
STARTUP_S: Final = 240.0  # first start compiles; READY usually comes after 25-45 s
SHUTDOWN_S: Final = 30.0
ABORT_SETTLE_S: Final = 0.5
COMMON_FLAGS: Final = ("--dtype", "float32", "--max-model-len", "2048")

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(
        not (VENV and MODEL),
        reason="set SMG_TRIO_VLLM_VENV and SMG_TRIO_VLLM_MODEL to run against a real vLLM",
    ),
    pytest.mark.timeout(900),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def start_vllm(arguments: Sequence[str], log: IO[bytes]) -> trio.Process:
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    command = [str(Path(VENV) / "bin" / "vllm"), "serve", MODEL, *arguments, *COMMON_FLAGS]
    log.write(f"$ {' '.join(command)}\n".encode())
    log.flush()
    # Its own process group: vLLM runs EngineCore in a child we must not orphan.
    return await trio.lowlevel.open_process(
        command, stdout=log, stderr=log, env=environment, start_new_session=True
    )


async def stop_vllm(process: trio.Process) -> None:
    """SIGTERM the group and wait (vLLM takes 3-10 s); SIGKILL it if it hangs or lingers."""
    with trio.CancelScope(shield=True):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with trio.move_on_after(SHUTDOWN_S):
            await process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # a hung parent, or an orphaned child
        await process.wait()


def greedy_request(model: ModelDir, prompt_ids: tuple[int, ...], **sampling: Any) -> Finalized:
    plan = GeneratePlan(
        request_id="real",
        endpoint=Endpoint.COMPLETION,
        model=model.served_name,
        prompt_ids=prompt_ids,
        sampling=SamplingParams(temperature=0.0, **sampling),
    )
    target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=model.eos_ids)
    return finalize(plan, target, model.tokenizer)


async def check_abort(backend: ZmqBackend, model: ModelDir, prompt_ids: tuple[int, ...]) -> None:
    """Early exit aborts: EngineCore's own `has_work()` (a utility call) turns False."""
    long_request = greedy_request(model, prompt_ids, ignore_eos=True)  # the rest of the context
    async with backend.open_stream(long_request) as stream:
        received = 0
        async for event in stream:
            assert isinstance(event, TokenDelta)
            received += len(event.token_ids)
            if received == 1:
                assert await backend.call_utility("has_work") is True
            if received >= 3:
                break
    left_at = trio.current_time()
    # The scheduler keeps an aborted id until its next step, so poll; unaborted, this request
    # would keep the engine busy for the rest of the 2048-token context (seconds).
    with trio.fail_after(ABORT_SETTLE_S):
        busy = True
        while busy:
            busy = await backend.call_utility("has_work")
    print(f"abort: has_work() False {1000 * (trio.current_time() - left_at):.1f} ms after leaving")
    assert backend.statistics().in_flight == 0


async def run_headless(
    model: ModelDir, prompt_ids: tuple[int, ...], log: IO[bytes]
) -> tuple[list[int], ChoiceFinished]:
    async with open_zmq_backend(
        runtime=Runtime.VLLM, vocab_size=model.tokenizer.vocab_size
    ) as backend:
        port = backend.handshake_port
        assert port is not None
        process = await start_vllm(
            [
                "--headless",
                "--data-parallel-size",
                "1",
                "--data-parallel-size-local",
                "1",
                "--data-parallel-address",
                "127.0.0.1",
                "--data-parallel-rpc-port",
                str(port),
            ],
            log,
        )
        try:
            started = trio.current_time()
            with trio.fail_after(STARTUP_S):
                await backend.wait_ready()
            statistics = backend.statistics()
            print(f"headless vLLM ready after {trio.current_time() - started:.1f} s: {statistics}")
            assert statistics.max_model_len == 2048
            events = await collect(backend, greedy_request(model, prompt_ids, max_tokens=16))
            await check_abort(backend, model, prompt_ids)
            again = await collect(backend, greedy_request(model, prompt_ids, max_tokens=16))
            assert tokens_of(again) == tokens_of(events)
            return tokens_of(events), finishes_of(events)[0]
        finally:
            await stop_vllm(process)


async def wait_healthy(base_url: str) -> None:
    """Until vLLM's HTTP server at `base_url` answers /health with 200, within STARTUP_S."""
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        with trio.fail_after(STARTUP_S):
            while True:
                try:
                    if (await client.get("/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(1)


async def run_http(prompt_ids: tuple[int, ...], log: IO[bytes]) -> dict[str, Any]:
    port = free_port()
    process = await start_vllm(
        ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)], log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(base)
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            response = await client.post(
                "/v1/completions",
                json={
                    "model": "tiny",
                    "prompt": list(prompt_ids),
                    "max_tokens": 16,
                    "temperature": 0,
                    "return_token_ids": True,
                },
            )
            response.raise_for_status()
            choice: dict[str, Any] = response.json()["choices"][0]
            return choice
    finally:
        await stop_vllm(process)


async def test_greedy_tokens_match_vllm_http_and_abort_stops_the_engine(tmp_path: Path) -> None:
    model = load_model_dir(MODEL)
    prompt_ids = tuple(model.tokenizer.encode(PROMPT_TEXT, add_special_tokens=True))
    log_path = tmp_path / "vllm.log"
    try:
        with log_path.open("ab") as log:
            ours, finish = await run_headless(model, prompt_ids, log)
            http = await run_http(prompt_ids, log)
    except BaseException:
        sys.stderr.write(log_path.read_text(errors="replace")[-20_000:])
        raise
    print(f"prompt ids: {list(prompt_ids)}")
    print(f"ZMQ  tokens: {ours} finish={finish.finish_reason} stop_reason={finish.stop_reason}")
    print(f"HTTP tokens: {http['token_ids']} finish={http['finish_reason']}")
    assert ours == http["token_ids"]
    assert finish.finish_reason == http["finish_reason"]
    assert finish.prompt_tokens == len(prompt_ids)
    assert finish.completion_tokens == len(ours)
    assert model.tokenizer.decode(ours, skip_special_tokens=True) == http["text"]
