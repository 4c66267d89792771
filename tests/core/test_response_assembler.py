"""ResponseAssembler: spec cases 31, 49-53, 55 (with our divergences) and n > 1."""

from __future__ import annotations

import json
from typing import Any

from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from tests.core.mock_tokenizers import WordMockTokenizer

T1 = WordMockTokenizer()


def make(
    endpoint: Endpoint = Endpoint.CHAT,
    *,
    stop: tuple[str, ...] = (),
    stream: bool = True,
    n: int = 1,
    include_usage: bool = False,
    echo: str | None = None,
) -> ResponseAssembler:
    plan = GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(stop=stop),
        n=n,
        stream=stream,
        include_usage=include_usage,
        echo_text=echo,
        stop_spec=StopSpec(strings=stop, token_ids=(999,)),
    )
    return ResponseAssembler(plan, T1, created=1700000000)


def objs(payloads: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(p) for p in payloads]


def chat_text(payloads: list[bytes]) -> str:
    return "".join(
        c["delta"].get("content") or "" for o in objs(payloads) for c in o.get("choices", [])
    )


def finishes(payloads: list[bytes]) -> list[tuple[str, Any]]:
    return [
        (c["finish_reason"], c.get("matched_stop", "ABSENT"))
        for o in objs(payloads)
        for c in o.get("choices", [])
        if c["finish_reason"] is not None
    ]


def test_case_49_non_stream_stop_beats_engine_token_stop() -> None:
    a = make(stop=("Hello world",), stream=False)
    for token in (3, 1, 2, 4, 999):
        assert a.on_tokens(0, [token]) == []
    assert a.done  # the router stopped at token 2: the caller aborts the engine request
    body = json.loads(a.response_body())
    choice = body["choices"][0]
    assert choice["message"]["content"] == "test "
    assert choice["finish_reason"] == "stop"
    assert choice["matched_stop"] == "Hello world"
    assert body["usage"]["prompt_tokens"] == 3


def test_case_50_streaming_finish_chunk_is_sent_at_the_stop() -> None:
    a = make(stop=("Hello world",))
    out: list[bytes] = []
    for token in (3, 1, 2):
        out += a.on_tokens(0, [token])
    assert a.done
    first = objs(out)[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": ""}
    assert chat_text(out) == "test "
    assert finishes(out) == [("stop", "Hello world")]
    # Later engine output for the stopped choice produces nothing.
    assert a.on_tokens(0, [4]) == []
    assert a.on_engine_finished(0, "stop", 999, 5) == []


def test_case_51_local_stop_wins_over_length_and_partial_stop_is_flushed() -> None:
    a = make(stop=(".",))
    out = a.on_tokens(0, [1, 2, 6])
    assert finishes(out) == [("stop", ".")]
    b = make(stop=("world test",))
    out = b.on_tokens(0, [1, 2]) + b.on_engine_finished(0, "length", None, 2)
    assert chat_text(out) == "Hello world"
    assert finishes(out) == [("length", "ABSENT")]


def test_case_52_token_stop_streaming_omits_matched_non_stream_reports_id() -> None:
    a = make()
    out = a.on_tokens(0, [1, 999])
    assert finishes(out) == [("stop", "ABSENT")]
    b = make(stream=False)
    b.on_tokens(0, [1, 999])
    assert json.loads(b.response_body())["choices"][0]["matched_stop"] == 999


def test_case_31_stop_at_the_first_token() -> None:
    a = make(stop=(".",))
    out = a.on_tokens(0, [6, 1])
    assert chat_text(out) == ""
    assert finishes(out) == [("stop", ".")]
    b = make(stop=(".",), stream=False)
    b.on_tokens(0, [6, 1])
    assert json.loads(b.response_body())["choices"][0]["message"]["content"] is None


def test_case_53_completion_stream_sends_suffix_then_finish() -> None:
    a = make(Endpoint.COMPLETION, stop=("test",))
    out = a.on_tokens(0, [1]) + a.on_tokens(0, [2, 3])
    texts = [o["choices"][0]["text"] for o in objs(out)]
    assert "".join(texts) == "Hello world "
    assert objs(out)[-1]["choices"][0]["finish_reason"] == "stop"
    assert "matched_stop" not in objs(out)[-1]["choices"][0]


def test_case_55_generate_reports_the_router_stop() -> None:
    a = make(Endpoint.GENERATE, stop=("world",), stream=False)
    a.on_tokens(0, [1, 2, 3])
    body = json.loads(a.response_body())
    assert body["text"] == "Hello "
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "world"}


def test_generate_stream_chunks_carry_cumulative_text() -> None:
    a = make(Endpoint.GENERATE)
    out = a.on_tokens(0, [1]) + a.on_tokens(0, [2]) + a.on_engine_finished(0, "length", None, 2)
    texts = [o["text"] for o in objs(out)]
    assert texts[-1] == "Hello world"
    assert texts == sorted(texts, key=len)
    assert objs(out)[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 2}


def test_n2_choices_finish_independently_and_usage_counts_both() -> None:
    a = make(n=2, stop=("test",), include_usage=True)
    out = a.on_tokens(0, [1, 3]) + a.on_tokens(1, [2])
    one_open = a.done
    out += a.on_engine_finished(1, "length", None, 1)
    assert (one_open, a.done) == (False, True)
    out += a.closing_payloads()
    assert sorted(f for f in finishes(out)) == [("length", "ABSENT"), ("stop", "test")]
    usage = objs(out)[-1]["usage"]
    assert usage == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_completion_echo_is_prefixed_in_both_modes() -> None:
    a = make(Endpoint.COMPLETION, stream=False, echo="P:")
    a.on_tokens(0, [1])
    a.on_engine_finished(0, "length", None, 1)
    assert json.loads(a.response_body())["choices"][0]["text"] == "P:Hello"
    b = make(Endpoint.COMPLETION, echo="P:")
    out = b.on_tokens(0, [1])
    assert [o["choices"][0]["text"] for o in objs(out)] == ["P:", "Hello"]
