"""Pure. The Embed RPC of the reference vLLM and SGLang gRPC engines (docs/wire.md §C.8): what
they admit and what they answer, each in its engine's spelling. The vector itself is
`engines.pooling.pooled_values` (task embed, the model's defaults), the same on every wire
(docs/pooling.md §5).

- A pooling model (`--runner pooling`) answers Embed and refuses Generate; a generative model
  the other way round; both with INVALID_ARGUMENT and the engine's words.
- vLLM's servicer needs `tokenized` input; its engine refuses an empty prompt, one longer than
  the context (a pooled prompt may fill all of it: nothing is generated after it) and ids
  outside the vocabulary. SGLang's servicer needs `tokenized` too and its scheduler makes the
  same checks in its own words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import Message

from smg_trio.engines.grpc_policy import (
    EmbedPolicy,
    PoolSpec,
    ServedModel,
    invalid,
)
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import vllm_engine_pb2 as vllm

VLLM_NOT_POOLING: Final = "This model does not support pooling"
VLLM_NOT_GENERATING: Final = "This model does not support generation"
SGLANG_NOT_POOLING: Final = (
    "This model does not appear to be an embedding model by default. "
    "Please add `--is-embedding` when launching the server or try another model."
)
SGLANG_NOT_GENERATING: Final = "This model is an embedding model and does not generate"


def refuse_generation(model: ServedModel, message: str) -> None:
    """A pooling model's refusal of a Generate request (docs/pooling.md)."""
    if model.pooling:
        raise invalid(message)


@dataclass(frozen=True)
class EmbedRefusals:
    """One engine's words for the Embed requests it refuses (`{...}` are filled in)."""

    no_input: str
    not_pooling: str
    empty: str
    too_long: str  # {length} {limit}
    outside: str  # {token_id} {vocab}


def admit(words: EmbedRefusals) -> Callable[[Any, ServedModel], PoolSpec]:
    """An engine's Embed admission: tokenized input, a pooling model, a prompt it can pool."""

    def admitted(request: Any, model: ServedModel) -> PoolSpec:
        if not request.HasField("tokenized"):
            raise invalid(words.no_input)
        if not model.pooling:
            raise invalid(words.not_pooling)
        prompt = tuple(request.tokenized.input_ids)
        if not prompt:
            raise invalid(words.empty)
        length, limit = len(prompt), model.engine.max_model_len
        if length > limit:
            raise invalid(words.too_long.format(length=length, limit=limit))
        vocab = model.engine.vocab_size
        for token_id in prompt:
            if not 0 <= token_id < vocab:
                raise invalid(words.outside.format(token_id=token_id, vocab=vocab))
        return PoolSpec(request_id=request.request_id, prompt_ids=prompt)

    return admitted


VLLM_REFUSALS: Final = EmbedRefusals(
    no_input="EmbedRequest requires tokenized input",
    not_pooling=VLLM_NOT_POOLING,
    empty="The decoder prompt cannot be empty",
    too_long=(
        "The decoder prompt (length {length}) is longer than the maximum model length of "
        "{limit}. Make sure that `max_model_len` is no smaller than the number of text tokens."
    ),
    outside="Token id {token_id} is out of vocabulary",
)
SGLANG_REFUSALS: Final = EmbedRefusals(
    no_input="Tokenized input must be provided",
    not_pooling=SGLANG_NOT_POOLING,
    empty="The input cannot be empty",
    too_long="The input ({length} tokens) is longer than the model's context length ({limit} tokens).",
    outside="Input token id {token_id} is outside the vocabulary [0, {vocab})",
)


def reply(
    response: type[vllm.EmbedResponse] | type[sglang.EmbedResponse],
) -> Callable[[PoolSpec, tuple[float, ...]], Message]:
    """The engine's EmbedResponse of one pooled vector (its fields are named alike)."""

    def answer(spec: PoolSpec, vector: tuple[float, ...]) -> Message:
        return response(
            embedding=vector, prompt_tokens=len(spec.prompt_ids), embedding_dim=len(vector)
        )

    return answer


VLLM_EMBED: Final = EmbedPolicy(admit=admit(VLLM_REFUSALS), reply=reply(vllm.EmbedResponse))
SGLANG_EMBED: Final = EmbedPolicy(admit=admit(SGLANG_REFUSALS), reply=reply(sglang.EmbedResponse))
