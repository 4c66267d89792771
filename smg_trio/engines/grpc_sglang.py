"""Pure. The reference SGLang gRPC engine's runtime policy: `sglang.grpc.scheduler.SglangScheduler`
as SGLang's scheduler behind smg's servicer serves it with `skip_tokenizer_init` (wire.md §C.3).

- Input: token ids only. Without a tokenizer the engine cannot match stop strings: a request
  carrying any `stop` string is refused with INVALID_ARGUMENT, as SGLang's sampling-parameter
  normalization does. Temperature is taken as sent (unset = 0 = greedy); top_k 1 is greedy too;
  there is no seed field, so sampling is unseeded.
- The engine stops at the model's EOS ids itself (all of them, unless `ignore_eos`), on
  `stop_token_ids` and at `max_new_tokens` (unset: the rest of the context); EOS and stop ids
  are both reported as the matched token id; `min_new_tokens` masks them.
- Streaming: a chunk per step (the step's tokens, cumulative `completion_tokens`); when the
  request ends the complete repeats the last delta. Non-streaming: one complete with every
  token. Abort RPC: always answers success; the stream gets an empty chunk, then a complete
  with finish "abort".
- Unsupported here: n > 1 (INVALID_ARGUMENT), constraints and LoRA loading (UNIMPLEMENTED).
"""

from __future__ import annotations

from typing import Final

from smg_trio.engines.grpc_management import (
    WEIGHT_VERSION,
    aggregate_fields,
    flush_cache,
    iso8601,
    load_fields,
    max_total_tokens,
    model_info_fields,
    scheduler_info_struct,
    server_args_struct,
    timestamp,
)
from smg_trio.engines.grpc_policy import (
    MAX_LOGPROBS,
    AbortEnding,
    Delivery,
    EngineView,
    JobSpec,
    Rejected,
    RuntimePolicy,
    ServedModel,
    checked_prompt,
    columns_logprobs,
    finish_reason,
    invalid,
    matched_fields,
    sampling_key,
    stop_rules,
)
from smg_trio.wire._proto import sglang_scheduler_grpc
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire.grpc_responses import GrpcStatus

SGLANG_VERSION: Final = "0.5.21"
GREEDY_BELOW: Final = 1e-6


def admit(request: sglang.GenerateRequest, model: ServedModel) -> JobSpec:
    if not request.HasField("tokenized"):
        raise invalid("tokenized input must be provided")
    prompt = checked_prompt(request.tokenized.input_ids, model)
    p = request.sampling_params
    if p.stop:
        raise invalid(
            "stop strings need a tokenizer and this server runs with skip_tokenizer_init; "
            "send stop_token_ids instead"
        )
    if p.WhichOneof("constraint") is not None:
        raise Rejected(GrpcStatus.UNIMPLEMENTED, "constrained decoding is not supported here")
    if p.n > 1:
        raise invalid(f"this reference engine serves n=1 only, got n={p.n}")
    rules = stop_rules(
        model,
        len(prompt),
        max_tokens=p.max_new_tokens if p.HasField("max_new_tokens") else None,
        min_tokens=p.min_new_tokens,
        stop_token_ids=p.stop_token_ids,
        ignore_eos=p.ignore_eos,
    )
    return JobSpec(
        request_id=request.request_id,
        prompt_ids=prompt,
        key=sampling_key(greedy=p.temperature < GREEDY_BELOW or p.top_k == 1, seed=None),
        rules=rules,
        stream=request.stream,
        logprobs=min(request.top_logprobs_num, MAX_LOGPROBS) if request.return_logprob else None,
    )


def _logprobs(
    model: ServedModel, spec: JobSpec, ids: tuple[int, ...]
) -> sglang.OutputLogProbs | None:
    if spec.logprobs is None:
        return None
    result: sglang.OutputLogProbs = columns_logprobs(
        sglang.OutputLogProbs, sglang.TopLogProbs, model, ids, spec.logprobs
    )
    return result


def chunk(model: ServedModel, spec: JobSpec, delivery: Delivery) -> sglang.GenerateResponse:
    return sglang.GenerateResponse(
        request_id=spec.request_id,
        chunk=sglang.GenerateStreamChunk(
            token_ids=delivery.new_ids,
            prompt_tokens=len(spec.prompt_ids),
            completion_tokens=delivery.generated,
            output_logprobs=_logprobs(model, spec, delivery.new_ids),
        ),
    )


def complete(model: ServedModel, spec: JobSpec, delivery: Delivery) -> sglang.GenerateResponse:
    assert delivery.ending is not None
    ids = delivery.new_ids if spec.stream else delivery.output_ids
    return sglang.GenerateResponse(
        request_id=spec.request_id,
        complete=sglang.GenerateComplete(
            output_ids=ids,
            finish_reason=finish_reason(delivery.ending),
            prompt_tokens=len(spec.prompt_ids),
            completion_tokens=delivery.generated,
            output_logprobs=_logprobs(model, spec, ids),
            **matched_fields(delivery.ending, eos_reports_id=True),
        ),
    )


def abort_reply(request: sglang.AbortRequest, ended: int) -> sglang.AbortResponse:
    # SGLang's servicer forwards the abort to its scheduler and reports success either way.
    return sglang.AbortResponse(success=True, message=f"Request {request.request_id} aborted")


def health_check(
    request: sglang.HealthCheckRequest, view: EngineView
) -> sglang.HealthCheckResponse:
    if view.serving:
        return sglang.HealthCheckResponse(healthy=True, message="Health check passed")
    return sglang.HealthCheckResponse(healthy=False, message="Server is shutting down")


def model_info(
    request: sglang.GetModelInfoRequest, view: EngineView
) -> sglang.GetModelInfoResponse:
    return sglang.GetModelInfoResponse(
        **model_info_fields(view),
        is_generation=True,
        weight_version=WEIGHT_VERSION,
        eos_token_ids=view.model.engine.eos_ids,
        max_req_input_len=view.model.engine.max_model_len - 1,
    )


def server_info(
    request: sglang.GetServerInfoRequest, view: EngineView
) -> sglang.GetServerInfoResponse:
    return sglang.GetServerInfoResponse(
        server_args=server_args_struct(view, skip_tokenizer_init=True, grpc_mode=True),
        scheduler_info=scheduler_info_struct(view),
        active_requests=view.running + view.waiting,
        last_receive_timestamp=view.now,
        uptime_seconds=view.now - view.started_at,
        sglang_version=SGLANG_VERSION,
        server_type="grpc",
        start_time=timestamp(view.started_at),
        max_total_num_tokens=max_total_tokens(view),
    )


def loads(request: sglang.GetLoadsRequest, view: EngineView) -> sglang.GetLoadsResponse:
    return sglang.GetLoadsResponse(
        timestamp=iso8601(view.now),
        version=SGLANG_VERSION,
        dp_rank_count=1,
        loads=[sglang.SchedulerLoad(**load_fields(view))],
        aggregate=sglang.AggregateMetrics(**aggregate_fields(view)),
    )


POLICY: Final = RuntimePolicy(
    engine_name="sglang-grpc",
    description="a reference SGLang scheduler serving sglang.grpc.scheduler.SglangScheduler",
    service_base=sglang_scheduler_grpc.SglangSchedulerBase,
    admit=admit,
    chunk=chunk,
    complete=complete,
    abort_targets=lambda request: (request.request_id,),
    abort_reply=abort_reply,
    abort_ending=AbortEnding.COMPLETE,
    unary={
        "HealthCheck": health_check,
        "GetModelInfo": model_info,
        "GetServerInfo": server_info,
        "GetLoads": loads,
        "FlushCache": flush_cache,
        "ListLoadedLoRAAdapters": lambda request, view: sglang.ListLoadedLoRAAdaptersResponse(),
    },
)
