"""Pure. The Embed RPC of the vLLM and SGLang gRPC services: one pooled vector per call
(docs/wire.md §C.8).

Embed is unary: one `EmbedRequest` carries one input's token ids, one `EmbedResponse` carries
its vector, the prompt's token count and the vector's length; errors are gRPC statuses, as for
Generate. What differs per engine is spelling only:

- vLLM: `request_id` 1, `tokenized` 2; the answer is `embedding` 1, `prompt_tokens` 2,
  `embedding_dim` 3. The servicer pools with the model's own defaults (task "embed"): no
  dimensions, no truncation, no activation switch travel on this wire.
- SGLang: `request_id` 1, `tokenized` 2, and a placeholder `sampling_params` 5 the scheduler
  ignores for embeddings (left empty); the answer is `embedding_dim` 4, `embedding` 5,
  `prompt_tokens` 6 (1-3 reserved).

The builders take token ids only (like Generate, docs/wire.md §C: we never send text); the
parser checks that the vector is as long as the engine says and not empty.
`embed_options_refusal` says, before anything is built, what of a pooling request this wire
cannot carry (a 400 naming it), as vllm_pooling.py does for the ZMQ wire.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias, assert_never

import msgspec

from smg_trio.errors import BackendProtocolError, ClientError, UnsupportedRuntime
from smg_trio.neutral.pooling import PoolingRequest, PoolingTask
from smg_trio.neutral.runtime import Runtime
from smg_trio.neutral.validation import checked_ids
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import vllm_engine_pb2 as vllm

EmbedRequest: TypeAlias = vllm.EmbedRequest | sglang.EmbedRequest
EmbedResponse: TypeAlias = vllm.EmbedResponse | sglang.EmbedResponse

EMBED_RUNTIMES = frozenset({Runtime.VLLM, Runtime.SGLANG})
"""The runtimes whose gRPC service has an Embed RPC we speak."""


class GrpcEmbedding(msgspec.Struct, frozen=True, kw_only=True):
    """One Embed answer: the pooled vector (float32 values, as the engine sent them) and the
    prompt's token count as the engine counted it."""

    values: tuple[float, ...]
    prompt_tokens: int


def build_embed(
    runtime: Runtime, engine_request_id: str, prompt_ids: Sequence[int], *, prompt_text: str = ""
) -> EmbedRequest:
    """The `EmbedRequest` of `runtime`'s service for one input's token ids.

    `prompt_text` is the input's text for the engine's logs; it may stay empty. Raises
    `ClientError` for a token id a uint32 cannot hold, `UnsupportedRuntime` for an engine
    whose service has no Embed we speak.
    """
    ids = checked_ids(prompt_ids, "input", None)
    match runtime:
        case Runtime.VLLM:
            return vllm.EmbedRequest(
                request_id=engine_request_id,
                tokenized=vllm.TokenizedInput(original_text=prompt_text, input_ids=ids),
            )
        case Runtime.SGLANG:
            return sglang.EmbedRequest(
                request_id=engine_request_id,
                tokenized=sglang.TokenizedInput(original_text=prompt_text, input_ids=ids),
            )
        case _:
            raise UnsupportedRuntime(f"the {runtime.value} gRPC service has no Embed we speak")


def embed_options_refusal(runtime: Runtime, request: PoolingRequest) -> None:
    """A `ClientError` naming what one Embed call cannot carry (docs/wire.md §C.8): another
    engine than vLLM or SGLang, another task than embed, `dimensions`, `use_activation`
    false. The call pools with the model's defaults: activation (normalisation) on."""
    if runtime not in EMBED_RUNTIMES:
        raise ClientError(
            f"the {runtime.value} engine's gRPC service has no Embed: it serves no pooling "
            "requests",
            param="model",
        )
    if request.task is not PoolingTask.EMBED:
        raise ClientError(
            f"task {request.task.value!r} cannot be served over gRPC: the {runtime.value} "
            "Embed RPC pools with task 'embed' only",
            param="task",
        )
    if request.dimensions is not None:
        raise ClientError(
            "dimensions cannot be served over gRPC: the Embed RPC has no field for it "
            "(the engine answers the model's full size)",
            param="dimensions",
        )
    if request.use_activation is False:
        raise ClientError(
            "use_activation=false cannot be served over gRPC: the Embed RPC pools with the "
            "model's defaults (normalised)",
            param="use_activation",
        )


def parse_embed_response(response: EmbedResponse) -> GrpcEmbedding:
    """The vector of one Embed answer; an empty vector, or one whose length is not the
    `embedding_dim` the engine states, is a 502."""
    match response:
        case vllm.EmbedResponse() | sglang.EmbedResponse():
            values = tuple(response.embedding)
            dim = response.embedding_dim
        case _:
            assert_never(response)
    if not values:
        raise BackendProtocolError("the engine's Embed answer carries no vector")
    if dim != len(values):
        raise BackendProtocolError(
            f"the engine's Embed answer says embedding_dim {dim} but carries {len(values)} values"
        )
    return GrpcEmbedding(values=values, prompt_tokens=response.prompt_tokens)
