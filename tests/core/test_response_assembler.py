"""ResponseAssembler: spec cases 31, 49-53, 55 (with our divergences), n > 1, batches of events
and the stream's end as data."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.stream_end import ChoiceFinish, StreamEnd
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.openai_responses import Usage
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


def tokens(a: ResponseAssembler, index: int, token_ids: list[int]) -> list[bytes]:
    """One engine message of `token_ids` for choice `index`."""
    return a.on_events([TokenDelta(index, tuple(token_ids))])


def engine_finished(
    a: ResponseAssembler, index: int, reason: str, stop_reason: int | str | None, count: int
) -> list[bytes]:
    return a.on_events([ChoiceFinished(index, reason, stop_reason, 3, count)])


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
        assert tokens(a, 0, [token]) == []
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
        out += tokens(a, 0, [token])
    assert a.done
    first = objs(out)[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": ""}
    assert chat_text(out) == "test "
    assert finishes(out) == [("stop", "Hello world")]
    # Later engine output for the stopped choice produces nothing.
    assert tokens(a, 0, [4]) == []
    assert engine_finished(a, 0, "stop", 999, 5) == []


def test_case_51_local_stop_wins_over_length_and_partial_stop_is_flushed() -> None:
    a = make(stop=(".",))
    out = tokens(a, 0, [1, 2, 6])
    assert finishes(out) == [("stop", ".")]
    b = make(stop=("world test",))
    out = tokens(b, 0, [1, 2]) + engine_finished(b, 0, "length", None, 2)
    assert chat_text(out) == "Hello world"
    assert finishes(out) == [("length", "ABSENT")]


def test_case_52_token_stop_streaming_omits_matched_non_stream_reports_id() -> None:
    a = make()
    out = tokens(a, 0, [1, 999])
    assert finishes(out) == [("stop", "ABSENT")]
    b = make(stream=False)
    tokens(b, 0, [1, 999])
    assert json.loads(b.response_body())["choices"][0]["matched_stop"] == 999


def test_case_31_stop_at_the_first_token() -> None:
    a = make(stop=(".",))
    out = tokens(a, 0, [6, 1])
    assert chat_text(out) == ""
    assert finishes(out) == [("stop", ".")]
    b = make(stop=(".",), stream=False)
    tokens(b, 0, [6, 1])
    # vLLM answers "" (not null) when the stop is matched inside the first token (issue 11).
    assert json.loads(b.response_body())["choices"][0]["message"]["content"] == ""


def test_case_53_completion_stream_sends_suffix_then_finish() -> None:
    a = make(Endpoint.COMPLETION, stop=("test",))
    out = tokens(a, 0, [1]) + tokens(a, 0, [2, 3])
    texts = [o["choices"][0]["text"] for o in objs(out)]
    assert "".join(texts) == "Hello world "
    assert objs(out)[-1]["choices"][0]["finish_reason"] == "stop"
    assert "matched_stop" not in objs(out)[-1]["choices"][0]


def test_case_55_generate_reports_the_router_stop() -> None:
    a = make(Endpoint.GENERATE, stop=("world",), stream=False)
    tokens(a, 0, [1, 2, 3])
    body = json.loads(a.response_body())
    assert body["text"] == "Hello "
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "world"}
    # The engine's token after the stop, in the same message, is neither counted nor shown.
    assert body["output_ids"] == [1, 2]
    assert body["meta_info"]["completion_tokens"] == 2


def test_generate_stream_chunks_carry_cumulative_text() -> None:
    a = make(Endpoint.GENERATE)
    out = tokens(a, 0, [1]) + tokens(a, 0, [2]) + engine_finished(a, 0, "length", None, 2)
    texts = [o["text"] for o in objs(out)]
    assert texts[-1] == "Hello world"
    assert texts == sorted(texts, key=len)
    assert objs(out)[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 2}


def test_n2_choices_finish_independently_and_usage_counts_both() -> None:
    a = make(n=2, stop=("test",), include_usage=True)
    out = tokens(a, 0, [1, 3]) + tokens(a, 1, [2])
    one_open = a.done
    out += engine_finished(a, 1, "length", None, 1)
    assert (one_open, a.done) == (False, True)
    out += a.stream_end().payloads
    assert sorted(f for f in finishes(out)) == [("length", "ABSENT"), ("stop", "test")]
    usage = objs(out)[-1]["usage"]
    assert usage == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_completion_echo_is_prefixed_in_both_modes() -> None:
    a = make(Endpoint.COMPLETION, stream=False, echo="P:")
    tokens(a, 0, [1])
    engine_finished(a, 0, "length", None, 1)
    assert json.loads(a.response_body())["choices"][0]["text"] == "P:Hello"
    b = make(Endpoint.COMPLETION, echo="P:")
    out = tokens(b, 0, [1])
    assert [o["choices"][0]["text"] for o in objs(out)] == ["P:", "Hello"]


def test_one_batch_interleaving_choices_renders_them_in_order_and_ignores_the_finished() -> None:
    a = make(n=2, stop=("test",))
    batch: list[EngineEvent] = [
        TokenDelta(0, (1,)),
        TokenDelta(1, (2,)),
        TokenDelta(0, (3,)),  # choice 0 stops here
        TokenDelta(0, (2,)),  # ignored: choice 0 is over
        ChoiceFinished(0, "length", None, 3, 3),  # ignored as well
        ChoiceFinished(1, "length", None, 3, 1),
    ]
    out = a.on_events(batch)
    assert a.done
    indexed = [
        (c["index"], c["delta"], c["finish_reason"]) for o in objs(out) for c in o["choices"]
    ]
    assert indexed == [
        (0, {"role": "assistant", "content": ""}, None),
        (0, {"content": "Hello"}, None),
        (1, {"role": "assistant", "content": ""}, None),
        (1, {"content": "world"}, None),
        (0, {"content": " "}, None),
        (0, {}, "stop"),
        (1, {}, "length"),
    ]
    assert a.completion_tokens == 3  # choice 0 counted up to its stopping message


def test_non_streaming_requests_get_no_payloads() -> None:
    a = make(stream=False, n=2)
    assert a.on_events([TokenDelta(0, (1,)), TokenDelta(1, (2, 999))]) == []
    assert a.on_events([ChoiceFinished(0, "length", None, 3, 1)]) == []
    assert a.done
    choices = json.loads(a.response_body())["choices"]
    assert [(c["message"]["content"], c["finish_reason"]) for c in choices] == [
        ("Hello", "length"),
        ("world", "stop"),
    ]
    assert choices[1]["matched_stop"] == 999


def test_the_stream_end_reports_what_the_chunks_said() -> None:
    chat = make(n=2, stop=("test",), include_usage=True)
    chunks = tokens(chat, 0, [1, 3]) + tokens(chat, 1, [2, 999])
    end = chat.stream_end()
    # The data says what the finish chunks said (a token stop carries no matched_stop).
    assert finishes(chunks) == [("stop", "test"), ("stop", "ABSENT")]
    assert end.finish == (ChoiceFinish(0, "stop", "test"), ChoiceFinish(1, "stop", None))
    assert end.usage == Usage.of(3, 4)
    assert [json.loads(p)["usage"] for p in end.payloads] == [
        {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    ]
    engine_stop = make()
    engine_finished(engine_stop, 0, "stop", 151645, 1)
    assert engine_stop.stream_end() == StreamEnd(finish=(ChoiceFinish(0, "stop", 151645),))

    completion = make(Endpoint.COMPLETION, stop=("world",))
    tokens(completion, 0, [1, 2])
    assert completion.stream_end().finish == (ChoiceFinish(0, "stop", None),)

    generate = make(Endpoint.GENERATE, n=2, stop=("world",))
    tokens(generate, 0, [1, 2])
    last = objs(tokens(generate, 1, [3]) + engine_finished(generate, 1, "length", None, 4))[-1]
    end = generate.stream_end()
    assert end.payloads == ()
    assert end.finish == (ChoiceFinish(0, "stop", "world"), ChoiceFinish(1, "length", None))
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    assert end.usage == Usage.of(3, 2 + 4)


def stop_reason_assembler(endpoint: Endpoint, *, stream: bool) -> ResponseAssembler:
    """999 (`<eos>`) is the primary EOS; 1002 another stop id; "." a stop string."""
    plan = GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(stop=(".",), stop_token_ids=(1002,)),
        stream=stream,
        stop_spec=StopSpec(strings=(".",), token_ids=(999, 1002), eos_token_id=999),
    )
    return ResponseAssembler(plan, T1, created=1700000000)


def reported_stop_reason(endpoint: Endpoint, stream: bool, events: list[EngineEvent]) -> Any:
    """The `stop_reason` a client sees: the finish chunk's, or the body's choice's."""
    a = stop_reason_assembler(endpoint, stream=stream)
    out = a.on_events(events)
    assert a.done
    if not stream:
        return json.loads(a.response_body())["choices"][0]["stop_reason"]
    (finish,) = [c for o in objs(out) for c in o["choices"] if c["finish_reason"] is not None]
    return finish["stop_reason"]


def test_stop_reason_is_vllms_string_stop_id_or_null_for_the_primary_eos() -> None:
    """vLLM's `stop_reason` on every choice, streaming or not, chat and completions: the matched
    string; a stop token id (streaming chat too, where matched_stop is absent); null for the
    model's primary EOS (vLLM's check_stop) and for a length finish; an engine-reported id."""
    cases: list[tuple[list[EngineEvent], Any]] = [
        ([TokenDelta(0, (1, 6))], "."),
        ([TokenDelta(0, (1, 1002))], 1002),
        ([TokenDelta(0, (1, 999))], None),
        ([TokenDelta(0, (1, 2)), ChoiceFinished(0, "length", None, 3, 2)], None),
        ([TokenDelta(0, (1,)), ChoiceFinished(0, "stop", 1002, 3, 2)], 1002),
    ]
    for endpoint in (Endpoint.CHAT, Endpoint.COMPLETION):
        for stream in (False, True):
            for events, expected in cases:
                got = reported_stop_reason(endpoint, stream, events)
                assert got == expected, (endpoint, stream, events)


def test_the_primary_eos_keeps_matched_stop_but_no_stop_reason() -> None:
    a = stop_reason_assembler(Endpoint.CHAT, stream=False)
    a.on_events([TokenDelta(0, (1, 999))])
    choice = json.loads(a.response_body())["choices"][0]
    assert (choice["matched_stop"], choice["stop_reason"]) == (999, None)  # smg's, vLLM's


def make_interval(interval: int, stop: tuple[str, ...] = ()) -> ResponseAssembler:
    plan = GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.CHAT,
        model="m",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(stop=stop),
        stream=True,
        include_usage=True,
        stop_spec=StopSpec(strings=stop, token_ids=(999,)),
        stream_interval=interval,
    )
    return ResponseAssembler(plan, T1, created=1700000000)


def content_chunks(payloads: list[bytes]) -> list[str]:
    return [
        c["delta"]["content"]
        for o in objs(payloads)
        for c in o.get("choices", [])
        if c["delta"].get("content")
    ]


def test_stream_interval_sends_the_first_token_then_every_k_and_flushes_at_the_finish() -> None:
    a = make_interval(3)
    out: list[bytes] = []
    for token in (1, 2, 3, 4, 3, 4, 3):
        out += tokens(a, 0, [token])
    out += engine_finished(a, 0, "length", None, 7)
    # The first text at once; then a chunk per 3 tokens; the last token before the finish.
    assert content_chunks(out) == ["Hello", " world test token", " test token test"]
    assert finishes(out) == [("length", "ABSENT")]
    assert objs(out)[-1]["choices"][0]["finish_reason"] == "length"  # nothing after it


@given(
    batches=st.lists(
        st.lists(st.sampled_from((1, 2, 3, 4, 6)), min_size=1, max_size=4), max_size=8
    ),
    interval=st.integers(min_value=1, max_value=5),
    stop=st.sampled_from(((), ("world test",), (".",))),
)
def test_stream_interval_changes_only_how_the_text_is_cut(
    batches: list[list[int]], interval: int, stop: tuple[str, ...]
) -> None:
    """Against interval 1: the same text, finish and usage, in no more chunks."""
    outputs = []
    for k in (1, interval):
        a = make_interval(k, stop)
        out: list[bytes] = []
        for batch in batches:
            out += tokens(a, 0, batch)
        count = sum(map(len, batches))
        out += engine_finished(a, 0, "length", None, count)
        end = a.stream_end()
        outputs.append((content_chunks(out), finishes(out), end.usage, end.finish))
    (chunks_1, *same_1), (chunks_k, *same_k) = outputs
    assert "".join(chunks_k) == "".join(chunks_1)
    assert same_k == same_1
    assert len(chunks_k) <= len(chunks_1)


@given(
    deltas=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=1),
            st.lists(st.sampled_from((1, 2, 3, 4, 6, 999)), min_size=1, max_size=4),
        ),
        max_size=10,
    ),
    endpoint=st.sampled_from((Endpoint.CHAT, Endpoint.COMPLETION, Endpoint.GENERATE)),
    stop=st.sampled_from(((), ("world test",), (".",), ("Hello",))),
    stream=st.booleans(),
    echo=st.sampled_from((None, "Say:")),
)
def test_on_tokens_is_on_events_of_the_one_delta(
    deltas: list[tuple[int, list[int]]],
    endpoint: Endpoint,
    stop: tuple[str, ...],
    stream: bool,
    echo: str | None,
) -> None:
    """The fast lane's `on_tokens` against `on_events([TokenDelta])`: the same payloads per
    delta, and the same finish, usage, stream end and body, for random token streams (stop
    strings and the stop token included, two choices)."""
    echo = echo if endpoint is Endpoint.COMPLETION else None
    fast, events = (make(endpoint, stop=stop, stream=stream, n=2, echo=echo) for _ in range(2))
    for index, ids in deltas:
        assert fast.on_tokens(index, tuple(ids)) == tokens(events, index, ids)
    for index in (0, 1):
        count = sum(len(ids) for i, ids in deltas if i == index)
        assert engine_finished(fast, index, "length", None, count) == engine_finished(
            events, index, "length", None, count
        )
    assert (fast.usage, fast.finish_reasons, fast.texts()) == (
        events.usage,
        events.finish_reasons,
        events.texts(),
    )
    if stream:
        assert fast.stream_end() == events.stream_end()
    else:
        assert fast.response_body() == events.response_body()
