"""Pure. The typed values that flow from `prepare` to `finalize` to the wire encoders.

`GeneratePlan` is what the client asked for, in engine-neutral terms (its sampling is the
neutral `SamplingParams`), after validation, templating and tokenization; `StopSpec` is what the
router's stop scanner enforces. Everything here is frozen: stages return new values, they never
fill in bags.
"""

from __future__ import annotations

import msgspec

from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams


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
    continuous_usage: bool = False  # stream_options.continuous_usage_stats: usage on every chunk
    echo_text: str | None = None  # `echo`: the prompt (completions) or last message (chat) text
    stop_spec: StopSpec = StopSpec()
