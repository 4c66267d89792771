"""Pure. The reference TokenSpeed gRPC engine's runtime policy:
`tokenspeed.grpc.scheduler.TokenSpeedScheduler` as TokenSpeed behind smg's servicer serves it
(docs/wire.md §C.4).

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
- Unsupported here: n > 1 (INVALID_ARGUMENT). A constraint is taken but not applied: the
  scripted model has no grammar (docs/request-fields.md §2).
"""

from __future__ import annotations

import zlib
from functools import partial
from typing import Final

from smg_trio.engines import grpc_management, grpc_policy
from smg_trio.engines.grpc_columns import ColumnsResponses, health_answer
from smg_trio.engines.grpc_policy import (
    EngineView,
    JobSpec,
    RuntimePolicy,
    ServedModel,
)
from smg_trio.engines.grpc_stops import TextStops
from smg_trio.wire._proto import tokenspeed_scheduler_grpc
from smg_trio.wire._proto import tokenspeed_scheduler_pb2 as tokenspeed

TOKENSPEED_VERSION: Final = "0.1.1"
GREEDY_BELOW: Final = 1e-6


def admit(request: tokenspeed.GenerateRequest, model: ServedModel) -> JobSpec:
    if not request.HasField("tokenized"):
        raise grpc_policy.invalid("tokenized input must be provided")
    prompt = grpc_policy.checked_prompt(request.tokenized.input_ids, model)
    p = request.sampling_params
    if p.n > 1:
        raise grpc_policy.invalid(f"this reference engine serves n=1 only, got n={p.n}")
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
        key=grpc_policy.sampling_key(greedy=greedy, seed=seed),
        rules=grpc_policy.stop_rules(
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
        logprobs=grpc_policy.sglang_family_logprobs(request),
        token_rules=grpc_policy.sglang_family_rules(model, p),
    )


RESPONSES: Final = ColumnsResponses(
    response=tokenspeed.GenerateResponse,
    stream_chunk=tokenspeed.GenerateStreamChunk,
    complete_message=tokenspeed.GenerateComplete,
    output_logprobs=tokenspeed.OutputLogProbs,
    top_logprobs=tokenspeed.TopLogProbs,
    matched=partial(grpc_policy.matched_fields, eos_reports_id=True),
    tags_request_id=True,
    counts_carried_tokens=False,  # cumulative, the trimmed stop counted
)


def abort_reply(request: tokenspeed.AbortRequest, ended: int) -> tokenspeed.AbortResponse:
    rid = request.request_id
    if ended:
        return tokenspeed.AbortResponse(
            success=True, message=f"Aborted {ended} request(s) for {rid}"
        )
    return tokenspeed.AbortResponse(success=False, message=f"Request {rid} not found")


def model_info(
    request: tokenspeed.GetModelInfoRequest, view: EngineView
) -> tokenspeed.GetModelInfoResponse:
    return tokenspeed.GetModelInfoResponse(
        **grpc_management.model_info_fields(view),
        weight_version=grpc_management.WEIGHT_VERSION,
        eos_token_ids=view.model.engine.eos_ids,
        max_req_input_len=view.model.engine.max_model_len - 1,
        model_dtype=view.model.engine.dtype,
    )


def server_info(
    request: tokenspeed.GetServerInfoRequest, view: EngineView
) -> tokenspeed.GetServerInfoResponse:
    return tokenspeed.GetServerInfoResponse(
        server_args=grpc_management.server_args_struct(view),
        scheduler_info=grpc_management.scheduler_info_struct(view),
        active_requests=view.running + view.waiting,
        uptime_seconds=view.now - view.started_at,
        max_total_num_tokens=grpc_management.max_total_tokens(view),
        tokenspeed_version=TOKENSPEED_VERSION,
        start_time=grpc_management.timestamp(view.started_at),
    )


POLICY: Final = RuntimePolicy(
    engine_name="tokenspeed-grpc",
    description=(
        "a reference TokenSpeed scheduler serving tokenspeed.grpc.scheduler.TokenSpeedScheduler"
    ),
    service_base=tokenspeed_scheduler_grpc.TokenSpeedSchedulerBase,
    admit=admit,
    chunk=RESPONSES.chunk,
    complete=RESPONSES.complete,
    abort_targets=lambda request: (request.request_id,),
    abort_reply=abort_reply,
    abort_ending=grpc_policy.AbortEnding.STATUS,
    unary={
        "HealthCheck": health_answer(
            tokenspeed.HealthCheckResponse,
            healthy="Health check passed",
            unhealthy="Server is shutting down",
        ),
        "GetModelInfo": model_info,
        "GetServerInfo": server_info,
        "GetLoads": grpc_management.loads_answer(
            tokenspeed.GetLoadsResponse,
            tokenspeed.SchedulerLoad,
            version=TOKENSPEED_VERSION,
            aggregate=tokenspeed.AggregateMetrics,
        ),
        "FlushCache": grpc_management.flush_cache,
    },
)
