"""Prompt logprobs on vLLM's ZMQ wire (docs/wire.md §A.7.2, §A.7.5): the ADD's
`prompt_logprobs` key, and `new_prompt_logprobs_tensors` in the outputs, checked against bytes
a real vLLM 0.32 encoder produced and round-tripped through our engine-side encoder."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given

from smg_trio.errors import BackendProtocolError
from smg_trio.neutral.events import TokenLogprob, TopLogprob
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire import vllm_zmq_outputs as o
from tests.wire.test_vllm_zmq import _request, _wire_sampling, positions

# vLLM's MsgpackEncoder on EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput("r", [4],
# new_prompt_logprobs_tensors=LogprobsTensors(ids int64 [[5, 7], [9, 5]], logprobs float32
# [[-1.5, -0.5], [-2.0, -0.25]], ranks int64 [2, 3]))]): torch dtypes, data inline as ext 3.
VLLM_PROMPT_LOGPROBS = bytes.fromhex(
    "990091dc0012a1729104c09593a5696e743634920202c720030500000000000000070000000000000009000000"
    "00000000050000000000000093a7666c6f61743332920202d8030000c0bf000000bf000000c0000080be93a569"
    "6e7436349102d80302000000000000000300000000000000c0c0c0c0c0c0c0c0c0c0c000c0c0c0c0c0cb40c470"
    "0c47742e8cc0c0c0c0c0"
)
EXPECTED = (
    TokenLogprob(5, -1.5, 2, (TopLogprob(7, -0.5),)),
    TokenLogprob(9, -2.0, 3, (TopLogprob(5, -0.25),)),
)


def test_add_carries_prompt_logprobs_only_when_asked() -> None:
    assert "prompt_logprobs" not in _wire_sampling(_request(SamplingParams(max_tokens=4)))
    for width in (0, 5):
        asked = _wire_sampling(_request(SamplingParams(max_tokens=4, prompt_logprobs=width)))
        assert asked["prompt_logprobs"] == width


def test_real_vllm_prompt_logprobs_decode() -> None:
    frames = [VLLM_PROMPT_LOGPROBS]
    (output,) = o.decode_outputs(frames).outputs
    assert output.new_token_ids == (4,)
    assert output.new_logprobs is None
    assert o.decode_prompt_logprobs(output.new_prompt_logprobs_tensors, frames) == EXPECTED


def test_our_engine_encodes_the_tensors_as_vllm_does() -> None:
    ours = msgspec.msgpack.encode(o.encode_prompt_logprobs(EXPECTED))
    assert ours in VLLM_PROMPT_LOGPROBS  # the same torch-typed arrays and nils, byte for byte


def test_malformed_prompt_logprobs_are_a_protocol_error() -> None:
    with pytest.raises(BackendProtocolError):
        o.decode_prompt_logprobs(["int64", [1], 1], [b""])
    tensors = o.encode_prompt_logprobs(EXPECTED)
    short = msgspec.structs.replace(tensors, selected_token_ranks=tensors.logprobs)
    raw = msgspec.msgpack.decode(msgspec.msgpack.encode(short))
    with pytest.raises(BackendProtocolError):
        o.decode_prompt_logprobs(raw, [b""])


@given(positions)
def test_prompt_logprobs_round_trip_through_an_output_message(
    values: list[TokenLogprob],
) -> None:
    message = o.EngineCoreOutputs(
        outputs=(
            o.EngineCoreOutput(
                request_id="r",
                new_token_ids=(1,),
                new_prompt_logprobs_tensors=o.encode_prompt_logprobs(values),
            ),
        )
    )
    frames = [o.encode_outputs(message)]
    (output,) = o.decode_outputs(frames).outputs
    assert o.decode_prompt_logprobs(output.new_prompt_logprobs_tensors, frames) == tuple(values)
