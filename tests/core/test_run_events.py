"""The pure vocabulary of runs (docs/client-apis.md §3.5): the retrieve query is honoured or a
400 naming the parameter; an ending carries the response with its new status."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.run_events import (
    CANCELLED,
    RetrieveQuery,
    ending,
    parse_retrieve_query,
)
from smg_trio.errors import ClientError


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (b"", RetrieveQuery()),
        (b"stream=false", RetrieveQuery()),
        (b"stream=true", RetrieveQuery(stream=True)),
        (b"stream=true&starting_after=7", RetrieveQuery(stream=True, starting_after=7)),
        (b"stream=true&include_obfuscation=false", RetrieveQuery(stream=True)),
    ],
)
def test_honoured_queries(query: bytes, expected: RetrieveQuery) -> None:
    assert parse_retrieve_query(query) == expected


@pytest.mark.parametrize(
    ("query", "param"),
    [
        (b"stream=yes", "stream"),
        (b"starting_after=3", "starting_after"),
        (b"stream=true&starting_after=x", "starting_after"),
        (b"stream=true&starting_after=-2", "starting_after"),
        (b"stream=true&starting_after=9223372036854775808", "starting_after"),  # issue 45
        (b"stream=true&starting_after=" + b"9" * 300, "starting_after"),
        (b"stream=true&starting_after=" + b"9" * 5000, "starting_after"),
        (b"include_obfuscation=true", "include_obfuscation"),
        (b"include[]=message.output_text.logprobs", "include[]"),
        (b"frobnicate=1", "frobnicate"),
    ],
)
def test_refused_queries_name_the_parameter(query: bytes, param: str) -> None:
    with pytest.raises(ClientError) as refused:
        parse_retrieve_query(query)
    assert refused.value.param == param
    assert refused.value.status == 400


@given(st.binary(max_size=64))
def test_any_query_is_an_answer_or_a_400(query: bytes) -> None:
    status = 200
    try:
        parse_retrieve_query(query)
    except ClientError as error:
        status = error.status
    assert status in (200, 400)


def test_an_ending_carries_the_response_with_its_status() -> None:
    name, data, response = ending(b'{"id":"resp_a","status":"in_progress"}', CANCELLED)
    assert name == b"response.cancelled"
    assert msgspec.json.decode(data) == {
        "type": "response.cancelled",
        "response": {"id": "resp_a", "status": "cancelled"},
    }
    assert msgspec.json.decode(response)["status"] == "cancelled"
