"""A vLLM output that is plain token ids is kept as decoded (`PlainTokens`), every other output
becomes a `RequestStep` as before, in the engine's order; the output reader applies both in one
loop (docs/performance.md §2)."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.backends.event_stream import InlineBatches
from smg_trio.backends.zmq_codec import RequestStep, decode_output
from smg_trio.backends.zmq_engines import RankPolicy, Route
from smg_trio.backends.zmq_input_writer import Outgoing
from smg_trio.backends.zmq_outputs import OutputReader
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.errors import BackendProtocolError
from smg_trio.neutral.events import ChoiceFinished, TokenDelta, TokenLogprob
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.vllm_zmq_outputs import (
    EngineCoreOutput,
    EngineCoreOutputs,
    FinishReason,
    PrefillStats,
    encode_logprobs,
    encode_outputs,
)
from smg_trio.wire.zmq_transport import RequestType, encode_abort

KINDS = ("plain", "finish", "prefill", "logprobs")


def _output(index: int, kind: str) -> EngineCoreOutput:
    ids = (index, index + 1)
    match kind:
        case "finish":
            return EngineCoreOutput(f"r{index}", ids, finish_reason=FinishReason.LENGTH)
        case "prefill":
            return EngineCoreOutput(f"r{index}", ids, prefill_stats=PrefillStats(7, 7, 3))
        case "logprobs":
            positions = [TokenLogprob(token_id=i, logprob=-0.5, rank=1) for i in ids]
            return EngineCoreOutput(f"r{index}", ids, new_logprobs=encode_logprobs(positions))
    return EngineCoreOutput(f"r{index}", ids)


@given(kinds=st.lists(st.sampled_from(KINDS), max_size=12))
def test_steps_keep_the_engines_order_and_only_plain_outputs_stay_decoded(
    kinds: list[str],
) -> None:
    outputs = tuple(_output(index, kind) for index, kind in enumerate(kinds))
    message = encode_outputs(EngineCoreOutputs(engine_index=0, outputs=outputs))
    steps = decode_output(Runtime.VLLM, [message]).steps
    assert [step.request_id for step in steps] == [output.request_id for output in outputs]
    for step, kind, output in zip(steps, kinds, outputs, strict=True):
        if kind == "plain":
            assert not isinstance(step, RequestStep)
            assert step.new_token_ids == output.new_token_ids
            continue
        assert isinstance(step, RequestStep)
        assert step.token_ids == output.new_token_ids
        assert (step.finish_reason == "length") is (kind == "finish")
        assert (step.prompt_tokens == 7 and step.cached_tokens == 3) is (kind == "prefill")
        assert (step.logprobs is not None) is (kind == "logprobs")


def test_a_malformed_output_after_plain_ones_fails_the_whole_message() -> None:
    bad = EngineCoreOutput(
        "r1",
        (1, 2),
        new_logprobs=encode_logprobs([TokenLogprob(token_id=1, logprob=-1.0, rank=1)] * 3),
    )
    outputs = (_output(0, "plain"), bad)
    message = encode_outputs(EngineCoreOutputs(engine_index=0, outputs=outputs))
    with pytest.raises(BackendProtocolError, match="3 logprob positions for 2 tokens"):
        decode_output(Runtime.VLLM, [message])


@pytest.mark.trio
async def test_the_reader_delivers_plain_and_finishing_outputs_of_one_message() -> None:
    with trio.fail_after(5):
        registry = EngineRegistry(1, RankPolicy.LEAST_LOADED)
        registry.strays = {}
        sent: list[Outgoing] = []
        reader = OutputReader(Runtime.VLLM, registry, InlineBatches(), sent.append)
        streams = []
        for index in range(2):
            stream = registry.in_flight.new_stream((f"r{index}",))
            route = Route(
                engine_request_id=f"r{index}",
                choice_index=0,
                engine=registry.engines[0],
                stream=stream,
                prompt_tokens=4,
            )
            registry.in_flight.add(route)
            streams.append(stream)
        outputs = (_output(0, "plain"), _output(1, "finish"), EngineCoreOutput("gone", (9,)))
        message = encode_outputs(EngineCoreOutputs(engine_index=0, outputs=outputs))
        reader.apply([[message]], trio.current_time())
        assert [event async for event in streams[1]] == [
            TokenDelta(0, (1, 2)),
            ChoiceFinished(0, "length", None, 4, 2, 0),
        ]
        assert not streams[0].closed
        streams[0].end()
        assert [event async for event in streams[0]] == [TokenDelta(0, (0, 1))]
        assert registry.in_flight.requests["r0"].completion_tokens == 2
        abort = [registry.engines[0].identity, RequestType.ABORT.frame, encode_abort(["gone"])]
        assert [item.frames for item in sent] == [abort]  # the stray, at the batch's end
