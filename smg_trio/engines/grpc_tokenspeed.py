"""Pure. The reference TokenSpeed gRPC engine's runtime policy:
`tokenspeed.grpc.scheduler.TokenSpeedScheduler` as TokenSpeed behind smg's servicer serves it
(wire.md §C.4).

- Input: token ids only. Scalars are `optional`: unset temperature is 1.0; temperature below
  1e-6 or top_k 1 is greedy; `sampling_seed` keys sampling, unseeded requests use crc32 of
  their id (as TokenSpeed derives it), so they repeat.
- The engine stops at the model's EOS ids itself (all of them, unless `ignore_eos`), on
  `stop_token_ids`, at `max_new_tokens` (unset: the rest of the context) and on stop strings,
  which it matches on its own detokenized output, checked only when no other stop fired
  (SGLang's order). EOS and stop ids are reported as the matched id and, unless
  `no_stop_trim`, left out of the output (chunk and complete); string stops trim nothing.
- Streaming: a chunk per step (cumulative `completion_tokens`, the trimmed stop counted); the
  complete repeats the last delta. Non-streaming: one complete with every token. Abort RPC:
  answers whether the id was known; the stream ends with status INTERNAL, as TokenSpeed's
  servicer turns an abort finish into an error.
- Unsupported here: n > 1 (INVALID_ARGUMENT), constraints (UNIMPLEMENTED).
"""

from __future__ import annotations

import zlib
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
from smg_trio.engines.grpc_stops import TextStops
from smg_trio.wire._proto import tokenspeed_scheduler_grpc
from smg_trio.wire._proto import tokenspeed_scheduler_pb2 as tokenspeed
from smg_trio.wire.grpc_responses import GrpcStatus

TOKENSPEED_VERSION: Final = "0.1.1"
GREEDY_BELOW: Final = 1e-6


def admit(request: tokenspeed.GenerateRequest, model: ServedModel) -> JobSpec:
    if not request.HasField("tokenized"):
        raise invalid("tokenized input must be provided")
    prompt = checked_prompt(request.tokenized.input_ids, model)
    p = request.sampling_params
    if p.WhichOneof("constraint") is not None:
        raise Rejected(GrpcStatus.UNIMPLEMENTED, "constrained decoding is not supported here")
    if p.n > 1:
        raise invalid(f"this reference engine serves n=1 only, got n={p.n}")
    greedy = (p.HasField("temperature") and p.temperature < GREEDY_BELOW) or (
        p.HasField("top_k") and p.top_k == 1
    )
    seed = (
        p.sampling_seed if p.HasField("sampling_seed") else zlib.crc32(request.request_id.encode())
    )
    stops = None
    if p.stop:
        stops = TextStops(
            model.tokenizer,
            p.stop,
            min_tokens=p.min_new_tokens,
            skip_special_tokens=p.skip_special_tokens,
            include_stop_token_text=True,
            after_other_stops=True,
        )
    return JobSpec(
        request_id=request.request_id,
        prompt_ids=prompt,
        key=sampling_key(greedy=greedy, seed=seed),
        rules=stop_rules(
            model,
            len(prompt),
            max_tokens=p.max_new_tokens if p.HasField("max_new_tokens") else None,
            min_tokens=p.min_new_tokens,
            stop_token_ids=p.stop_token_ids,
            ignore_eos=p.ignore_eos,
        ),
        stream=request.stream,
        stops=stops,
        trim_matched_stop=not p.no_stop_trim,
        logprobs=min(request.top_logprobs_num, MAX_LOGPROBS) if request.return_logprob else None,
    )


def _logprobs(
    model: ServedModel, spec: JobSpec, ids: tuple[int, ...]
) -> tokenspeed.OutputLogProbs | None:
    if spec.logprobs is None:
        return None
    result: tokenspeed.OutputLogProbs = columns_logprobs(
        tokenspeed.OutputLogProbs, tokenspeed.TopLogProbs, model, ids, spec.logprobs
    )
    return result


def chunk(model: ServedModel, spec: JobSpec, delivery: Delivery) -> tokenspeed.GenerateResponse:
    return tokenspeed.GenerateResponse(
        request_id=spec.request_id,
        chunk=tokenspeed.GenerateStreamChunk(
            token_ids=delivery.new_ids,
            prompt_tokens=len(spec.prompt_ids),
            completion_tokens=delivery.generated,
            output_logprobs=_logprobs(model, spec, delivery.new_ids),
        ),
    )


def complete(model: ServedModel, spec: JobSpec, delivery: Delivery) -> tokenspeed.GenerateResponse:
    assert delivery.ending is not None
    ids = delivery.new_ids if spec.stream else delivery.output_ids
    return tokenspeed.GenerateResponse(
        request_id=spec.request_id,
        complete=tokenspeed.GenerateComplete(
            output_ids=ids,
            finish_reason=finish_reason(delivery.ending),
            prompt_tokens=len(spec.prompt_ids),
            completion_tokens=delivery.generated,
            output_logprobs=_logprobs(model, spec, ids),
            **matched_fields(delivery.ending, eos_reports_id=True),
        ),
    )


def abort_reply(request: tokenspeed.AbortRequest, ended: int) -> tokenspeed.AbortResponse:
    rid = request.request_id
    if ended:
        return tokenspeed.AbortResponse(
            success=True, message=f"Aborted {ended} request(s) for {rid}"
        )
    return tokenspeed.AbortResponse(success=False, message=f"Request {rid} not found")


def health_check(
    request: tokenspeed.HealthCheckRequest, view: EngineView
) -> tokenspeed.HealthCheckResponse:
    if view.serving:
        return tokenspeed.HealthCheckResponse(healthy=True, message="Health check passed")
    return tokenspeed.HealthCheckResponse(healthy=False, message="Server is shutting down")


def model_info(
    request: tokenspeed.GetModelInfoRequest, view: EngineView
) -> tokenspeed.GetModelInfoResponse:
    return tokenspeed.GetModelInfoResponse(
        **model_info_fields(view),
        weight_version=WEIGHT_VERSION,
        eos_token_ids=view.model.engine.eos_ids,
        max_req_input_len=view.model.engine.max_model_len - 1,
        model_dtype=view.model.engine.dtype,
    )


def server_info(
    request: tokenspeed.GetServerInfoRequest, view: EngineView
) -> tokenspeed.GetServerInfoResponse:
    return tokenspeed.GetServerInfoResponse(
        server_args=server_args_struct(view),
        scheduler_info=scheduler_info_struct(view),
        active_requests=view.running + view.waiting,
        uptime_seconds=view.now - view.started_at,
        max_total_num_tokens=max_total_tokens(view),
        tokenspeed_version=TOKENSPEED_VERSION,
        start_time=timestamp(view.started_at),
    )


def loads(request: tokenspeed.GetLoadsRequest, view: EngineView) -> tokenspeed.GetLoadsResponse:
    return tokenspeed.GetLoadsResponse(
        timestamp=iso8601(view.now),
        version=TOKENSPEED_VERSION,
        dp_rank_count=1,
        loads=[tokenspeed.SchedulerLoad(**load_fields(view))],
        aggregate=tokenspeed.AggregateMetrics(**aggregate_fields(view)),
    )


POLICY: Final = RuntimePolicy(
    engine_name="tokenspeed-grpc",
    description=(
        "a reference TokenSpeed scheduler serving tokenspeed.grpc.scheduler.TokenSpeedScheduler"
    ),
    service_base=tokenspeed_scheduler_grpc.TokenSpeedSchedulerBase,
    admit=admit,
    chunk=chunk,
    complete=complete,
    abort_targets=lambda request: (request.request_id,),
    abort_reply=abort_reply,
    abort_ending=AbortEnding.STATUS,
    unary={
        "HealthCheck": health_check,
        "GetModelInfo": model_info,
        "GetServerInfo": server_info,
        "GetLoads": loads,
        "FlushCache": flush_cache,
    },
)
