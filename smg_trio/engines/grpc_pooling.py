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

from collections.abc import Sequence
from typing import Final

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


def _pooled_prompt(
    prompt_ids: Sequence[int], model: ServedModel, *, empty: str, too_long: str, outside: str
) -> tuple[int, ...]:
    if not prompt_ids:
        raise invalid(empty)
    length, limit = len(prompt_ids), model.engine.max_model_len
    if length > limit:
        raise invalid(too_long.format(length=length, limit=limit))
    vocab = model.engine.vocab_size
    for token_id in prompt_ids:
        if not 0 <= token_id < vocab:
            raise invalid(outside.format(token_id=token_id, vocab=vocab))
    return tuple(prompt_ids)


def vllm_admit(request: vllm.EmbedRequest, model: ServedModel) -> PoolSpec:
    if not request.HasField("tokenized"):
        raise invalid("EmbedRequest requires tokenized input")
    if not model.pooling:
        raise invalid(VLLM_NOT_POOLING)
    prompt = _pooled_prompt(
        request.tokenized.input_ids,
        model,
        empty="The decoder prompt cannot be empty",
        too_long=(
            "The decoder prompt (length {length}) is longer than the maximum model length "
            "of {limit}. Make sure that `max_model_len` is no smaller than the number of "
            "text tokens."
        ),
        outside="Token id {token_id} is out of vocabulary",
    )
    return PoolSpec(request_id=request.request_id, prompt_ids=prompt)


def vllm_reply(spec: PoolSpec, vector: tuple[float, ...]) -> vllm.EmbedResponse:
    return vllm.EmbedResponse(
        embedding=vector, prompt_tokens=len(spec.prompt_ids), embedding_dim=len(vector)
    )


def sglang_admit(request: sglang.EmbedRequest, model: ServedModel) -> PoolSpec:
    if not request.HasField("tokenized"):
        raise invalid("Tokenized input must be provided")
    if not model.pooling:
        raise invalid(SGLANG_NOT_POOLING)
    prompt = _pooled_prompt(
        request.tokenized.input_ids,
        model,
        empty="The input cannot be empty",
        too_long=(
            "The input ({length} tokens) is longer than the model's context length "
            "({limit} tokens)."
        ),
        outside="Input token id {token_id} is outside the vocabulary [0, {vocab})",
    )
    return PoolSpec(request_id=request.request_id, prompt_ids=prompt)


def sglang_reply(spec: PoolSpec, vector: tuple[float, ...]) -> sglang.EmbedResponse:
    return sglang.EmbedResponse(
        embedding=vector, prompt_tokens=len(spec.prompt_ids), embedding_dim=len(vector)
    )


VLLM_EMBED: Final = EmbedPolicy(admit=vllm_admit, reply=vllm_reply)
SGLANG_EMBED: Final = EmbedPolicy(admit=sglang_admit, reply=sglang_reply)
