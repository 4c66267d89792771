"""Pure. The events an engine backend yields for one request, and the one place they are merged.

`TokenDelta` and `ChoiceFinished` are engine-neutral: every backend (ZMQ or gRPC) produces them
and the response assembler consumes them. `coalesce` merges a batch of them; it runs once per
batch, where the request takes its events from the backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias, assert_never

import msgspec


class TopLogprob(msgspec.Struct, frozen=True):
    token_id: int
    logprob: float


class TokenLogprob(msgspec.Struct, frozen=True):
    """One generated position: the sampled token's logprob, its 1-based vocab rank when the
    engine reports it, and the top-k candidates when they were requested."""

    token_id: int
    logprob: float
    rank: int | None = None
    top: tuple[TopLogprob, ...] = ()


class TokenDelta(msgspec.Struct, frozen=True, tag=True):
    """New tokens of one choice since its previous delta (never empty).

    `logprobs` is parallel to `token_ids` when the engine sent logprobs for every new token,
    else None. `prompt_logprobs` rides on a choice's first delta when prompt logprobs were
    asked: one position per prompt token after the first (the first has no logprob), the
    prompt token as `token_id` with its vocab rank, and the top-k alternatives.
    """

    choice_index: int
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] | None = None
    prompt_logprobs: tuple[TokenLogprob, ...] | None = None


class ChoiceFinished(msgspec.Struct, frozen=True, tag=True):
    """The engine finished one choice; no more events for `choice_index` follow.

    `finish_reason` is "stop" or "length" (an engine's "repetition" counts as "stop").
    `stop_reason` is the stop token id the engine matched when it reports one (vLLM
    `stop_token_ids`), else None. Token counts are the engine's, for usage. `weight_version`
    names the weights of the finishing step when the engine says (vLLM's EngineCore does).
    """

    choice_index: int
    finish_reason: str
    stop_reason: int | str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    weight_version: str | None = None
    # vLLM's prompt tokens written to its prefix cache (its usage's created_cache_tokens);
    # None where the engine's wire does not say.
    cache_creation_tokens: int | None = None


EngineEvent: TypeAlias = TokenDelta | ChoiceFinished


def coalesce(events: Sequence[EngineEvent]) -> Sequence[EngineEvent]:
    """Merge each choice's token deltas in a batch into its first one; order within a choice kept.

    A choice's `ChoiceFinished` comes after all of its deltas, so merging a later delta into an
    earlier position never moves tokens past their finish. Deltas are gathered first and each
    merged delta is built once (linear in the batch, however far a slow consumer fell behind).
    """
    if len(events) < 2:  # the common case, one event per wake-up: nothing to merge
        return events
    slots: list[EngineEvent | list[TokenDelta]] = []
    open_group: dict[int, list[TokenDelta]] = {}  # choice index -> its deltas in this batch
    for event in events:
        match event:
            case TokenDelta(choice_index=choice):
                group = open_group.get(choice)
                if group is None:
                    group = open_group[choice] = []
                    slots.append(group)
                group.append(event)
            case ChoiceFinished(choice_index=choice):
                open_group.pop(choice, None)
                slots.append(event)
            case _:
                assert_never(event)
    return [_merged(slot) if isinstance(slot, list) else slot for slot in slots]


def _merged(deltas: list[TokenDelta]) -> TokenDelta:
    if len(deltas) == 1:
        return deltas[0]
    token_ids = tuple(token for delta in deltas for token in delta.token_ids)
    logprobs = None
    if all(delta.logprobs is not None for delta in deltas):
        logprobs = tuple(lp for delta in deltas for lp in delta.logprobs or ())
    # Only a choice's first delta carries prompt logprobs; keep them wherever it landed.
    prompt = next((d.prompt_logprobs for d in deltas if d.prompt_logprobs is not None), None)
    return TokenDelta(deltas[0].choice_index, token_ids, logprobs, prompt)
