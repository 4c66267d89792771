"""The value rules: every rejection is a 400 naming its parameter, whichever wire serves it.

These ranges were once enforced again by each ZMQ request builder; they live only in
neutral.validation now and run at decode (wire/openai_decode) on what the client sent.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.errors import ClientError
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.neutral.validation import (
    MAX_TOP_LOGPROBS,
    check_between,
    check_context_length,
    check_knobs,
    check_lengths,
)


def check(sampling: SamplingParams) -> None:
    """The rules a chat request's sampling passes at decode, applied to neutral values."""
    check_knobs(sampling, "")
    check_lengths(sampling.max_tokens, "max_tokens", sampling.min_tokens, "min_tokens")
    check_between(sampling.logprobs, "logprobs", 0, MAX_TOP_LOGPROBS)


@pytest.mark.parametrize(
    ("sampling", "param"),
    [
        (SamplingParams(temperature=2.5), "temperature"),
        (SamplingParams(temperature=-0.1), "temperature"),
        (SamplingParams(temperature=-0.5), "temperature"),
        (SamplingParams(temperature=math.nan), "temperature"),
        (SamplingParams(temperature=math.inf), "temperature"),
        (SamplingParams(top_p=0.0), "top_p"),
        (SamplingParams(top_p=1.5), "top_p"),
        (SamplingParams(top_p=1.01), "top_p"),
        (SamplingParams(top_k=-2), "top_k"),
        (SamplingParams(top_k=1.5), "top_k"),  # type: ignore[arg-type]
        (SamplingParams(min_p=1.5), "min_p"),
        (SamplingParams(min_p=2.0), "min_p"),
        (SamplingParams(min_p=-0.1), "min_p"),
        (SamplingParams(presence_penalty=2.5), "presence_penalty"),
        (SamplingParams(presence_penalty=-2.5), "presence_penalty"),
        (SamplingParams(frequency_penalty=-3.0), "frequency_penalty"),
        (SamplingParams(frequency_penalty=2.5), "frequency_penalty"),
        (SamplingParams(repetition_penalty=0.0), "repetition_penalty"),
        (SamplingParams(repetition_penalty=-1.0), "repetition_penalty"),
        (SamplingParams(repetition_penalty=math.inf), "repetition_penalty"),
        (SamplingParams(repetition_penalty="1"), "repetition_penalty"),  # type: ignore[arg-type]
        (SamplingParams(max_tokens=0), "max_tokens"),
        (SamplingParams(max_tokens=16.0), "max_tokens"),  # type: ignore[arg-type]
        (SamplingParams(min_tokens=-1), "min_tokens"),
        (SamplingParams(max_tokens=4, min_tokens=5), "min_tokens"),
        (SamplingParams(logprobs=-1), "logprobs"),
        (SamplingParams(logprobs=21), "logprobs"),
        (SamplingParams(stop_token_ids=(-1,)), "stop_token_ids"),
    ],
)
def test_invalid_values_are_rejected_naming_the_parameter(
    sampling: SamplingParams, param: str
) -> None:
    with pytest.raises(ClientError) as caught:
        check(sampling)
    assert (caught.value.status, caught.value.param) == (400, param)
    assert param in caught.value.message


def test_the_edges_are_accepted() -> None:
    check(
        SamplingParams(
            temperature=2.0,
            top_p=1.0,
            top_k=-1,
            min_p=1.0,
            presence_penalty=-2.0,
            frequency_penalty=2.0,
            repetition_penalty=1e6,
            max_tokens=1,
            min_tokens=1,
            logprobs=20,
        )
    )


def test_nested_params_are_named_with_their_prefix() -> None:
    with pytest.raises(ClientError) as caught:
        check_knobs(SamplingParams(temperature=3.0), "sampling_params.")
    assert caught.value.param == "sampling_params.temperature"


def test_context_length_names_where_the_tokens_came_from() -> None:
    check_context_length(90, 10, 100, "messages")
    with pytest.raises(ClientError) as caught:
        check_context_length(100, 10, 100, "prompt")
    assert (caught.value.param, caught.value.code) == ("prompt", "context_length_exceeded")


@given(
    value=st.one_of(st.integers(), st.integers(300, 5000).map(lambda d: -(10**d))),
    low=st.integers(-(2**63), 0),
    high=st.integers(0, 2**63 - 1),
)
def test_check_between_compares_an_int_of_any_size_exactly(value: int, low: int, high: int) -> None:
    """Issue 45: a 300-digit int raised OverflowError (math.isfinite, `%g`): a 500."""
    inside = low <= value <= high
    if inside:
        check_between(value, "seed", low, high)
        return
    with pytest.raises(ClientError) as refused:
        check_between(value, "seed", low, high)
    assert refused.value.param == "seed"
    assert len(refused.value.message) < 200  # a huge int is shown by its first digits
