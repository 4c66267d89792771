"""Pure. One renderer per client endpoint behind one protocol; a request picks its own once.

`ResponseAssembler` decides WHEN a choice opens, gets text or finishes; its `EndpointRenderer`
decides what that looks like for chat, completions or /generate: the chunk bytes (spliced by
`core.render`), the finish and usage a stream reports as data (`core.stream_end`), and the
non-streaming body. The assembler never looks at the endpoint again after `renderer_for`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, assert_never

from smg_trio.core.plan import GeneratePlan
from smg_trio.core.render import (
    ChatStreamRenderer,
    CompletionStreamRenderer,
    FinishedChoice,
    GenerateStreamRenderer,
    chat_completion,
    completion,
    generate_response,
)
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.neutral.runtime import Endpoint
from smg_trio.wire.openai_responses import Usage

MatchedStop = str | int | None


class ChoiceProgress(Protocol):
    """What a renderer may read of one choice (the assembler's record of it)."""

    tokens: int
    finish_reason: str
    matched: MatchedStop
    """What a full response reports: the stop string, or the stop token id."""
    streamed_match: MatchedStop
    """What a stream reports: the stop string; None for a router token stop (docs/stops-and-finalize.md §3.9)."""

    def full_text(self) -> str: ...


class EndpointRenderer(Protocol):
    @property
    def keeps_output_ids(self) -> bool:
        """Non-streaming bodies carry the generated ids (/generate)."""
        ...

    def opening(self, index: int) -> bytes | None:
        """The chunk that opens a choice's stream, if the endpoint has one."""
        ...

    def text(self, index: int, text: str, choice: ChoiceProgress) -> bytes:
        """The chunk for `text`, which the choice just produced (already in `full_text`)."""
        ...

    def finish(self, index: int, choice: ChoiceProgress) -> bytes:
        """The chunk that ends a finished choice."""
        ...

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        """What that finish chunk says, as data."""
        ...

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes | None: ...

    def reported_usage(self, prompt_tokens: int, completion_tokens: int) -> Usage | None: ...

    def body(self, prompt_tokens: int, choices: Sequence[FinishedChoice]) -> bytes:
        """The non-streaming response."""
        ...


def response_id(plan: GeneratePlan) -> str:
    """The id clients see: OpenAI's prefixes for chat and completions, the rid for /generate."""
    match plan.endpoint:
        case Endpoint.CHAT:
            return f"chatcmpl-{plan.request_id}"
        case Endpoint.COMPLETION:
            return f"cmpl-{plan.request_id}"
        case Endpoint.GENERATE:
            return plan.request_id
        case _:
            assert_never(plan.endpoint)


def renderer_for(plan: GeneratePlan, *, created: int) -> EndpointRenderer:
    """The renderer of `plan`'s endpoint, for the whole request."""
    rid = response_id(plan)
    match plan.endpoint:
        case Endpoint.CHAT:
            return ChatRenderer(plan, rid, created)
        case Endpoint.COMPLETION:
            return CompletionRenderer(plan, rid, created)
        case Endpoint.GENERATE:
            return GenerateRenderer(plan, rid)
        case _:
            assert_never(plan.endpoint)


class ChatRenderer:
    """`chat.completion.chunk`s: a role chunk, content chunks, a finish chunk per choice."""

    keeps_output_ids = False
    __slots__ = ("_chunks", "_created", "_id", "_model")

    def __init__(self, plan: GeneratePlan, request_id: str, created: int) -> None:
        self._id, self._created, self._model = request_id, created, plan.model
        self._chunks = ChatStreamRenderer(
            request_id=request_id,
            created=created,
            model=plan.model,
            include_usage=plan.include_usage,
        )

    def opening(self, index: int) -> bytes | None:
        return self._chunks.role(index)

    def text(self, index: int, text: str, choice: ChoiceProgress) -> bytes:
        return self._chunks.content(index, text)

    def finish(self, index: int, choice: ChoiceProgress) -> bytes:
        return self._chunks.finish(index, choice.finish_reason, choice.streamed_match)

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        return ChoiceFinish(index, choice.finish_reason, choice.streamed_match)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes | None:
        return self._chunks.usage(prompt_tokens, completion_tokens)

    def reported_usage(self, prompt_tokens: int, completion_tokens: int) -> Usage | None:
        return Usage.of(prompt_tokens, completion_tokens) if self._chunks.include_usage else None

    def body(self, prompt_tokens: int, choices: Sequence[FinishedChoice]) -> bytes:
        return chat_completion(
            request_id=self._id,
            created=self._created,
            model=self._model,
            prompt_tokens=prompt_tokens,
            choices=choices,
        )


class CompletionRenderer:
    """`text_completion` chunks: the echoed prompt first when asked, then text, then finish."""

    keeps_output_ids = False
    __slots__ = ("_chunks", "_created", "_echoes", "_id", "_model")

    def __init__(self, plan: GeneratePlan, request_id: str, created: int) -> None:
        self._id, self._created, self._model = request_id, created, plan.model
        # Each choice opens with its own prompt's echo (choice i * n + j echoes prompt i).
        self._echoes = tuple(prompt.echo_text for prompt in plan.prompts for _ in range(plan.n))
        self._chunks = CompletionStreamRenderer(
            request_id=request_id,
            created=created,
            model=plan.model,
            include_usage=plan.include_usage,
        )

    def opening(self, index: int) -> bytes | None:
        echo = self._echoes[index]
        return self._chunks.text(index, echo) if echo else None

    def text(self, index: int, text: str, choice: ChoiceProgress) -> bytes:
        return self._chunks.text(index, text)

    def finish(self, index: int, choice: ChoiceProgress) -> bytes:
        return self._chunks.finish(index, choice.finish_reason)

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        return ChoiceFinish(index, choice.finish_reason, None)  # chunks carry no matched_stop

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes | None:
        return self._chunks.usage(prompt_tokens, completion_tokens)

    def reported_usage(self, prompt_tokens: int, completion_tokens: int) -> Usage | None:
        return Usage.of(prompt_tokens, completion_tokens) if self._chunks.include_usage else None

    def body(self, prompt_tokens: int, choices: Sequence[FinishedChoice]) -> bytes:
        return completion(
            request_id=self._id,
            created=self._created,
            model=self._model,
            prompt_tokens=prompt_tokens,
            choices=choices,
        )


class GenerateRenderer:
    """SGLang /generate: every chunk carries the cumulative text and `meta_info` counts."""

    keeps_output_ids = True
    __slots__ = ("_chunks", "_id")

    def __init__(self, plan: GeneratePlan, request_id: str) -> None:
        self._id = request_id
        self._chunks = GenerateStreamRenderer(
            request_id=request_id, prompt_tokens=len(plan.prompt_ids), n=plan.n
        )

    def opening(self, index: int) -> bytes | None:
        return None

    def text(self, index: int, text: str, choice: ChoiceProgress) -> bytes:
        return self._chunks.chunk(index, choice.full_text(), choice.tokens)

    def finish(self, index: int, choice: ChoiceProgress) -> bytes:
        return self._chunks.chunk(
            index,
            choice.full_text(),
            choice.tokens,
            finish_reason=choice.finish_reason,
            matched_stop=choice.matched,
        )

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        # `meta_info.finish_reason` carries `matched` for stops only (render.generate_finish_reason).
        matched = choice.matched if choice.finish_reason == "stop" else None
        return ChoiceFinish(index, choice.finish_reason, matched)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes | None:
        return None  # every chunk carries its counts

    def reported_usage(self, prompt_tokens: int, completion_tokens: int) -> Usage | None:
        return Usage.of(prompt_tokens, completion_tokens)

    def body(self, prompt_tokens: int, choices: Sequence[FinishedChoice]) -> bytes:
        return generate_response(request_id=self._id, prompt_tokens=prompt_tokens, choices=choices)
