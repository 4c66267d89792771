"""Pure. vLLM's tokens-in/tokens-out `/inference/v1/generate` on our generation path
(docs/vllm-frontend.md §7): its plan, and the `EndpointRenderer` answering with token ids.

The request's ids are the prompt as they are (checked against the vocabulary); its sampling
knobs are the engine's. The answer carries each choice's generated ids (the stop token
included, as vLLM's), its finish and stop reasons, and usage; streamed, each chunk carries the
ids counted since the last one, and with `stream_options.include_usage` a closing chunk
carries the usage, as vLLM's server streams it. With `output_mode: "text"` each choice also
carries its text (stop-trimmed; a stream's chunk, the text released since the last one), and
every body says `output_mode: "text"`. A choice's finish names the weights that
sampled its ids (`weight_versions`) when the engine's finish said which (vLLM's EngineCore does,
on every step; a version cannot change within one request here, as only vLLM's own RL API
changes it, so one span covers every id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from msgspec import UNSET, UnsetType

from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prompt_model import PromptModel
from smg_trio.core.render import FinishedChoice
from smg_trio.core.renderer_vocabulary import ChoiceProgress, Positions, RenderedLogprobs
from smg_trio.core.sampling_plan import checked_prompt_ids, room_capped_max_tokens, stop_spec_for
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.wire.openai_responses import JSON_ENCODER, PromptLogprobs, Usage
from smg_trio.wire.vllm_tokens_generate import (
    TextChoice,
    TokensChoice,
    TokensFirstStreamChunk,
    TokensGenerateRequest,
    TokensResponse,
    TokensStreamChunk,
    TokensStreamUsage,
    TokensUsage,
    TokensUsageChunk,
    WeightVersionSpan,
)

_encode = JSON_ENCODER.encode
KNOBS: Final = (
    *("temperature", "top_p", "top_k", "min_p", "seed"),
    *("presence_penalty", "frequency_penalty", "repetition_penalty"),
)
"""The sampling fields the request and the engine spell alike."""
RESPONSE_ID_PREFIX = "generate-tokens-"


def prepare_tokens_generate(
    req: TokensGenerateRequest, model: PromptModel, *, request_id: str
) -> GeneratePlan:
    """The plan of a checked request (wire/vllm_tokens_generate.py decoded it)."""
    prompt_ids = checked_prompt_ids(req.token_ids, model.vocab_size, "token_ids")
    params = req.sampling_params
    max_tokens = room_capped_max_tokens(
        len(prompt_ids), params.max_tokens, model, "sampling_params.max_tokens"
    )
    if max_tokens is not None and params.min_tokens > max_tokens:
        raise ClientError(  # vLLM's check, against the max_tokens it filled in
            f"sampling_params.min_tokens ({params.min_tokens}) must not exceed max_tokens "
            f"({max_tokens}), the room the context leaves",
            param="sampling_params.min_tokens",
        )
    knobs = {name: getattr(params, name) for name in KNOBS}
    sampling = SamplingParams(
        **knobs,
        max_tokens=max_tokens,
        min_tokens=params.min_tokens,
        ignore_eos=params.ignore_eos,
        stop_token_ids=tuple(params.stop_token_ids or ()),
    )
    stream = bool(req.stream)
    return GeneratePlan(
        request_id=req.request_id or request_id,
        endpoint=Endpoint.TOKENS,
        model=req.model or model.name,
        prompt_ids=prompt_ids,
        sampling=sampling,
        n=params.n,
        stream=stream,
        include_usage=stream
        and req.stream_options is not None
        and bool(req.stream_options.include_usage),
        stop_spec=stop_spec_for(sampling, model.tokenizer, model.eos_token_id),
        return_token_ids=bool(req.return_token_ids),
        stream_interval=model.stream_interval,
        text_output=req.output_mode == "text",
    )


class TokensRenderer:
    """Token ids out: the text the assembler decodes is never shown."""

    keeps_output_ids = True
    __slots__ = ("_created", "_id", "_include_usage", "_mode", "_model", "_prompt_ids", "_sent")

    def __init__(self, plan: GeneratePlan, request_id: str, created: int) -> None:
        self._id, self._created, self._model = request_id, created, plan.model
        self._include_usage = plan.include_usage
        # Sent once: on the first streamed chunk, or in the whole answer.
        self._prompt_ids: tuple[int, ...] | None = (
            plan.prompt_ids if plan.return_token_ids else None
        )
        self._sent = [0] * plan.n  # a stream's ids sent per choice (the finish's span)
        self._mode = "text" if plan.text_output else "tokens"

    def _chunk(
        self,
        index: int,
        ids: Sequence[int],
        reason: str | None,
        stop: object,
        versions: tuple[WeightVersionSpan, ...] | None = None,
        text: str = "",
    ) -> bytes:
        self._sent[index] += len(ids)
        choice = self._choice(index, reason, stop, tuple(ids), versions, text)
        mode = self._mode
        if self._prompt_ids is not None:
            first = TokensFirstStreamChunk(
                request_id=self._id,
                choices=(choice,),
                prompt_token_ids=self._prompt_ids,
                output_mode=mode,
            )
            self._prompt_ids = None
            return _encode(first)
        return _encode(TokensStreamChunk(request_id=self._id, choices=(choice,), output_mode=mode))

    def _choice(
        self,
        index: int,
        reason: str | None,
        stop: object,
        ids: tuple[int, ...],
        versions: tuple[WeightVersionSpan, ...] | None,
        text: str,
    ) -> TokensChoice | TextChoice:
        stop_reason = stop if isinstance(stop, int | str) else None
        if self._mode == "text":
            return TextChoice(
                index=index,
                finish_reason=reason,
                stop_reason=stop_reason,
                token_ids=ids,
                weight_versions=versions,
                text=text,
            )
        return TokensChoice(
            index=index,
            finish_reason=reason,
            stop_reason=stop_reason,
            token_ids=ids,
            weight_versions=versions,
        )

    def opening(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        return ()

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        if self._mode == "text":
            return self._chunk(index, choice.new_ids, None, None, text=text)
        if not choice.new_ids:
            return b""  # the ids went out with an earlier chunk
        return self._chunk(index, choice.new_ids, None, None)

    def closing(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        return ()

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        total = self._sent[index] + len(choice.new_ids)
        versions = weight_versions(choice.weight_version, total)
        return self._chunk(
            index, choice.new_ids, choice.finish_reason, choice.stop_reason, versions
        )

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        return ChoiceFinish(index, choice.finish_reason, choice.stop_reason)

    def usage_chunk(self, usage: Usage) -> bytes | None:
        if not self._include_usage:
            return None
        counts = TokensStreamUsage(usage.prompt_tokens, usage.total_tokens, usage.completion_tokens)
        return _encode(TokensUsageChunk(request_id=self._id, usage=counts, output_mode=self._mode))

    def reported_usage(self, usage: Usage) -> Usage | None:
        return usage if self._include_usage else None

    def final_logprobs(
        self, index: int, positions: Positions, prompt: Positions | None
    ) -> RenderedLogprobs | None:
        return None  # logprobs are refused at decoding

    def prompt_logprobs(self, prompt: Positions | None) -> PromptLogprobs | UnsetType:
        return UNSET

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        return _encode(
            TokensResponse(
                request_id=self._id,
                model=self._model,
                created=self._created,
                usage=TokensUsage(usage.prompt_tokens, usage.total_tokens, usage.completion_tokens),
                choices=tuple(
                    self._choice(
                        c.index,
                        c.finish_reason,
                        c.stop_reason,
                        c.output_ids or (),
                        weight_versions(c.weight_version, len(c.output_ids or ())),
                        c.text,
                    )
                    for c in choices
                ),
                prompt_token_ids=self._prompt_ids,
                output_mode=self._mode,
            )
        )


def weight_versions(version: str | None, tokens: int) -> tuple[WeightVersionSpan, ...] | None:
    """vLLM's spans over a finished choice's `tokens` ids: no ids, no span; ids the engine
    named no weights for, null."""
    if not tokens:
        return ()
    return None if version is None else (WeightVersionSpan(version, 0, tokens),)
