"""The reference vLLM and SGLang gRPC engines serving a pooling model (`--runner pooling`):
Embed over real sockets, built and parsed with the gateway's own `wire.grpc_embed`.

The vectors are compared with `engines.pooling` run here: the same ids give the same
vector on every wire. The refusals are the real engines' (docs/wire.md §C.8, measured on vLLM
0.32 with smg-grpc-servicer 0.14.0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.grpc_pooling import (
    SGLANG_NOT_GENERATING,
    SGLANG_NOT_POOLING,
    VLLM_NOT_GENERATING,
    VLLM_NOT_POOLING,
)
from smg_trio.engines.pooling import pooled_values
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.grpc_embed import GrpcEmbedding, build_embed, parse_embed_response
from smg_trio.wire.grpc_messages import build_abort

from .grpc_harness import MESSAGES, STUBS, Engine, counters, run, start_engines, stop_engines
from .test_grpc_engines import request

POOLING = (Runtime.VLLM, Runtime.SGLANG)
CONTEXT = 32
PROMPT = (400, 401, 402, 403)
NOT_POOLING = {Runtime.VLLM: VLLM_NOT_POOLING, Runtime.SGLANG: SGLANG_NOT_POOLING}
NOT_GENERATING = {Runtime.VLLM: VLLM_NOT_GENERATING, Runtime.SGLANG: SGLANG_NOT_GENERATING}
POOLING_FLAGS = ("--runner", "pooling", "--max-model-len", str(CONTEXT), "--step-ms", "10")
SLOW_FLAGS = ("--runner", "pooling", "--step-ms", "400")


MODEL = load_engine_model(demo_model_path())


def embedding_of(ids: Sequence[int]) -> tuple[float, ...]:
    """What a reference engine pools for `ids` (task embed, the model's defaults)."""
    return pooled_values(
        ids, task="embed", hidden_size=MODEL.hidden_size, num_labels=MODEL.num_labels
    )


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    directory = tmp_path_factory.mktemp("grpc-pooling-engines")
    specs: list[tuple[Runtime, Sequence[str]]] = [(r, POOLING_FLAGS) for r in POOLING]
    specs += [(r, ("--step-ms", "10")) for r in POOLING]
    specs += [(r, SLOW_FLAGS) for r in POOLING]
    started = start_engines(specs, directory)
    names = [f"{kind}-{r.value}" for kind in ("pooling", "generate", "slow") for r in POOLING]
    try:
        yield dict(zip(names, started, strict=True))
    finally:
        stop_engines([engine.process for engine in started])


async def embed(engine: Engine, ids: Sequence[int], request_id: str = "e1") -> GrpcEmbedding:
    channel = engine.channel()
    try:
        stub = STUBS[engine.runtime](channel)
        return parse_embed_response(await stub.Embed(build_embed(engine.runtime, request_id, ids)))
    finally:
        channel.close()


def refusal(engine: Engine, ids: Sequence[int]) -> GRPCError:
    with pytest.raises(GRPCError) as refused:
        run(embed(engine, ids))
    return refused.value


@pytest.mark.parametrize("runtime", POOLING)
def test_embed_answers_the_prompts_pooled_vector(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    engine = engines[f"pooling-{runtime.value}"]
    answer = run(embed(engine, PROMPT))
    assert answer == GrpcEmbedding(values=embedding_of(PROMPT), prompt_tokens=len(PROMPT))
    assert run(embed(engine, PROMPT[:3])).values != answer.values
    full = tuple(range(5, 5 + CONTEXT))  # nothing is generated: the whole context may be pooled
    assert run(embed(engine, full)).prompt_tokens == CONTEXT


def test_both_engines_give_one_input_the_same_vector(engines: dict[str, Engine]) -> None:
    vllm_answer = run(embed(engines["pooling-vllm"], PROMPT))
    sglang_answer = run(embed(engines["pooling-sglang"], PROMPT))
    assert vllm_answer == sglang_answer


@pytest.mark.parametrize(
    ("runtime", "ids", "expected"),
    [
        (Runtime.VLLM, (), "The decoder prompt cannot be empty"),
        (Runtime.VLLM, (5,) * (CONTEXT + 1), "The decoder prompt (length 33) is longer than"),
        (Runtime.VLLM, (5, 99999), "Token id 99999 is out of vocabulary"),
        (Runtime.SGLANG, (), "The input cannot be empty"),
        (Runtime.SGLANG, (5,) * (CONTEXT + 1), "The input (33 tokens) is longer than"),
        (Runtime.SGLANG, (99999,), "Input token id 99999 is outside the vocabulary"),
    ],
)
def test_inputs_the_engine_cannot_pool_are_invalid_arguments(
    engines: dict[str, Engine], runtime: Runtime, ids: tuple[int, ...], expected: str
) -> None:
    refused = refusal(engines[f"pooling-{runtime.value}"], ids)
    assert refused.status is Status.INVALID_ARGUMENT
    assert (refused.message or "").startswith(expected)


@pytest.mark.parametrize("runtime", POOLING)
def test_a_pooling_model_refuses_generate_and_a_generative_one_refuses_embed(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    refused = refusal(engines[f"generate-{runtime.value}"], PROMPT)
    assert (refused.status, refused.message) == (Status.INVALID_ARGUMENT, NOT_POOLING[runtime])

    async def generate_on_pooling() -> None:
        channel = engines[f"pooling-{runtime.value}"].channel()
        try:
            async with STUBS[runtime](channel).Generate.open() as stream:
                await stream.send_message(request(runtime, max_tokens=2), end=True)
                await stream.recv_message()
        finally:
            channel.close()

    with pytest.raises(GRPCError) as generate:
        run(generate_on_pooling())
    assert generate.value.status is Status.INVALID_ARGUMENT
    assert generate.value.message == NOT_GENERATING[runtime]


@pytest.mark.parametrize("runtime", POOLING)
def test_model_info_says_whether_the_model_generates(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    async def is_generation(engine: Engine) -> bool:
        channel = engine.channel()
        try:
            pb2 = MESSAGES[runtime]
            info = await STUBS[runtime](channel).GetModelInfo(pb2.GetModelInfoRequest())
            return bool(info.is_generation)
        finally:
            channel.close()

    assert not run(is_generation(engines[f"pooling-{runtime.value}"]))
    assert run(is_generation(engines[f"generate-{runtime.value}"]))


@pytest.mark.parametrize("runtime", POOLING)
def test_concurrent_embeds_share_a_step(engines: dict[str, Engine], runtime: Runtime) -> None:
    engine = engines[f"pooling-{runtime.value}"]

    async def scenario() -> tuple[list[GrpcEmbedding], dict[str, int], dict[str, int]]:
        channel = engine.channel()
        try:
            before = await counters(channel)
            inputs = [(400 + i, 7) for i in range(8)]
            answers = await asyncio.gather(
                *(embed(engine, ids, f"b{i}") for i, ids in enumerate(inputs))
            )
            return list(answers), before, await counters(channel)
        finally:
            channel.close()

    answers, before, after = run(scenario())
    for i, answer in enumerate(answers):
        assert answer.values == embedding_of((400 + i, 7))
    assert after["requests_finished"] - before["requests_finished"] == 8
    assert after["steps"] - before["steps"] < 8
    assert after["tokens_generated"] == before["tokens_generated"]  # pooling generates nothing


@pytest.mark.parametrize("runtime", POOLING)
def test_a_cancelled_embed_leaves_the_batch_and_the_abort_rpc_fails_one(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    # A step every 0.4 s; an idle engine steps at once when work comes, so each call below
    # follows a primer that just had its step: it waits ~0.4 s for the next one.
    engine = engines[f"slow-{runtime.value}"]

    async def scenario() -> tuple[dict[str, int], dict[str, int], GRPCError]:
        channel = engine.channel()
        stub: Any = STUBS[runtime](channel)
        try:
            await embed(engine, PROMPT, "primer-1")
            before = await counters(channel)
            async with stub.Embed.open() as call:
                await call.send_message(build_embed(runtime, "gone", PROMPT), end=True)
                await asyncio.sleep(0.02)
                await call.cancel()  # RST_STREAM
            await asyncio.sleep(0.02)
            cancelled = await counters(channel)
            await embed(engine, PROMPT, "primer-2")
            doomed = asyncio.ensure_future(embed(engine, PROMPT, "doomed"))
            await asyncio.sleep(0.02)
            for abort in build_abort(runtime, ["doomed"]):
                await stub.Abort(abort)
            with pytest.raises(GRPCError) as failed:
                await doomed
            return before, cancelled, failed.value
        finally:
            channel.close()

    before, cancelled, failed = run(scenario())
    assert cancelled["requests_cancelled"] == before["requests_cancelled"] + 1
    assert cancelled["requests_active"] + cancelled["requests_waiting"] == 0
    assert failed.status is Status.INTERNAL
    assert failed.message == "Embed request doomed did not produce a result"
