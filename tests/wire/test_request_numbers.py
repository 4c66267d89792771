"""Issue 45, as a property of the decoders: every numeric field every request type declares
(walked from the Structs by harness/numeric_fields.py) refuses an integer beyond int64 or
beyond float range, a float overflow and a bool with a `ClientError` naming the field, and a
negative where none is allowed; never another exception (an `OverflowError` was a 500). The
same fields over a real gateway: tests/e2e/test_numeric_fields.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.numeric_fields import (
    CHAT,
    COMPLETIONS,
    COUNT_TOKENS,
    DETOKENIZE,
    ENDPOINTS,
    GENERATE,
    MESSAGES,
    NEGATIVE_ALLOWED,
    RESPONSES,
    TOKENIZE,
    NumericField,
    body_with,
    field_name,
    numeric_fields,
)
from smg_trio.core.anthropic_request import decode_count_tokens_request, decode_messages_request
from smg_trio.errors import ClientError
from smg_trio.neutral.validation import INT64_MAX, INT64_MIN
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
)
from smg_trio.wire.openai_tokenize import decode_detokenize_request, decode_tokenize_request
from smg_trio.wire.responses_api import decode_responses_request

DECODERS: Final[dict[str, Callable[[bytes], object]]] = {
    CHAT: decode_chat_request,
    COMPLETIONS: decode_completion_request,
    GENERATE: decode_generate_request,
    TOKENIZE: decode_tokenize_request,
    DETOKENIZE: decode_detokenize_request,
    RESPONSES: decode_responses_request,
    MESSAGES: decode_messages_request,
    COUNT_TOKENS: decode_count_tokens_request,
}
# The decoders that check values too; a Responses body's ranges are chat's, checked when it
# is prepared, and /v1/detokenize's ids against the vocabulary (both: the e2e test).
VALUE_CHECKING: Final = frozenset(DECODERS) - {RESPONSES, DETOKENIZE}
FIELDS: Final = [
    (path, field) for path, (struct, _) in ENDPOINTS.items() for field in numeric_fields(struct)
]
NEGATIVE_FIELDS: Final = [
    (path, field)
    for path, field in FIELDS
    if path in VALUE_CHECKING and field.name not in NEGATIVE_ALLOWED
]

beyond_int64 = st.one_of(
    st.integers(min_value=INT64_MAX + 1),
    st.integers(max_value=INT64_MIN - 1),
    st.integers(19, 2000).map(lambda digits: 10**digits),
).map(str)
beyond_float = st.builds(
    lambda sign, digits: sign + "1" + "0" * digits,
    st.sampled_from(["", "-"]),
    st.integers(309, 2000),
)
float_overflow = st.builds(
    lambda sign, mantissa, exponent: f"{sign}{mantissa}e{exponent}",
    st.sampled_from(["", "-"]),
    st.integers(1, 9),
    st.integers(309, 100_000),
)
bools = st.sampled_from(["true", "false"])


def refusal(path: str, field: NumericField, number: str) -> ClientError:
    body = body_with(ENDPOINTS[path][1], field, number)
    with pytest.raises(ClientError) as refused:
        DECODERS[path](body)
    error = refused.value
    assert error.status == 400
    assert field_name(error.param or "") == field.name, (path, field.path, number[:30], error)
    return error


def test_every_endpoint_has_numeric_fields_and_the_walk_sees_through_nesting() -> None:
    names = {(path, field.path) for path, field in FIELDS}
    assert {path for path, _ in FIELDS} == set(ENDPOINTS)
    assert {(GENERATE, "sampling_params.seed"), (CHAT, "stop_token_ids[0]")} <= names
    assert {(MESSAGES, "thinking.budget_tokens"), (COMPLETIONS, "prompt[0][0]")} <= names


@settings(max_examples=400)
@given(place=st.sampled_from(FIELDS), data=st.data())
def test_numbers_no_field_holds_are_400s_naming_the_field(
    place: tuple[str, NumericField], data: st.DataObject
) -> None:
    path, field = place
    numbers = [beyond_float, float_overflow, bools]
    if field.kind == "int":
        numbers.append(beyond_int64)
    refusal(path, field, data.draw(st.one_of(numbers)))


@settings(max_examples=300)
@given(place=st.sampled_from(NEGATIVE_FIELDS), data=st.data())
def test_a_negative_where_none_is_allowed_is_a_400_naming_the_field(
    place: tuple[str, NumericField], data: st.DataObject
) -> None:
    path, field = place
    if field.kind == "int":
        number = str(data.draw(st.integers(INT64_MIN, -1)))
    else:
        number = repr(data.draw(st.floats(-1e300, -1e-300)))
    refusal(path, field, number)


@pytest.mark.parametrize(
    ("path", "param"), [(CHAT, "seed"), (GENERATE, "top_logprobs_num")], ids=["chat", "generate"]
)
def test_issue_45s_300_digit_integers(path: str, param: str) -> None:
    """The two bodies that answered 500: `OverflowError` in `check_between`."""
    field = next(f for f in numeric_fields(ENDPOINTS[path][0]) if f.path == param)
    error = refusal(path, field, "9" * 300)
    assert error.param == param
