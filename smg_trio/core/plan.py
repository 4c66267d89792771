"""Pure. The typed values that flow from `prepare` to `finalize` to the wire encoders.

`GeneratePlan` is what the client asked for, in engine-neutral terms, after validation,
templating and tokenization. `SamplingParams` is engine-neutral; a wire encoder maps it onto its
engine's fields. Everything here is frozen: stages return new values, they never fill in bags.
"""

from __future__ import annotations

import msgspec

from smg_trio.neutral.runtime import Endpoint


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """Engine-neutral sampling. `None` means "the engine's default" for that knob.

    `stop` and `stop_token_ids` are what the ENGINE is asked to stop on; after `finalize` they
    may differ from what the client sent (strings stripped, single-token stops converted, EOS
    folded). What the client sees is governed by `StopSpec`, built from the original request.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    min_tokens: int = 0
    logprobs: int | None = None  # top-k logprobs per sampled token; None = none
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()


class StopSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the router's stop scanner enforces for one choice (spec §3.1).

    Strings are hidden stops (trimmed), or visible ones when `no_stop_trim`. `token_ids` are
    the tokenizer's EOS ids (unless `ignore_eos`) followed by the client's `stop_token_ids`;
    they are hidden, or visible when `no_stop_trim`.
    """

    strings: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()
    skip_special_tokens: bool = True
    no_stop_trim: bool = False


class GeneratePlan(msgspec.Struct, frozen=True, kw_only=True):
    """A validated, templated, tokenized client request, ready to be finalized for a worker."""

    request_id: str
    endpoint: Endpoint
    model: str
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    echo_text: str | None = None  # completions `echo`: the prompt text to prepend
    stop_spec: StopSpec = StopSpec()
