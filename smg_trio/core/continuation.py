"""Pure. Mid-stream migration's decisions (docs/resilience.md §9): whether a request whose worker
failed may go on on another one, and the engine requests that go on with it.

A choice goes on as a new engine request whose prompt is its prompt followed by every token the
gateway received for it, asking for what is left: `max_tokens` and `min_tokens` less those
tokens, the same stops and sampling. What the client sees is still made by the request's one
`ResponseAssembler` (its stop scanners, detokenizers, parsers and usage carry on), so the
continuation only has to make the engine say the tokens the broken request would have said.

That holds when the engine's next token depends only on the ids before it and on what the
request asks, not on which of those ids were "prompt" and which "output". `migration_refusal`
names what breaks that, where the failure then reaches the client as before migration existed:

- A structured-output constraint (json, regex, choice, grammar; forced tool calls): the engine's
  grammar matcher would start over at the first continued token, as if the output began there;
  neither vLLM's EngineCore nor its gRPC API takes a matcher state or output ids to advance one.
- `presence_penalty` / `frequency_penalty`: vLLM counts them over output tokens only, so moving
  the output into the prompt changes them (`repetition_penalty` counts prompt and output alike:
  it is exact).
- `bad_words`: vLLM matches a multi-token bad word against the output so far only.
- Completions `echo` with max_tokens 0: there is no output to continue.

Prompt logprobs came with a choice's first token, so a continuation of a choice that has tokens
does not ask for them again (they would be the longer prompt's). `n > 1` and batched prompts go
on choice by choice: every unfinished choice continues from its own tokens, with its own seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from smg_trio.core.finalize import Finalized
from smg_trio.core.plan import GeneratePlan
from smg_trio.neutral.sampling import EngineRequest


def migration_refusal(plan: GeneratePlan) -> str | None:
    """Why `plan` cannot go on exactly on another worker (see the module doc); None: it can."""
    sampling = plan.sampling
    if sampling.constraint is not None:
        return "a structured-output constraint's grammar state cannot be carried over"
    if sampling.presence_penalty or sampling.frequency_penalty:
        return "presence and frequency penalties count output tokens only"
    if sampling.bad_words or sampling.bad_words_token_ids:
        return "bad words are matched against the output only"
    if plan.echo_only:
        return "echo with max_tokens 0 has no output to continue"
    return None


class Continued(msgspec.Struct, frozen=True, kw_only=True):
    """What goes on after a failure: `requests` for the choices the engine must still generate,
    and `at_length`, the unfinished choices whose `max_tokens` were all received (they finish
    with "length" without an engine)."""

    requests: tuple[EngineRequest, ...]
    at_length: tuple[int, ...]


def continued(finalized: Finalized, received: Sequence[Sequence[int] | None]) -> Continued:
    """The continuation of `finalized` (finalized for the NEW worker, from the request's plan),
    given `received[i]`: the ids the gateway received for choice i, or None when choice i is
    over (finished, or stopped by the router)."""
    requests: list[EngineRequest] = []
    at_length: list[int] = []
    for request in finalized.requests:
        ids = received[request.choice_index]
        if ids is None:
            continue
        sampling = request.sampling
        count = len(ids)
        max_tokens = None if sampling.max_tokens is None else sampling.max_tokens - count
        if max_tokens is not None and max_tokens <= 0:
            at_length.append(request.choice_index)
            continue
        if count:
            sampling = msgspec.structs.replace(
                sampling,
                max_tokens=max_tokens,
                min_tokens=max(0, sampling.min_tokens - count),
                prompt_logprobs=None,  # they came with the first token
            )
            request = msgspec.structs.replace(
                request, prompt_ids=(*request.prompt_ids, *ids), sampling=sampling
            )
        requests.append(request)
    return Continued(requests=tuple(requests), at_length=tuple(at_length))
