"""Pure. SGLang's /generate responses: the whole body, the streamed chunks (each carrying the
cumulative text and `meta_info` counts, as SGLang streams), and the `EndpointRenderer` the
response assembler uses for /generate (core/openai_rendering.py holds chat and completions).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.core.logprobs import TokenStrings, sglang_logprobs
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.render import FinishedChoice
from smg_trio.core.renderer_vocabulary import ChoiceProgress, Positions, RenderedLogprobs
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.neutral.events import TokenLogprob
from smg_trio.wire.openai_responses import (
    JSON_ENCODER,
    NO_LOGPROBS,
    GenerateFinishReason,
    GenerateLogprobs,
    GenerateMetaInfo,
    GenerateResponse,
    MatchedStop,
    PromptLogprobs,
    Usage,
)

_encode = JSON_ENCODER.encode


def generate_finish_reason(
    reason: str, matched_stop: MatchedStop | None, completion_tokens: int
) -> GenerateFinishReason:
    """SGLang's finish object: stop carries `matched`, length carries the token count."""
    if reason == "length":
        return GenerateFinishReason(type="length", length=completion_tokens)
    if reason == "stop" and matched_stop is not None:
        return GenerateFinishReason(type="stop", matched=matched_stop)
    return GenerateFinishReason(type=reason)


def _generate_response(
    request_id: str,
    prompt_tokens: int,
    index: int | None,
    text: str,
    completion_tokens: int,
    finish: GenerateFinishReason | None,
    output_ids: tuple[int, ...] | None,
    logprobs: GenerateLogprobs | None = None,
) -> GenerateResponse:
    return GenerateResponse(
        text=text,
        output_ids=msgspec.UNSET if output_ids is None else output_ids,
        meta_info=GenerateMetaInfo(
            id=request_id,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            output_token_logprobs=(logprobs or NO_LOGPROBS).output_token_logprobs,
            output_top_logprobs=(logprobs or NO_LOGPROBS).output_top_logprobs,
        ),
        index=msgspec.UNSET if index is None else index,
    )


def generate_response(
    *, request_id: str, prompt_tokens: int, choices: Sequence[FinishedChoice]
) -> bytes:
    """A non-streaming /generate body: one object, or an array of them when n > 1 (as SGLang)."""
    many = len(choices) > 1
    rendered = [
        _generate_response(
            request_id,
            prompt_tokens,
            c.index if many else None,
            c.text,
            c.completion_tokens,
            generate_finish_reason(c.finish_reason, c.matched_stop, c.completion_tokens),
            c.output_ids,
            c.logprobs if isinstance(c.logprobs, GenerateLogprobs) else None,
        )
        for c in choices
    ]
    return _encode(rendered if many else rendered[0])


class GenerateStreamRenderer:
    """Chunks of a streaming /generate: each carries the CUMULATIVE text, as SGLang streams."""

    __slots__ = ("_id", "_n", "_prompt_tokens")

    def __init__(self, *, request_id: str, prompt_tokens: int, n: int) -> None:
        self._id = request_id
        self._prompt_tokens = prompt_tokens
        self._n = n

    def chunk(
        self,
        index: int,
        text: str,
        completion_tokens: int,
        *,
        finish_reason: str | None = None,
        matched_stop: MatchedStop | None = None,
        output_ids: tuple[int, ...] | None = None,
        logprobs: GenerateLogprobs | None = None,
    ) -> bytes:
        finish = (
            None
            if finish_reason is None
            else generate_finish_reason(finish_reason, matched_stop, completion_tokens)
        )
        response = _generate_response(
            self._id,
            self._prompt_tokens,
            index if self._n > 1 else None,
            text,
            completion_tokens,
            finish,
            output_ids,
            logprobs,
        )
        return _encode(response)


class GenerateRenderer:
    """SGLang /generate: every chunk carries the cumulative text and `meta_info` counts, and
    with `return_logprob` the cumulative output logprobs (SGLang's shape, core.logprobs)."""

    keeps_output_ids = True
    __slots__ = ("_chunks", "_id", "_positions", "_prompt_tokens", "_strings", "_with_top")

    def __init__(self, plan: GeneratePlan, tokenizer: TokenizerLike, request_id: str) -> None:
        self._id = request_id
        self._prompt_tokens = len(plan.prompt_ids)
        self._chunks = GenerateStreamRenderer(
            request_id=request_id, prompt_tokens=len(plan.prompt_ids), n=plan.n
        )
        width = plan.sampling.logprobs
        # Per choice, every position released so far (None: logprobs not asked).
        self._positions: list[list[TokenLogprob]] | None = (
            None if width is None else [[] for _ in range(plan.choice_count)]
        )
        self._with_top = bool(width)
        self._strings = TokenStrings(tokenizer) if plan.logprob_text else None

    def _logprobs(self, index: int, positions: Positions) -> GenerateLogprobs | None:
        if self._positions is None:
            return None
        released = self._positions[index]
        released.extend(positions)
        return sglang_logprobs(self._strings, released, with_top=self._with_top)

    def opening(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        return ()

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        logprobs = self._logprobs(index, positions)
        return self._chunks.chunk(index, choice.full_text(), choice.tokens, logprobs=logprobs)

    def closing(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        return ()

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        return self._chunks.chunk(
            index,
            choice.full_text(),
            choice.tokens,
            finish_reason=choice.finish_reason,
            matched_stop=choice.matched,
            logprobs=self._logprobs(index, positions),
        )

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        # `meta_info.finish_reason` carries `matched` for stops only (render.generate_finish_reason).
        matched = choice.matched if choice.finish_reason == "stop" else None
        return ChoiceFinish(index, choice.finish_reason, matched)

    def usage_chunk(self, usage: Usage) -> bytes | None:
        return None  # every chunk carries its counts

    def reported_usage(self, usage: Usage) -> Usage | None:
        return usage

    def final_logprobs(
        self, index: int, positions: Positions, prompt: Positions | None
    ) -> RenderedLogprobs | None:
        if self._positions is None:
            return None
        return sglang_logprobs(self._strings, positions, with_top=self._with_top)

    def prompt_logprobs(self, prompt: Positions | None) -> PromptLogprobs | UnsetType:
        return UNSET  # no /generate field asks for prompt logprobs here

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        return generate_response(
            request_id=self._id, prompt_tokens=self._prompt_tokens, choices=choices
        )
