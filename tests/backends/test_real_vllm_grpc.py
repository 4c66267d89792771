"""Opt-in: our gRPC backend drives a REAL vLLM gRPC engine (`vllm serve --grpc`, the
smg-grpc-servicer plugin), and its greedy tokens match those of vLLM's own HTTP server run from
the same venv on the same model; leaving a stream early aborts the request in the engine.

Needs `SMG_TRIO_VLLM_VENV` (a venv with vllm and smg-grpc-servicer 0.14.0, e.g.
/opt/venvs/vllm) and `SMG_TRIO_VLLM_MODEL` (e.g. /work/shared/models/tiny-llama); see
docs/real-engines.md. The two servers run one after the other. Takes minutes:
    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest tests/backends/test_real_vllm_grpc.py -m real_engine -s
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any, Final

import pytest
import trio
from grpclib.client import Channel

from smg_trio.backends.asyncio_bridge import AsyncioBridge, open_asyncio_bridge
from smg_trio.backends.grpc_backend import GrpcBackend, open_grpc_backend
from smg_trio.backends.grpc_services import close_channel
from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.model.folder import ModelDir, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire._proto import vllm_engine_grpc
from smg_trio.wire._proto import vllm_engine_pb2 as pb
from tests.backends.conformance import collect, finishes_of, tokens_of
from tests.backends.test_real_vllm_zmq import (
    MODEL,
    PROMPT_TEXT,
    STARTUP_S,
    VENV,
    free_port,
    run_http,
    start_vllm,
    stop_vllm,
)

ABORT_SETTLE_S: Final = 0.5

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(
        not (VENV and MODEL),
        reason="set SMG_TRIO_VLLM_VENV and SMG_TRIO_VLLM_MODEL to run against a real vLLM",
    ),
    pytest.mark.timeout(900),
]


def greedy_request(model: ModelDir, prompt_ids: tuple[int, ...], **sampling: Any) -> Finalized:
    plan = GeneratePlan(
        request_id="real",
        endpoint=Endpoint.COMPLETION,
        model=model.served_name,
        prompt_ids=prompt_ids,
        sampling=SamplingParams(temperature=0.0, **sampling),
    )
    return finalize(plan, WorkerTarget(runtime=Runtime.VLLM, wire=Wire.GRPC), model.tokenizer)


async def running_requests(bridge: AsyncioBridge, port: int) -> int:
    """The engine scheduler's running count (GetLoads), over a channel of our own."""

    async def ask() -> int:
        channel = Channel("127.0.0.1", port)
        try:
            loads = await vllm_engine_grpc.VllmEngineStub(channel).GetLoads(pb.GetLoadsRequest())
            return sum(load.num_running_reqs + load.num_waiting_reqs for load in loads.loads)
        finally:
            await close_channel(channel)

    return await bridge.run(ask)


async def check_abort(
    backend: GrpcBackend, model: ModelDir, prompt_ids: tuple[int, ...], log_path: Path
) -> None:
    """Early exit aborts: the servicer logs our Abort RPC, the scheduler runs nothing after."""
    long_request = greedy_request(model, prompt_ids, ignore_eos=True)  # the rest of the context
    port = int(backend.address.rsplit(":", 1)[1])
    async with open_asyncio_bridge() as bridge:
        async with backend.open_stream(long_request) as stream:
            engine_request_id = stream.engine_request_ids[0]
            received = 0
            async for event in stream:
                assert isinstance(event, TokenDelta)
                received += len(event.token_ids)
                if received >= 3:
                    break
        left_at = trio.current_time()
        with trio.fail_after(ABORT_SETTLE_S):
            while True:
                if await running_requests(bridge, port) == 0:
                    break
                await trio.sleep(0.005)
    elapsed_ms = 1000 * (trio.current_time() - left_at)
    print(f"abort: scheduler idle {elapsed_ms:.1f} ms after leaving (received {received} tokens)")
    with trio.fail_after(ABORT_SETTLE_S):
        while True:
            text = await trio.Path(log_path).read_text(errors="replace")
            abort_lines = [
                line
                for line in text.splitlines()
                if "Abort requests" in line and engine_request_id in line
            ]
            if abort_lines:
                break
            await trio.sleep(0.01)
    print(f"servicer log: {abort_lines}")
    assert backend.statistics().in_flight == 0


async def run_grpc(
    model: ModelDir, prompt_ids: tuple[int, ...], log: IO[bytes], log_path: Path
) -> tuple[list[int], ChoiceFinished]:
    port, kv_port = free_port(), free_port()
    kv_events = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://127.0.0.1:{kv_port}",
    }
    process = await start_vllm(
        [
            "--grpc",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--kv-events-config",
            json.dumps(kv_events),
        ],
        log,
    )
    try:
        async with open_grpc_backend(
            runtime=Runtime.VLLM, address=f"127.0.0.1:{port}", health_period_s=1.0
        ) as backend:
            started = trio.current_time()
            with trio.fail_after(STARTUP_S):
                await backend.wait_ready()
            statistics = backend.statistics()
            print(f"vLLM gRPC ready after {trio.current_time() - started:.1f} s: {statistics}")
            assert statistics.max_model_len == 2048
            events = await collect(backend, greedy_request(model, prompt_ids, max_tokens=16))
            log.flush()
            await check_abort(backend, model, prompt_ids, log_path)
            again = await collect(backend, greedy_request(model, prompt_ids, max_tokens=16))
            assert tokens_of(again) == tokens_of(events)
            return tokens_of(events), finishes_of(events)[0]
    finally:
        await stop_vllm(process)


async def test_greedy_tokens_match_vllm_http_and_leaving_aborts(tmp_path: Path) -> None:
    model = load_model_dir(MODEL)
    prompt_ids = tuple(model.tokenizer.encode(PROMPT_TEXT, add_special_tokens=True))
    log_path = tmp_path / "vllm.log"
    try:
        with log_path.open("ab") as log:
            ours, finish = await run_grpc(model, prompt_ids, log, log_path)
            http = await run_http(prompt_ids, log)
    except BaseException:
        sys.stderr.write(log_path.read_text(errors="replace")[-20_000:])
        raise
    print(f"prompt ids: {list(prompt_ids)}")
    print(f"gRPC tokens: {ours} finish={finish.finish_reason} stop_reason={finish.stop_reason}")
    print(f"HTTP tokens: {http['token_ids']} finish={http['finish_reason']}")
    assert ours == http["token_ids"]
    assert finish.finish_reason == http["finish_reason"]
    assert finish.prompt_tokens == len(prompt_ids)
    assert finish.completion_tokens == len(ours)
    assert model.tokenizer.decode(ours, skip_special_tokens=True) == http["text"]
