"""Pure. The last request-building step: shape a GeneratePlan for one worker's runtime and wire.

`finalize` is the single point where a request meets its worker's (runtime, wire)
(docs/architecture.md §2, docs/stops-and-finalize.md §1). It reads that pair's row of the
capability table (`neutral/capabilities.py`), refuses what the engine cannot take
(`core/unsupported.py`: a 400 naming the parameter), then shapes what the ENGINE is asked; the
wire builders only rename fields. What the CLIENT sees is always enforced by the router's stop
scanner from `plan.stop_spec` (built by prepare from the client's request), on every runtime,
whatever the engine was asked: finalize returns only the engine requests.

Shaping, each step keyed by a field of the row:

- Structured outputs and bad_words: rewritten into the engine's spelling
  (`core/engine_fields.py`, docs/request-fields.md).
- Prompt logprobs implied by chat echo (the client named no field) are dropped where the engine
  cannot return them.
- `string_stops` TOKEN_IDS (SGLang gRPC, vLLM ZMQ, TokenSpeed ZMQ): string stops are stripped;
  each one that encodes to exactly one token becomes a stop token id (dedup, order kept) —
  unless min_tokens is set: the engine would mask that id below min_tokens and so change what
  it samples, so the strings stay the scanner's alone, matched after min_tokens tokens.
  ENGINE (vLLM, TokenSpeed, TRT-LLM gRPC): the strings are sent; the engine matches them too.
- `folds_eos` (vLLM ZMQ, a tokenizer-less EngineCore): the EOS ids (the tokenizer's and the
  model folder's extra ones) become stop ids, unless ignore_eos, plus `_eos_token_id` (the
  folder's primary EOS) and `_all_stop_token_ids` (what min_tokens masks).
- `chat_skips_special_tokens` (vLLM gRPC, SGLang gRPC): chat forces skip_special_tokens on
  (the router detokenizes).
- `stop_text_only_on_completion` (vLLM gRPC, TRT-LLM): no_stop_trim reaches the engine on
  completions only.
- `stop_ids_on_every_endpoint` False (TRT-LLM): chat and generate send no stop ids (the router
  enforces the client's); `default_max_tokens` (TRT-LLM requires the field): an unset one
  becomes 2048 (chat, generate) or 16 (completion), as smg sends.
n > 1 becomes n engine requests (`<id>-<i>`, seed + i): no engine wire here fans out for us;
a batched completion does that for each of its prompts (choice i * n + j).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from smg_trio.core.engine_fields import shape_engine_fields
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.core.unsupported import refuse_unsupported
from smg_trio.neutral.capabilities import Capabilities, StringStops, capabilities_of
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import EngineRequest, EosIds, SamplingParams


class WorkerTarget(msgspec.Struct, frozen=True, kw_only=True):
    """What finalize needs to know about the worker a request goes to.

    `eos_ids` are the worker's model folder EOS ids; only an engine that `folds_eos` (vLLM over
    ZMQ) uses them: its EngineCore has no tokenizer, so the gateway tells it which ids are EOS.
    """

    runtime: Runtime
    wire: Wire
    eos_ids: EosIds = EosIds()


class Finalized(msgspec.Struct, frozen=True, kw_only=True):
    """The engine requests for one worker. What the router enforces itself is `plan.stop_spec`,
    the same on every runtime (docs/stops-and-finalize.md §1.2)."""

    runtime: Runtime
    wire: Wire
    requests: tuple[EngineRequest, ...]


def finalize(
    plan: GeneratePlan, worker: WorkerTarget, tokenizer: TokenizerLike | None
) -> Finalized:
    """Shape `plan` for `worker`; raise before any I/O when the worker cannot take it."""
    caps = capabilities_of(worker.runtime, worker.wire)
    refuse_unsupported(plan, caps)
    sampling = plan.sampling
    if sampling.prompt_logprobs is not None and not caps.prompt_logprobs:
        # Implied by chat echo (refuse_unsupported refused a named field): dropped.
        sampling = msgspec.structs.replace(sampling, prompt_logprobs=None)
    sampling = shape_engine_fields(sampling, caps, tokenizer)
    sampling = _shape_stops(sampling, caps, plan.endpoint, tokenizer, worker.eos_ids)
    return Finalized(
        runtime=worker.runtime, wire=worker.wire, requests=tuple(_fan_out(plan, sampling))
    )


def _shape_stops(
    sampling: SamplingParams,
    caps: Capabilities,
    endpoint: Endpoint,
    tokenizer: TokenizerLike | None,
    eos: EosIds,
) -> SamplingParams:
    """Stops, EOS, special tokens and max_tokens as the engine of `caps` is asked them
    (docs/stops-and-finalize.md §1.3)."""
    # Chat-templated prompts (chat, Responses, Messages) force it, as vLLM's chat does.
    chat = endpoint in (Endpoint.CHAT, Endpoint.RESPONSES, Endpoint.MESSAGES)
    completion = endpoint is Endpoint.COMPLETION
    if caps.string_stops is StringStops.TOKEN_IDS:
        sampling = _resolve_string_stops(sampling, tokenizer)
    if caps.chat_skips_special_tokens and chat and not sampling.skip_special_tokens:
        # Chat text is detokenized by the router, never the engine: ask the engine to skip.
        sampling = msgspec.structs.replace(sampling, skip_special_tokens=True)
    if caps.folds_eos:
        sampling = _fold_eos(sampling, tokenizer, eos)
    elif caps.dedups_stop_ids:
        sampling = msgspec.structs.replace(
            sampling, stop_token_ids=tuple(dict.fromkeys(sampling.stop_token_ids))
        )
    if caps.stop_text_only_on_completion:
        sampling = msgspec.structs.replace(
            sampling, no_stop_trim=completion and sampling.no_stop_trim
        )
    if not caps.stop_ids_on_every_endpoint and not completion:
        # TRT-LLM's chat/generate builders send stop words only; the router enforces the
        # client's ids (docs/stops-and-finalize.md §1.2, case 18).
        sampling = msgspec.structs.replace(sampling, stop_token_ids=())
    defaults = caps.default_max_tokens
    if defaults is not None and sampling.max_tokens is None:
        default = defaults.completion if completion else defaults.other
        sampling = msgspec.structs.replace(sampling, max_tokens=default)
    return sampling


def _resolve_string_stops(
    sampling: SamplingParams, tokenizer: TokenizerLike | None
) -> SamplingParams:
    """Strip every string stop; convert the single-token ones to stop ids (docs/stops-and-finalize.md §1.3 step 2)."""
    if not sampling.stop:
        return sampling
    ids = list(sampling.stop_token_ids)
    # With min_tokens the engine masks its stop ids until then: a stop string turned into an id
    # would change the sampled text (vLLM never does it); the scanner alone enforces them.
    if tokenizer is not None and not sampling.min_tokens:
        for text in sampling.stop:
            if not text:
                continue
            encoded = tokenizer.encode(text, add_special_tokens=False)
            # A multi-token stop must never become one of its sub-token ids: the engine would
            # stop too early. Only an exact single-token stop is safe to hand to the engine.
            if len(encoded) == 1 and encoded[0] not in ids:
                ids.append(encoded[0])
    return msgspec.structs.replace(sampling, stop=(), stop_token_ids=tuple(ids))


def _fold_eos(
    sampling: SamplingParams, tokenizer: TokenizerLike | None, eos: EosIds
) -> SamplingParams:
    """vLLM EngineCore has no tokenizer: tell it the EOS ids (docs/stops-and-finalize.md §2.4).

    Unless `ignore_eos`, the tokenizer's EOS ids, then the folder's extra ones, are appended to
    the stop ids and the folder's primary EOS becomes `eos_token_id`; `all_stop_token_ids`
    (masked below min_tokens) is the union of the stop ids and the folder's EOS ids either way.
    """
    stop_ids = tuple(dict.fromkeys(sampling.stop_token_ids))
    if not sampling.ignore_eos:
        tokenizer_eos = () if tokenizer is None else tokenizer.eos_token_ids
        stop_ids = _append_missing(stop_ids, (*tokenizer_eos, *eos.extra))
    folder_eos = (() if eos.primary is None else (eos.primary,)) + eos.extra
    return msgspec.structs.replace(
        sampling,
        stop_token_ids=stop_ids,
        eos_token_id=None if sampling.ignore_eos else eos.primary,
        all_stop_token_ids=tuple(sorted({*stop_ids, *folder_eos})),
    )


def _append_missing(ids: Sequence[int], extra: Iterable[int]) -> tuple[int, ...]:
    merged = list(ids)
    for token_id in extra:
        if token_id not in merged:
            merged.append(token_id)
    return tuple(merged)


def _fan_out(plan: GeneratePlan, sampling: SamplingParams) -> list[EngineRequest]:
    """One engine request per choice; prompt i's choice j is choice i * n + j (a batched
    completion's prompts each get `n`, seeded as that prompt alone would be)."""
    if plan.choice_count == 1:
        return [
            EngineRequest(
                request_id=plan.request_id,
                choice_index=0,
                prompt_ids=plan.prompt_ids,
                sampling=sampling,
                media=plan.media,
            )
        ]
    return [
        EngineRequest(
            request_id=f"{plan.request_id}-{prompt_index * plan.n + index}",
            choice_index=prompt_index * plan.n + index,
            prompt_ids=prompt.ids,
            media=plan.media,
            sampling=(
                sampling
                if sampling.seed is None
                else msgspec.structs.replace(sampling, seed=sampling.seed + index)
            ),
        )
        for prompt_index, prompt in enumerate(plan.prompts)
        for index in range(plan.n)
    ]
