"""Rendered bytes: golden chunks for every kind, SSE/WebSocket framing, the per-token fast paths
equal to the struct encoding, and real peers (the openai SDK) reading our streams."""

from __future__ import annotations

import json

import httpx2
import msgspec
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.generate_rendering import GenerateStreamRenderer, generate_response
from smg_trio.core.openai_bodies import chat_completion, completion
from smg_trio.core.render import (
    SSE_DONE,
    ChatStreamRenderer,
    CompletionStreamRenderer,
    FinishedChoice,
    sse,
    websocket_chunk,
)
from smg_trio.errors import EngineRejected, GatewayError
from smg_trio.wire.openai_responses import (
    JSON_ENCODER,
    ChatCompletionChunk,
    ChoiceDelta,
    ChoiceLogprobs,
    ChunkChoice,
    Completion,
    CompletionChoice,
    TokenLogprob,
    Usage,
    error_body,
)


def sse_error(err: GatewayError) -> bytes:
    """The mid-stream error event (the sink sends `SSE_DONE` after it)."""
    return b"data: " + error_body(err) + b"\n\n"


CHAT_HEAD = b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m"'
CMPL_HEAD = b'{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"m"'


def chat_renderer(*, include_usage: bool = True) -> ChatStreamRenderer:
    return ChatStreamRenderer(
        request_id="chatcmpl-1", created=1700000000, model="m", include_usage=include_usage
    )


def completion_renderer(*, include_usage: bool = True) -> CompletionStreamRenderer:
    return CompletionStreamRenderer(
        request_id="cmpl-1", created=1700000000, model="m", include_usage=include_usage
    )


# --- golden bytes ----------------------------------------------------------------------------


def test_chat_chunk_golden_bytes() -> None:
    r = chat_renderer()
    assert r.role(0) == CHAT_HEAD + (
        b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        b'"logprobs":null,"finish_reason":null}]}'
    )
    assert r.content(1, 'say "hi"\n') == CHAT_HEAD + (
        b',"choices":[{"index":1,"delta":{"content":"say \\"hi\\"\\n"},'
        b'"logprobs":null,"finish_reason":null}]}'
    )
    assert r.finish(0, "stop", "</s>", stop_reason="</s>") == CHAT_HEAD + (
        b',"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop",'
        b'"stop_reason":"</s>","matched_stop":"</s>"}]}'
    )
    assert r.finish(0, "stop", 151645, stop_reason=151645).endswith(
        b'"finish_reason":"stop","stop_reason":151645,"matched_stop":151645}]}'
    )
    # vLLM's finish chunk always carries stop_reason: null for a length or an EOS finish.
    assert r.finish(2, "length") == CHAT_HEAD + (
        b',"choices":[{"index":2,"delta":{},"logprobs":null,"finish_reason":"length",'
        b'"stop_reason":null}]}'
    )
    assert r.usage(Usage.of(5, 7)) == CHAT_HEAD + (
        b',"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}'
    )


def test_usage_chunk_only_when_asked() -> None:
    assert chat_renderer(include_usage=False).usage(Usage.of(1, 2)) is None
    assert completion_renderer(include_usage=False).usage(Usage.of(1, 2)) is None


def test_chat_content_with_logprobs_carries_them() -> None:
    logprobs = ChoiceLogprobs(content=(TokenLogprob(token="a", logprob=-0.5),))
    chunk = json.loads(chat_renderer().content(0, "a", logprobs))
    assert chunk["choices"][0]["logprobs"] == {
        "content": [{"token": "a", "logprob": -0.5, "bytes": None, "top_logprobs": []}]
    }


def test_completion_chunk_golden_bytes() -> None:
    r = completion_renderer()
    assert r.text(0, "once") == CMPL_HEAD + (
        b',"choices":[{"text":"once","index":0,"logprobs":null,"finish_reason":null}]}'
    )
    assert r.finish(1, "length") == CMPL_HEAD + (
        b',"choices":[{"text":"","index":1,"logprobs":null,"finish_reason":"length",'
        b'"stop_reason":null}]}'
    )
    assert r.finish(0, "stop", text="!", stop_reason="\n") == CMPL_HEAD + (
        b',"choices":[{"text":"!","index":0,"logprobs":null,"finish_reason":"stop",'
        b'"stop_reason":"\\n"}]}'
    )
    assert r.usage(Usage.of(2, 3)) == CMPL_HEAD + (
        b',"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}'
    )


def test_framing() -> None:
    assert sse(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert SSE_DONE == b"data: [DONE]\n\n"
    assert websocket_chunk("s1", b'{"a":1}') == b'{"type":"chunk","id":"s1","data":{"a":1}}'
    assert websocket_chunk(7, b"{}") == b'{"type":"chunk","id":7,"data":{}}'
    event = sse_error(EngineRejected("engine said no"))
    assert event.startswith(b"data: {")
    assert event.endswith(b"}\n\n")
    error = json.loads(event[len(b"data: ") :])["error"]
    assert error["code"] == "worker_stream_failed"
    assert "engine said no" in error["message"]


# --- non-streaming responses -----------------------------------------------------------------


def test_chat_completion_body() -> None:
    body = chat_completion(
        request_id="chatcmpl-1",
        created=1700000000,
        model="m",
        usage=Usage.of(4, 9),
        choices=[
            FinishedChoice(
                index=0,
                text="Hi.",
                finish_reason="stop",
                completion_tokens=3,
                matched_stop="\n",
                stop_reason="\n",
            ),
            FinishedChoice(index=1, text="", finish_reason="length", completion_tokens=5),
            FinishedChoice(index=2, text=" \n", finish_reason="stop", completion_tokens=1),
        ],
    )
    assert body == (
        b'{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",'
        b'"choices":['
        b'{"index":0,"message":{"role":"assistant","content":"Hi."},"logprobs":null,'
        b'"finish_reason":"stop","stop_reason":"\\n","matched_stop":"\\n"},'
        b'{"index":1,"message":{"role":"assistant","content":""},"logprobs":null,'
        b'"finish_reason":"length","stop_reason":null},'
        b'{"index":2,"message":{"role":"assistant","content":" \\n"},"logprobs":null,'
        b'"finish_reason":"stop","stop_reason":null}],'
        b'"usage":{"prompt_tokens":4,"completion_tokens":9,"total_tokens":13}}'
    )
    parsed = openai.types.chat.ChatCompletion.model_validate_json(body)
    assert [c.message.content for c in parsed.choices] == ["Hi.", "", " \n"]


def test_chat_completion_reasoning() -> None:
    body = chat_completion(
        request_id="c",
        created=1,
        model="m",
        usage=Usage.of(1, 2),
        choices=[
            FinishedChoice(
                index=0, text="4", finish_reason="stop", completion_tokens=2, reasoning="2+2"
            )
        ],
    )
    assert json.loads(body)["choices"][0]["message"] == {
        "role": "assistant",
        "content": "4",
        "reasoning_content": "2+2",
        "reasoning": "2+2",  # vLLM >= 0.11's name for it (docs/tools-and-reasoning.md §3)
    }


def test_completion_body() -> None:
    body = completion(
        request_id="cmpl-1",
        created=1700000000,
        model="m",
        usage=Usage.of(2, 2),
        choices=[
            FinishedChoice(
                index=0,
                text="ab",
                finish_reason="stop",
                completion_tokens=2,
                matched_stop=2,
                stop_reason=2,
            )
        ],
    )
    assert body == CMPL_HEAD + (
        b',"choices":[{"text":"ab","index":0,"logprobs":null,"finish_reason":"stop",'
        b'"stop_reason":2,"matched_stop":2}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}'
    )
    assert openai.types.Completion.model_validate_json(body).choices[0].text == "ab"


def test_generate_body_single_and_many() -> None:
    stop = FinishedChoice(
        index=0,
        text="x",
        finish_reason="stop",
        completion_tokens=1,
        matched_stop="\n",
        output_ids=(9,),
    )
    assert generate_response(request_id="r", prompt_tokens=3, choices=[stop]) == (
        b'{"text":"x","output_ids":[9],"meta_info":{"id":"r","finish_reason":'
        b'{"type":"stop","matched":"\\n"},"prompt_tokens":3,"completion_tokens":1}}'
    )
    length = FinishedChoice(index=1, text="yy", finish_reason="length", completion_tokens=2)
    abort = FinishedChoice(index=2, text="", finish_reason="abort", completion_tokens=0)
    many = json.loads(
        generate_response(request_id="r", prompt_tokens=3, choices=[stop, length, abort])
    )
    assert [m["index"] for m in many] == [0, 1, 2]
    assert many[1]["meta_info"]["finish_reason"] == {"type": "length", "length": 2}
    assert many[2]["meta_info"]["finish_reason"] == {"type": "abort"}
    assert "output_ids" not in many[1]


def test_generate_stream_chunks() -> None:
    one = GenerateStreamRenderer(request_id="r", prompt_tokens=3, n=1)
    assert one.chunk(0, "He", 1) == (
        b'{"text":"He","meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,'
        b'"completion_tokens":1}}'
    )
    last = json.loads(one.chunk(0, "Hello", 2, finish_reason="stop", matched_stop=2))
    assert last["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert "index" not in last
    two = GenerateStreamRenderer(request_id="r", prompt_tokens=3, n=2)
    assert json.loads(two.chunk(1, "a", 1, output_ids=(5,)))["index"] == 1


# --- the fast paths are the struct encoding ---------------------------------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


@given(text=TEXT, index=st.integers(0, 200))
def test_fast_paths_equal_struct_encoding(text: str, index: int) -> None:
    r = chat_renderer()
    expected = ChatCompletionChunk(
        id="chatcmpl-1",
        created=1700000000,
        model="m",
        choices=(ChunkChoice(index=index, delta=ChoiceDelta(content=text)),),
    )
    assert r.content(index, text) == JSON_ENCODER.encode(expected)
    expected_text = Completion(
        id="cmpl-1",
        created=1700000000,
        model="m",
        choices=(CompletionChoice(text=text, index=index),),
    )
    assert completion_renderer().text(index, text) == JSON_ENCODER.encode(expected_text)


@given(
    text=TEXT,
    request_id=TEXT,
    model=TEXT,
    created=st.integers(0, 2**40),
    stream_id=st.one_of(TEXT, st.integers(0, 2**31)),
)
def test_any_text_round_trips_through_chunks_and_frames(
    text: str, request_id: str, model: str, created: int, stream_id: str | int
) -> None:
    r = ChatStreamRenderer(request_id=request_id, created=created, model=model, include_usage=False)
    payload = r.content(0, text)
    chunk = msgspec.json.decode(payload, type=ChatCompletionChunk)
    assert chunk.choices[0].delta.content == text
    assert (chunk.id, chunk.model, chunk.created) == (request_id, model, created)
    frame = json.loads(websocket_chunk(stream_id, payload))
    assert frame == {"type": "chunk", "id": stream_id, "data": json.loads(payload)}
    event = sse(payload)
    assert event.count(b"\n") == 2  # JSON escapes newlines: one event, never split
    assert json.loads(event[len(b"data: ") : -2])["choices"][0]["delta"]["content"] == text
    text_chunk = json.loads(completion_renderer().text(3, text))
    assert text_chunk["choices"][0]["text"] == text


# --- a real peer reads our stream ----------------------------------------------------------


def sdk_replaying(body: bytes) -> openai.OpenAI:
    """The openai SDK, whose every request is answered with `body` as an event stream."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return openai.OpenAI(
        api_key="x",
        base_url="http://gateway.invalid/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def test_openai_sdk_reads_our_chat_stream() -> None:
    r = chat_renderer()
    frames = [r.role(0), r.content(0, "Hel"), r.content(0, "lo"), r.finish(0, "stop", "\n")]
    usage = r.usage(Usage.of(3, 2))
    assert usage is not None
    body = b"".join(sse(f) for f in [*frames, usage]) + SSE_DONE
    client = sdk_replaying(body)
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, None, None, "stop"]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 5


def test_openai_sdk_raises_on_our_error_event() -> None:
    r = chat_renderer()
    body = sse(r.role(0)) + sse_error(EngineRejected("boom")) + SSE_DONE
    client = sdk_replaying(body)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = iter(stream)
    assert next(chunks).choices[0].delta.role == "assistant"
    with pytest.raises(openai.APIError, match="boom"):
        next(chunks)


def test_openai_sdk_reads_our_completion_stream() -> None:
    r = completion_renderer()
    usage = r.usage(Usage.of(2, 2))
    assert usage is not None
    frames = [r.text(0, "once"), r.text(0, " upon"), r.finish(0, "length"), usage]
    client = sdk_replaying(b"".join(sse(f) for f in frames) + SSE_DONE)
    stream = client.completions.create(
        model="m", prompt="x", stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "once upon"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 2
