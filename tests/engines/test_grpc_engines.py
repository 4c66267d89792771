"""The five reference gRPC engines as real subprocesses, driven by a grpclib client.

Requests are built with the gateway's own builders (`wire.grpc_messages`) and replies parsed
with its parser (`wire.grpc_responses`), so these tests also pin that both ends agree. Tokens
are compared with `engines.generation` run in-process: the ZMQ engines' tests compare with the
same, so a prompt gets the same greedy tokens over every wire. Engines in "random" mode never
say EOS here (probability 0); "replay" engines say REPLAY_TEXT, then EOS, cycling.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import signal
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.generation import Generation, Greedy, StopRules
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire.grpc_messages import build_abort, build_generate
from smg_trio.wire.grpc_responses import (
    GrpcChunk,
    GrpcComplete,
    GrpcEvent,
    parse_generate_response,
)

from .grpc_harness import (
    MESSAGES,
    STUBS,
    Engine,
    counters,
    generate,
    run,
    start_engines,
    stop_engines,
    wait_for_counters,
)

ALL = [Runtime.SGLANG, Runtime.VLLM, Runtime.TOKENSPEED, Runtime.MLX, Runtime.TRTLLM]
CONTEXT = 4096
PROMPT = (400, 401, 402, 403)
STEP_FLAGS = ("--step-ms", "10")
RANDOM_FLAGS = ("--eos-probability", "0", *STEP_FLAGS)
REPLAY_TEXT = "The quick brown fox jumps over the lazy dog. "
TOKENIZER = load_model_dir(demo_model_path()).tokenizer
REPLAY_IDS = tuple(TOKENIZER.encode(REPLAY_TEXT, add_special_tokens=False))
EOS = 0  # the demo model's first EOS id: what a replay says after the text
LAZY_END = REPLAY_IDS.index(TOKENIZER.encode(" lazy", add_special_tokens=False)[0]) + 1
DOG_IDS = tuple(TOKENIZER.encode(" dog", add_special_tokens=False))
DOG_END = REPLAY_IDS.index(DOG_IDS[-1]) + 1
REPLAY_ENGINES = (Runtime.VLLM, Runtime.TRTLLM, Runtime.TOKENSPEED)


MODEL = load_engine_model(demo_model_path(), eos_probability=0.0)  # as the random engines


def greedy(max_tokens: int) -> list[int]:
    """What every random-mode engine says to PROMPT, computed here."""
    generation = Generation(
        MODEL.source, PROMPT, Greedy(), StopRules(max_tokens=max_tokens, max_model_len=CONTEXT)
    )
    while generation.step().finish is None:
        pass
    return generation.output_ids


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    directory = tmp_path_factory.mktemp("grpc-engines")
    replay = directory / "replay.txt"
    replay.write_text(REPLAY_TEXT, encoding="utf-8")
    replay_flags = ("--mode", "replay", "--replay-file", str(replay), *STEP_FLAGS)
    specs: list[tuple[Runtime, Sequence[str]]] = [(runtime, RANDOM_FLAGS) for runtime in ALL]
    specs += [(runtime, replay_flags) for runtime in REPLAY_ENGINES]
    started = start_engines(specs, directory)
    names = [f"random-{r.value}" for r in ALL] + [f"replay-{r.value}" for r in REPLAY_ENGINES]
    try:
        yield dict(zip(names, started, strict=True))
    finally:
        stop_engines([engine.process for engine in started])


def request(
    runtime: Runtime, request_id: str = "r1", *, stream: bool = True, **sampling: Any
) -> Any:
    """The runtime's GenerateRequest as the gateway builds it (completion endpoint: stop ids
    and no_stop_trim reach every engine)."""
    sampling.setdefault("temperature", 0.0)
    plan = GeneratePlan(
        request_id=request_id,
        endpoint=Endpoint.COMPLETION,
        model="demo",
        prompt_ids=PROMPT,
        sampling=SamplingParams(**sampling),
    )
    target = WorkerTarget(runtime=runtime, wire=Wire.GRPC)
    (engine_request,) = finalize(plan, target, TOKENIZER).requests
    return build_generate(runtime, engine_request, request_id, stream=stream)


def streamed(events: Sequence[GrpcEvent]) -> tuple[list[int], GrpcComplete]:
    """The chunks' tokens and the closing complete (which must be the last message)."""
    *chunks, complete = events
    assert isinstance(complete, GrpcComplete)
    assert all(isinstance(chunk, GrpcChunk) for chunk in chunks)
    return [
        t for chunk in chunks if isinstance(chunk, GrpcChunk) for t in chunk.token_ids
    ], complete


# ---- generation -------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ALL)
def test_greedy_tokens_match_the_shared_generation(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    engine = engines[f"random-{runtime.value}"]
    expected = greedy(12)
    tokens, complete = streamed(run(generate(engine, request(runtime, max_tokens=12))))
    assert tokens == expected
    assert complete.finish_reason == "length"
    assert complete.stop_reason is None
    # What the complete repeats differs per engine (docs/wire.md §C): vLLM, SGLang and TokenSpeed
    # the last delta, TRT-LLM every token, MLX nothing.
    repeated = {
        Runtime.VLLM: expected[-1:],
        Runtime.SGLANG: expected[-1:],
        Runtime.TOKENSPEED: expected[-1:],
        Runtime.TRTLLM: expected,
        Runtime.MLX: [],
    }
    assert list(complete.token_ids) == repeated[runtime]
    (only,) = run(generate(engine, request(runtime, "r2", stream=False, max_tokens=12)))
    assert isinstance(only, GrpcComplete)
    assert list(only.token_ids) == expected
    assert only.finish_reason == "length"


@pytest.mark.parametrize("runtime", ALL)
def test_stop_token_ids_stop_every_engine(engines: dict[str, Engine], runtime: Runtime) -> None:
    expected = greedy(12)
    stop_at = next(i for i, t in enumerate(expected) if i >= 3 and t not in expected[:i])
    events = run(
        generate(
            engines[f"random-{runtime.value}"],
            request(runtime, max_tokens=12, stop_token_ids=(expected[stop_at],)),
        )
    )
    tokens, complete = streamed(events)
    assert (complete.finish_reason, complete.stop_reason) == ("stop", expected[stop_at])
    # TokenSpeed and TRT-LLM leave the matched stop token out of the output by default.
    trims = runtime in (Runtime.TOKENSPEED, Runtime.TRTLLM)
    assert tokens == expected[: stop_at if trims else stop_at + 1]


def test_sglang_refuses_string_stops(engines: dict[str, Engine]) -> None:
    engine = engines["random-sglang"]
    refused = sglang.GenerateRequest(
        request_id="s1",
        tokenized=sglang.TokenizedInput(input_ids=PROMPT),
        sampling_params=sglang.SamplingParams(temperature=0.0, max_new_tokens=4, stop=["x"]),
        stream=True,
    )

    async def scenario() -> dict[str, int]:
        with pytest.raises(GRPCError) as refusal:
            await generate(engine, refused)
        assert refusal.value.status is Status.INVALID_ARGUMENT
        assert "skip_tokenizer_init" in (refusal.value.message or "")
        channel = engine.channel()
        try:
            return await counters(channel)
        finally:
            channel.close()

    snapshot = run(scenario())
    assert snapshot["requests_rejected"] >= 1
    assert snapshot["requests_active"] == 0


def test_vllm_matches_stop_strings_on_its_own_text(engines: dict[str, Engine]) -> None:
    engine = engines["replay-vllm"]
    for no_stop_trim in (False, True):  # include_stop_str_in_output changes text, not ids
        events = run(
            generate(
                engine,
                request(Runtime.VLLM, stop=("lazy",), max_tokens=40, no_stop_trim=no_stop_trim),
            )
        )
        tokens, complete = streamed(events)
        assert tokens == list(REPLAY_IDS[:LAZY_END])
        assert (complete.finish_reason, complete.stop_reason) == ("stop", "lazy")
    # Without stops the replay ends at EOS, which vLLM adds itself and reports without reason.
    tokens, complete = streamed(run(generate(engine, request(Runtime.VLLM, max_tokens=40))))
    assert tokens == [*REPLAY_IDS, EOS]
    assert (complete.finish_reason, complete.stop_reason) == ("stop", None)


def test_trtllm_matches_stop_words_as_token_sequences(engines: dict[str, Engine]) -> None:
    engine = engines["replay-trtllm"]
    tokens, complete = streamed(
        run(generate(engine, request(Runtime.TRTLLM, stop=(" dog",), max_tokens=40)))
    )
    assert (complete.finish_reason, complete.stop_reason) == ("stop", " dog")
    # The stop word's tokens leave the output; its first token was streamed already.
    assert list(complete.token_ids) == list(REPLAY_IDS[: DOG_END - len(DOG_IDS)])
    assert tokens == list(REPLAY_IDS[: DOG_END - 1])
    kept = run(
        generate(engine, request(Runtime.TRTLLM, stop=(" dog",), max_tokens=40, no_stop_trim=True))
    )
    assert list(streamed(kept)[1].token_ids) == list(REPLAY_IDS[:DOG_END])
    # "lazy" without its space is another token: a token-sequence match never sees it.
    _, unmatched = streamed(
        run(generate(engine, request(Runtime.TRTLLM, stop=("lazy",), max_tokens=LAZY_END + 2)))
    )
    assert unmatched.finish_reason == "length"


def test_tokenspeed_stops_at_eos_itself(engines: dict[str, Engine]) -> None:
    engine = engines["replay-tokenspeed"]
    tokens, complete = streamed(run(generate(engine, request(Runtime.TOKENSPEED, max_tokens=40))))
    assert (complete.finish_reason, complete.stop_reason) == ("stop", EOS)
    assert tokens == list(REPLAY_IDS)  # the matched EOS is trimmed
    kept, _ = streamed(
        run(generate(engine, request(Runtime.TOKENSPEED, max_tokens=40, no_stop_trim=True)))
    )
    assert kept == [*REPLAY_IDS, EOS]
    ignored, past = streamed(
        run(generate(engine, request(Runtime.TOKENSPEED, max_tokens=22, ignore_eos=True)))
    )
    assert past.finish_reason == "length"
    assert ignored == [*REPLAY_IDS, EOS, *REPLAY_IDS[:2]]
    _, by_string = streamed(
        run(generate(engine, request(Runtime.TOKENSPEED, stop=("lazy",), max_tokens=40)))
    )
    assert (by_string.finish_reason, by_string.stop_reason) == ("stop", "lazy")


def test_min_tokens_hold_back_every_stop(engines: dict[str, Engine]) -> None:
    # vLLM never searches text made within min_tokens: "lazy" (token 15) is passed over and
    # the replay's EOS (token 20) ends it.
    tokens, complete = streamed(
        run(
            generate(
                engines["replay-vllm"],
                request(Runtime.VLLM, stop=("lazy",), min_tokens=LAZY_END + 1, max_tokens=40),
            )
        )
    )
    assert tokens == [*REPLAY_IDS, EOS]
    assert (complete.finish_reason, complete.stop_reason) == ("stop", None)
    # TokenSpeed: the EOS due at token 20 is masked (replaced by an ordinary token).
    tokens, complete = streamed(
        run(
            generate(
                engines["replay-tokenspeed"],
                request(Runtime.TOKENSPEED, min_tokens=21, max_tokens=24),
            )
        )
    )
    assert complete.finish_reason == "length"
    assert tokens[: len(REPLAY_IDS)] == list(REPLAY_IDS)
    assert EOS not in tokens


# ---- cancellation, abort, batching ------------------------------------------------------


@pytest.mark.parametrize("runtime", ALL)
@pytest.mark.serial
def test_a_cancelled_stream_leaves_the_batch_at_once(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    engine = engines[f"random-{runtime.value}"]

    async def scenario() -> None:
        channel = engine.channel()
        try:
            before = await counters(channel)
            long = request(runtime, "long", max_tokens=3000)
            async with STUBS[runtime](channel).Generate.open() as stream:
                await stream.send_message(long, end=True)
                for _ in range(3):
                    await stream.recv_message()
                await stream.cancel()  # RST_STREAM
            after, elapsed = await wait_for_counters(
                channel, lambda c: c["requests_active"] == 0, seconds=1.0
            )
            assert elapsed < 0.05
            assert after["requests_cancelled"] == before["requests_cancelled"] + 1
            await asyncio.sleep(0.1)  # ten steps: none may generate for the cancelled request
            later = await counters(channel)
            assert later["tokens_generated"] == after["tokens_generated"]
            assert later["tokens_after_abort"] == 0
        finally:
            channel.close()

    run(scenario())


@pytest.mark.parametrize("runtime", ALL)
def test_the_abort_rpc_ends_a_request_its_engines_way(
    engines: dict[str, Engine], runtime: Runtime
) -> None:
    engine = engines[f"random-{runtime.value}"]

    async def scenario() -> tuple[list[GrpcEvent], Status | None]:
        channel = engine.channel()
        stub = STUBS[runtime](channel)
        events: list[GrpcEvent] = []
        failure = None
        try:
            before = await counters(channel)
            try:
                async with stub.Generate.open() as stream:
                    await stream.send_message(request(runtime, "doomed", max_tokens=3000), end=True)
                    for _ in range(3):
                        await stream.recv_message()
                    (abort,) = build_abort(runtime, ["doomed"])
                    await stub.Abort(abort)
                    after = await counters(channel)
                    assert after["requests_active"] == 0
                    assert after["requests_aborted"] == before["requests_aborted"] + 1
                    events = [parse_generate_response(m) async for m in stream]
            except GRPCError as exc:  # grpclib raises a call's status when the call closes
                failure = exc.status
            await asyncio.sleep(0.05)
            assert (await counters(channel))["tokens_after_abort"] == 0
        finally:
            channel.close()
        return events, failure

    events, failure = run(scenario())
    last = events[-1] if events else None
    match runtime:
        case Runtime.VLLM | Runtime.SGLANG | Runtime.TRTLLM:
            assert isinstance(last, GrpcComplete)
            assert failure is None
            expected = "cancelled" if runtime is Runtime.TRTLLM else "abort"
            assert last.finish_reason == expected
        case Runtime.MLX:  # the stream just ends
            assert failure is None
            assert not any(isinstance(e, GrpcComplete) for e in events)
        case Runtime.TOKENSPEED:
            assert failure is Status.INTERNAL


def test_concurrent_requests_share_steps(engines: dict[str, Engine]) -> None:
    engine = engines["random-vllm"]

    async def scenario() -> tuple[dict[str, int], dict[str, int], list[list[GrpcEvent]]]:
        channel = engine.channel()
        try:
            before = await counters(channel)
            calls = [
                generate(engine, request(Runtime.VLLM, f"c{i}", max_tokens=12)) for i in range(3)
            ]
            results = await asyncio.gather(*calls)
            return before, await counters(channel), list(results)
        finally:
            channel.close()

    before, after, results = run(scenario())
    for events in results:
        assert streamed(events)[0] == greedy(12)
    assert after["largest_batch"] >= 3
    assert after["tokens_generated"] - before["tokens_generated"] == 36
    assert after["steps"] - before["steps"] <= 14  # one step serves all three, not 36 steps


# ---- management -------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ALL)
def test_health_and_model_info(engines: dict[str, Engine], runtime: Runtime) -> None:
    engine = engines[f"random-{runtime.value}"]

    async def scenario() -> tuple[Any, Any]:
        channel = engine.channel()
        try:
            stub, pb2 = STUBS[runtime](channel), MESSAGES[runtime]
            return (
                await stub.HealthCheck(pb2.HealthCheckRequest()),
                await stub.GetModelInfo(pb2.GetModelInfoRequest()),
            )
        finally:
            channel.close()

    health, info = run(scenario())
    if runtime is Runtime.TRTLLM:
        assert health.status == "OK"
        assert (info.max_seq_len, info.vocab_size) == (CONTEXT, 4001)
    else:
        assert health.healthy
        assert (info.max_context_length, info.vocab_size) == (CONTEXT, 4001)


def test_unserved_rpcs_are_unimplemented_and_the_tokenizer_ships(
    engines: dict[str, Engine],
) -> None:
    engine = engines["random-vllm"]

    async def scenario() -> list[common.GetTokenizerChunk]:
        channel = engine.channel()
        try:
            stub = STUBS[Runtime.VLLM](channel)
            with pytest.raises(GRPCError) as unserved:
                await stub.StartProfile(common.StartProfileRequest())
            assert unserved.value.status is Status.UNIMPLEMENTED
            return list(await stub.GetTokenizer(common.GetTokenizerRequest()))
        finally:
            channel.close()

    chunks = run(scenario())
    data = b"".join(chunk.data for chunk in chunks)
    assert [bool(chunk.sha256) for chunk in chunks][-1]
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest()
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert {"tokenizer.json", "tokenizer_config.json", "config.json"} <= set(names)


def test_sigterm_stops_an_engine_with_open_streams_quickly(tmp_path: Path) -> None:
    (engine,) = start_engines([(Runtime.SGLANG, RANDOM_FLAGS)], tmp_path)
    try:

        async def scenario() -> float:
            channel = engine.channel()
            try:
                async with STUBS[Runtime.SGLANG](channel).Generate.open() as stream:
                    await stream.send_message(request(Runtime.SGLANG, max_tokens=3000), end=True)
                    await stream.recv_message()
                    started = time.monotonic()
                    engine.process.send_signal(signal.SIGTERM)
                    with pytest.raises((GRPCError, ConnectionError, StreamTerminatedError)):
                        async for _ in stream:
                            pass
                    return started
            finally:
                channel.close()

        started = run(scenario())
        assert engine.process.wait(5) == 0
        assert time.monotonic() - started < 2.0
    finally:
        stop_engines([engine.process])
