"""The gRPC backend's Embed calls against the reference vLLM and SGLang engines serving a pooling
model (`--runner pooling`), on loopback: vectors, the checks made before sending, the engine's
refusals, and cancellation (RST_STREAM, then the Abort RPC) of every call of a cancelled scope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import msgspec
import pytest
import trio

from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.pooling import pooled_values
from smg_trio.errors import ClientError, EngineRejected
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest, PoolingTask
from smg_trio.neutral.runtime import Runtime
from tests.backends.grpc_reference import MODEL_PATH, ReferenceGrpcEngine, attach
from tests.engines.grpc_harness import Engine, start_engines, stop_engines

POOLING: Final = (Runtime.VLLM, Runtime.SGLANG)
CONTEXT: Final = 32
READY_S: Final = 5.0
SLOW_STEP_MS: Final = 500.0


MODEL = load_engine_model(MODEL_PATH)


def embedding_of(ids: Sequence[int]) -> tuple[float, ...]:
    """What a reference engine pools for `ids` (task embed, the model's defaults)."""
    return pooled_values(
        ids, task="embed", hidden_size=MODEL.hidden_size, num_labels=MODEL.num_labels
    )


def embed(
    ids: Sequence[int], request_id: str = "req", index: int = 0, **options: Any
) -> PoolingRequest:
    request = PoolingRequest(
        request_id=request_id, input_index=index, prompt_ids=tuple(ids), task=PoolingTask.EMBED
    )
    return msgspec.structs.replace(request, **options)


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    logs = tmp_path_factory.mktemp("grpc-embed-backend")
    model = ("--model-path", str(MODEL_PATH), "--max-model-len", str(CONTEXT))
    pooling = (*model, "--runner", "pooling")
    kinds: list[tuple[str, Sequence[str]]] = [
        ("pooling", (*pooling, "--step-ms", "2")),
        ("slow", (*pooling, "--step-ms", str(SLOW_STEP_MS))),
        ("generate", (*model, "--step-ms", "2")),
    ]
    specs = [(runtime, flags) for _, flags in kinds for runtime in POOLING]
    started = start_engines(specs, logs)
    names = [f"{kind}-{runtime.value}" for kind, _ in kinds for runtime in POOLING]
    try:
        yield dict(zip(names, started, strict=True))
    finally:
        stop_engines([engine.process for engine in started])


@asynccontextmanager
async def ready(engine: Engine) -> AsyncIterator[ReferenceGrpcEngine]:
    """A backend attached to `engine`, once ready; the test's time starts then."""
    async with attach(engine.runtime, engine.port, None) as attached:
        with trio.fail_after(READY_S):
            await attached.backend.wait_ready()
        yield attached


@pytest.mark.parametrize("runtime", POOLING)
async def test_each_input_gets_its_engines_vector(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    inputs = [(400 + i, 401, 402) for i in range(6)] + [tuple(range(5, 5 + CONTEXT))]
    async with ready(engines[f"pooling-{runtime.value}"]) as engine:
        backend = engine.backend
        with trio.fail_after(READY_S):
            answers: list[PooledOutput | None] = [None] * len(inputs)

            async def one(index: int) -> None:
                answers[index] = await backend.pool(embed(inputs[index], f"req-{index}", index))

            async with trio.open_nursery() as nursery:
                for index in range(len(inputs)):
                    nursery.start_soon(one, index)
        for ids, answer in zip(inputs, answers, strict=True):
            values = embedding_of(ids)
            assert answer == PooledOutput(values=values, shape=(64,), prompt_tokens=len(ids))
        assert backend.statistics().in_flight == 0


@pytest.mark.parametrize("runtime", POOLING)
async def test_inputs_the_engine_cannot_take_are_refused_before_sending(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    async with ready(engines[f"pooling-{runtime.value}"]) as engine:
        with trio.fail_after(READY_S):
            before = await engine.counters()
            for ids, expected in [
                ((), "at least one token"),
                ((5,) * (CONTEXT + 1), "more than the engine's context of 32"),
                ((5, 4001), r"token id 4001 is not in \[0, 4001\)"),
            ]:
                with pytest.raises(ClientError, match=expected):
                    await engine.backend.pool(embed(ids, "bad"))
            assert (await engine.counters())["requests_added"] == before["requests_added"]


@pytest.mark.parametrize("runtime", POOLING)
async def test_a_generative_engines_refusal_is_a_400(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    async with ready(engines[f"generate-{runtime.value}"]) as engine:
        with trio.fail_after(READY_S):
            with pytest.raises(EngineRejected) as refused:
                await engine.backend.pool(embed((400, 401), "not-pooling"))
        assert refused.value.status == 400
        assert "INVALID_ARGUMENT" in refused.value.message
        assert engine.backend.statistics().ready  # a refusal says nothing about its health


@pytest.mark.parametrize("runtime", POOLING)
async def test_a_cancelled_scope_cancels_and_aborts_every_call(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    # One step every 0.5 s; an idle engine steps at once when work arrives, so a primer goes
    # first: the calls after it wait for the next step, and are cancelled while they do.
    calls = 5
    async with ready(engines[f"slow-{runtime.value}"]) as engine:
        backend = engine.backend
        with trio.fail_after(READY_S):
            await backend.pool(embed((400,), "primer"))
            before = await engine.counters()
            async with trio.open_nursery() as nursery:
                for index in range(calls):
                    nursery.start_soon(backend.pool, embed((400 + index,), f"left-{index}", index))
                await trio.sleep(0.05)
                assert backend.statistics().in_flight == calls
                nursery.cancel_scope.cancel()
            after = await engine.counters()
        assert backend.statistics().in_flight == 0
        assert after["requests_active"] + after["requests_waiting"] == 0
        assert after["requests_added"] - before["requests_added"] == calls
        assert after["requests_finished"] == before["requests_finished"]
        assert after["abort_ids_received"] - before["abort_ids_received"] == calls


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"task": PoolingTask.CLASSIFY}, "task"),
        ({"dimensions": 16}, "dimensions"),
        ({"use_activation": False}, "use_activation"),
    ],
)
async def test_what_one_embed_call_cannot_carry_is_refused_naming_it(
    engines: dict[str, Engine], options: dict[str, Any], param: str
) -> None:
    async with ready(engines["pooling-vllm"]) as engine:
        with trio.fail_after(READY_S):
            before = await engine.counters()
            with pytest.raises(ClientError) as refused:
                await engine.backend.pool(embed((400, 401), **options))
            assert refused.value.param == param
            kept = await engine.backend.pool(embed((400, 401), use_activation=True))
            assert kept.values == embedding_of((400, 401))  # true is the model's default
            assert (await engine.counters())["requests_added"] == before["requests_added"] + 1
