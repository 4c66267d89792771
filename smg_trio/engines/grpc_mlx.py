"""Pure. The reference MLX gRPC engine's runtime policy: `mlx.grpc.engine.MlxEngine` as smg's MLX
servicer serves it over mlx-lm (docs/wire.md §C.5).

- Input: token ids only (text input is INVALID_ARGUMENT). The request has no string-stop
  field, no min_tokens and no n. Unset temperature is 1.0; temperature 0 or top_k 1 is greedy;
  `seed` keys sampling (unseeded: a fresh seed per request).
- The engine stops at the model's EOS ids (all of them, unless `ignore_eos`), on
  `stop_token_ids` and at `max_tokens` (unset: the rest of the context); the stop token stays
  in the output and is reported in `matched_stop_token_id`.
- Streaming: a chunk per token (cumulative `completion_tokens`); when the request ends the
  complete carries NO output ids, only the finish reason, counts and matched id.
  Non-streaming: one complete with every token. Abort RPC: the stream just ends, with no
  complete message.
"""

from __future__ import annotations

from typing import Any, Final

from smg_trio.engines import grpc_policy
from smg_trio.engines.generation import EosStop, TokenStop
from smg_trio.engines.grpc_columns import ColumnsResponses, health_answer
from smg_trio.engines.grpc_policy import Ending, EngineView, JobSpec, RuntimePolicy, ServedModel
from smg_trio.engines.token_rules import TokenRules
from smg_trio.wire._proto import mlx_engine_grpc
from smg_trio.wire._proto import mlx_engine_pb2 as mlx


def admit(request: mlx.GenerateRequest, model: ServedModel) -> JobSpec:
    if request.WhichOneof("input") != "tokenized":
        raise grpc_policy.invalid("MLX servicer requires tokenized input")
    prompt = grpc_policy.checked_prompt(request.tokenized.input_ids, model)
    p = request.sampling_params
    temperature = p.temperature if p.HasField("temperature") else 1.0
    width = p.logprobs if p.HasField("logprobs") and p.logprobs > 0 else None
    return JobSpec(
        request_id=request.request_id,
        prompt_ids=prompt,
        key=grpc_policy.sampling_key(
            greedy=temperature == 0.0 or p.top_k == 1,
            seed=p.seed if p.HasField("seed") else None,
        ),
        rules=grpc_policy.stop_rules(
            model,
            len(prompt),
            max_tokens=p.max_tokens if p.HasField("max_tokens") else None,
            stop_token_ids=p.stop_token_ids,
            ignore_eos=p.ignore_eos,
        ),
        stream=request.stream,
        logprobs=None if width is None else min(width, grpc_policy.MAX_LOGPROBS),
        token_rules=TokenRules.of(logit_bias=p.logit_bias),
    )


def _matched(ending: Ending) -> dict[str, Any]:
    """Only a stop token is reported (MLX has no stop strings)."""
    if isinstance(ending, EosStop | TokenStop):
        return {"matched_stop_token_id": ending.token_id}
    return {}


RESPONSES: Final = ColumnsResponses(
    response=mlx.GenerateResponse,
    stream_chunk=mlx.GenerateStreamChunk,
    complete_message=mlx.GenerateComplete,
    output_logprobs=mlx.OutputLogProbs,
    top_logprobs=mlx.TopLogProbs,
    matched=_matched,
    tags_request_id=False,
    counts_carried_tokens=False,
    streamed_complete_repeats_delta=False,  # the complete carries no ids when streaming
    logprobs_without_tokens=False,
)


def model_info(request: mlx.GetModelInfoRequest, view: EngineView) -> mlx.GetModelInfoResponse:
    model = view.model
    return mlx.GetModelInfoResponse(
        model_path=str(model.path),
        is_generation=True,
        max_context_length=model.engine.max_model_len,
        vocab_size=model.config_int("vocab_size", model.engine.vocab_size),
        served_model_name=str(model.path),  # MLX's servicer names the model by its path
        model_type=str(model.config.get("model_type") or ""),
        architectures=model.architectures,
        eos_token_ids=model.engine.eos_ids,
        pad_token_id=model.config_int("pad_token_id"),
        bos_token_id=model.config_int("bos_token_id"),
        max_req_input_len=model.engine.max_model_len,
    )


def server_info(request: mlx.GetServerInfoRequest, view: EngineView) -> mlx.GetServerInfoResponse:
    return mlx.GetServerInfoResponse(
        server_type="mlx-grpc",
        active_requests=view.running + view.waiting,
        uptime_seconds=view.now - view.started_at,
    )


POLICY: Final = RuntimePolicy(
    engine_name="mlx-grpc",
    description="a reference MLX engine serving mlx.grpc.engine.MlxEngine",
    service_base=mlx_engine_grpc.MlxEngineBase,
    admit=admit,
    chunk=RESPONSES.chunk,
    complete=RESPONSES.complete,
    abort_targets=lambda request: tuple(request.request_ids),
    abort_reply=lambda request, ended: mlx.AbortResponse(),
    abort_ending=grpc_policy.AbortEnding.SILENT,
    unary={
        "HealthCheck": health_answer(
            mlx.HealthCheckResponse, healthy="OK", unhealthy="servicer shutting down"
        ),
        "GetModelInfo": model_info,
        "GetServerInfo": server_info,
    },
)
