"""Pure. Renders results as client bytes: OpenAI stream chunks, SSE events, WebSocket frames
(the non-streaming OpenAI bodies: core/openai_bodies.py; SGLang's /generate bodies and chunks:
core/generate_rendering.py).

Streaming renderers return the chunk *payload* (one JSON object); `sse` and `websocket_chunk`
frame it, so both transports carry byte-identical chunks. The per-token paths (`content`, `text`)
splice the JSON-encoded text between pre-encoded constant bytes instead of building structs:
tests pin that the result equals the struct encoding byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from smg_trio.wire.openai import ToolCall
from smg_trio.wire.openai_responses import (
    JSON_ENCODER,
    ChatCompletionChunk,
    ChoiceDelta,
    ChoiceLogprobs,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    GenerateLogprobs,
    MatchedStop,
    PromptLogprobs,
    Usage,
)

SSE_DONE = b"data: [DONE]\n\n"

_encode = JSON_ENCODER.encode
# vLLM's `return_token_ids` fields: None (not asked) is left out of the JSON.
TokenIds = Sequence[int] | None


def token_ids_field(ids: TokenIds) -> tuple[int, ...] | msgspec.UnsetType:
    return msgspec.UNSET if ids is None else tuple(ids)


def sse(payload: bytes) -> bytes:
    """One server-sent event carrying `payload`."""
    return b"data: " + payload + b"\n\n"


def websocket_chunk(stream_id: str | int, payload: bytes) -> bytes:
    """`{"type":"chunk","id":ID,"data":CHUNK}` where CHUNK is exactly the SSE payload."""
    return b'{"type":"chunk","id":' + _encode(stream_id) + b',"data":' + payload + b"}"


def _head(request_id: str, object_name: str, created: int, model: str) -> bytes:
    """The constant start of every chunk of one stream, up to the opening of `choices`."""
    return b"".join(
        (
            b'{"id":',
            _encode(request_id),
            b',"object":"',
            object_name.encode(),
            b'","created":',
            b"%d" % created,
            b',"model":',
            _encode(model),
            b',"choices":[',
        )
    )


_CHAT_CONTENT = b',"delta":{"content":'
_CHAT_TAIL = b'},"logprobs":null,"finish_reason":null}]}'
_CHAT_LOGPROBS = b'},"logprobs":'
_CHAT_LOGPROBS_TAIL = b',"finish_reason":null}]}'


class ChatStreamRenderer:
    """Chunks of one streaming chat completion (`chat.completion.chunk`)."""

    __slots__ = ("_content", "_created", "_head", "_id", "_model", "include_usage")

    def __init__(self, *, request_id: str, created: int, model: str, include_usage: bool) -> None:
        self._id = request_id
        self._created = created
        self._model = model
        self.include_usage = include_usage
        self._head = _head(request_id, "chat.completion.chunk", created, model)
        self._content: dict[int, bytes] = {}

    def _chunk(
        self,
        choices: tuple[ChunkChoice, ...],
        usage: Usage | None = None,
        prompt_token_ids: TokenIds = None,
    ) -> bytes:
        chunk = ChatCompletionChunk(
            id=self._id,
            created=self._created,
            model=self._model,
            choices=choices,
            usage=msgspec.UNSET if usage is None else usage,
            prompt_token_ids=token_ids_field(prompt_token_ids),
        )
        return _encode(chunk)

    def role(
        self,
        index: int,
        usage: Usage | None = None,
        prompt_token_ids: TokenIds = None,
        role: str = "assistant",
    ) -> bytes:
        """The first chunk of a choice: the reply's role and empty content (and vLLM's
        `prompt_token_ids` when asked, on every choice's role chunk as vLLM sends them)."""
        delta = ChoiceDelta(role=role, content="")
        return self._chunk((ChunkChoice(index=index, delta=delta),), usage, prompt_token_ids)

    def content(
        self,
        index: int,
        text: str,
        logprobs: ChoiceLogprobs | bytes | None = None,
        usage: Usage | None = None,
        token_ids: TokenIds = None,
    ) -> bytes:
        """A content chunk; `logprobs` as the struct or already JSON-encoded (spliced in)."""
        if usage is not None or token_ids is not None:
            raw = msgspec.Raw(logprobs) if isinstance(logprobs, bytes) else logprobs
            choice = ChunkChoice(
                index=index,
                delta=ChoiceDelta(content=text),
                logprobs=raw,
                token_ids=token_ids_field(token_ids),
            )
            return self._chunk((choice,), usage)
        prefix = self._content.get(index)
        if prefix is None:
            prefix = self._content[index] = self._head + b'{"index":%d' % index + _CHAT_CONTENT
        if logprobs is None:
            return prefix + _encode(text) + _CHAT_TAIL
        encoded = logprobs if isinstance(logprobs, bytes) else _encode(logprobs)
        return prefix + _encode(text) + _CHAT_LOGPROBS + encoded + _CHAT_LOGPROBS_TAIL

    def reasoning(self, index: int, text: str) -> bytes:
        """A reasoning-only chunk, under both names (spliced: the per-token path of a
        reasoning model; equal to the struct encoding, a test pins it)."""
        encoded = _encode(text)
        return b"".join(
            (
                self._head,
                b'{"index":%d,"delta":{"reasoning_content":' % index,
                encoded,
                b',"reasoning":',
                encoded,
                _CHAT_TAIL,
            )
        )

    def arguments(self, index: int, call: int, fragment: str) -> bytes:
        """A chunk carrying only a piece of call `call`'s arguments (spliced, as `reasoning`)."""
        return b"".join(
            (
                self._head,
                b'{"index":%d,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":'
                % (index, call),
                _encode(fragment),
                b"}}]",
                _CHAT_TAIL,
            )
        )

    def delta(
        self,
        index: int,
        delta: ChoiceDelta,
        logprobs: ChoiceLogprobs | None = None,
        usage: Usage | None = None,
        token_ids: TokenIds = None,
    ) -> bytes:
        """A chunk with any delta (an output parser's: reasoning, tool calls)."""
        choice = ChunkChoice(
            index=index, delta=delta, logprobs=logprobs, token_ids=token_ids_field(token_ids)
        )
        return self._chunk((choice,), usage)

    def finish(
        self,
        index: int,
        reason: str,
        matched_stop: MatchedStop | None = None,
        logprobs: ChoiceLogprobs | None = None,
        usage: Usage | None = None,
        stop_reason: MatchedStop | None = None,
        token_ids: TokenIds = None,
    ) -> bytes:
        """The last chunk of a choice: empty delta, `finish_reason`, vLLM's `stop_reason`, and
        `matched_stop` if any; `logprobs` of tokens released without text of their own (their
        text came earlier)."""
        choice = ChunkChoice(
            index=index,
            delta=ChoiceDelta(),
            logprobs=logprobs,
            finish_reason=reason,
            stop_reason=stop_reason,
            matched_stop=msgspec.UNSET if matched_stop is None else matched_stop,
            token_ids=token_ids_field(token_ids),
        )
        return self._chunk((choice,), usage)

    def usage(self, usage: Usage) -> bytes | None:
        """The usage chunk (`choices: []`) when the client asked for it, else None."""
        if not self.include_usage:
            return None
        return self._chunk((), usage)


_COMPLETION_TAIL = b',"logprobs":null,"finish_reason":null}]}'


class CompletionStreamRenderer:
    """Chunks of one streaming completion (`text_completion`, as OpenAI streams them).

    `matched_stop` is not sent in completion chunks (docs/stops-and-finalize.md §3.9).
    """

    __slots__ = ("_created", "_head", "_id", "_model", "_text_prefix", "include_usage")

    def __init__(self, *, request_id: str, created: int, model: str, include_usage: bool) -> None:
        self._id = request_id
        self._created = created
        self._model = model
        self.include_usage = include_usage
        self._head = _head(request_id, "text_completion", created, model)
        self._text_prefix = self._head + b'{"text":'

    def _chunk(self, choices: tuple[CompletionChoice, ...], usage: Usage | None = None) -> bytes:
        chunk = Completion(
            id=self._id,
            created=self._created,
            model=self._model,
            choices=choices,
            usage=msgspec.UNSET if usage is None else usage,
        )
        return _encode(chunk)

    def text(
        self,
        index: int,
        text: str,
        logprobs: CompletionLogprobs | None = None,
        usage: Usage | None = None,
        ids: tuple[TokenIds, TokenIds] = (None, None),
    ) -> bytes:
        """A text chunk; `ids`: vLLM's `prompt_token_ids` (a choice's first chunk) and
        `token_ids` (this chunk's), when asked."""
        if logprobs is not None or usage is not None or ids != (None, None):
            choice = CompletionChoice(
                text=text,
                index=index,
                logprobs=logprobs,
                prompt_token_ids=token_ids_field(ids[0]),
                token_ids=token_ids_field(ids[1]),
            )
            return self._chunk((choice,), usage)
        return self.plain_text(index, text)

    def plain_text(self, index: int, text: str) -> bytes:
        """`text(index, text)`: a text chunk with no logprobs, usage or ids."""
        return b"".join(
            (self._text_prefix, _encode(text), b',"index":%d' % index, _COMPLETION_TAIL)
        )

    def finish(
        self,
        index: int,
        reason: str,
        text: str = "",
        logprobs: CompletionLogprobs | None = None,
        usage: Usage | None = None,
        stop_reason: MatchedStop | None = None,
        ids: tuple[TokenIds, TokenIds] = (None, None),
    ) -> bytes:
        choice = CompletionChoice(
            text=text,
            index=index,
            logprobs=logprobs,
            finish_reason=reason,
            stop_reason=stop_reason,
            prompt_token_ids=token_ids_field(ids[0]),
            token_ids=token_ids_field(ids[1]),
        )
        return self._chunk((choice,), usage)

    def usage(self, usage: Usage) -> bytes | None:
        if not self.include_usage:
            return None
        return self._chunk((), usage)


class FinishedChoice(msgspec.Struct, frozen=True, kw_only=True):
    """One finished choice of a non-streaming response, as the request produced it.

    `text` is final (stop-trimmed; for completions already with echo prefix and suffix).
    `completion_tokens` is the engine's count for this choice.
    """

    index: int
    text: str
    finish_reason: str
    completion_tokens: int
    matched_stop: MatchedStop | None = None
    stop_reason: MatchedStop | None = None
    """vLLM's: the stop string, a stop token id other than the primary EOS, or None."""
    reasoning: str | None = None
    # Chat with output parsers: `text` is the parsed content (null when empty, as vLLM's),
    # beside the reasoning and the calls (docs/tools-and-reasoning.md §4).
    parsed: bool = False
    tool_calls: tuple[ToolCall, ...] | None = None
    output_ids: tuple[int, ...] | None = None
    logprobs: ChoiceLogprobs | CompletionLogprobs | GenerateLogprobs | None = None
    prompt_logprobs: PromptLogprobs | msgspec.UnsetType = msgspec.UNSET  # when asked (vLLM's shape)
    """Chat's or completions' logprobs of the released tokens, when the client asked."""
    weight_version: str | None = None
    """The engine's weight version at the finish, when it named one (vLLM's)."""
