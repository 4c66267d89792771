"""Pure. The reference SGLang gRPC engine's runtime policy: `sglang.grpc.scheduler.SglangScheduler`
as SGLang's scheduler behind smg's servicer serves it with `skip_tokenizer_init` (docs/wire.md §C.3).

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
- A pooling model (`--runner pooling`, SGLang's `--is-embedding`) answers Embed and refuses
  Generate (`grpc_pooling`); GetModelInfo then says `is_generation` false.
- Images: `mm_inputs` checked as the servicer reads them, stricter where it would drop them
  (`grpc_sglang_media`); the scripted model then answers the prompt ids.
- Unsupported here: n > 1 (INVALID_ARGUMENT) and LoRA loading (UNIMPLEMENTED). A constraint is
  taken but not applied: the scripted model has no grammar (docs/request-fields.md §2).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Final

from smg_trio.engines import grpc_management, grpc_policy, grpc_pooling
from smg_trio.engines.grpc_columns import ColumnsResponses, health_answer
from smg_trio.engines.grpc_policy import (
    EngineView,
    JobSpec,
    RuntimePolicy,
    ServedModel,
)
from smg_trio.engines.grpc_sglang_media import mm_inputs_problem
from smg_trio.wire._proto import sglang_scheduler_grpc
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang

SGLANG_VERSION: Final = "0.5.21"
GREEDY_BELOW: Final = 1e-6

logger = logging.getLogger(__name__)


def admit(request: sglang.GenerateRequest, model: ServedModel) -> JobSpec:
    grpc_pooling.refuse_generation(model, grpc_pooling.SGLANG_NOT_GENERATING)
    if not request.HasField("tokenized"):
        raise grpc_policy.invalid("tokenized input must be provided")
    prompt = grpc_policy.checked_prompt(request.tokenized.input_ids, model)
    media_problem = mm_inputs_problem(request, prompt)
    if media_problem is not None:
        raise grpc_policy.invalid(media_problem)
    if request.HasField("mm_inputs"):
        images = len(request.mm_inputs.mm_placeholders)
        logger.info("generate %r: %d image(s) in mm_inputs", request.request_id, images)
    p = request.sampling_params
    if p.stop:
        raise grpc_policy.invalid(
            "stop strings need a tokenizer and this server runs with skip_tokenizer_init; "
            "send stop_token_ids instead"
        )
    if p.n > 1:
        raise grpc_policy.invalid(f"this reference engine serves n=1 only, got n={p.n}")
    rules = grpc_policy.stop_rules(
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
        key=grpc_policy.sampling_key(
            greedy=p.temperature < GREEDY_BELOW or p.top_k == 1, seed=None
        ),
        rules=rules,
        stream=request.stream,
        logprobs=grpc_policy.sglang_family_logprobs(request),
        token_rules=grpc_policy.sglang_family_rules(model, p),
    )


RESPONSES: Final = ColumnsResponses(
    response=sglang.GenerateResponse,
    stream_chunk=sglang.GenerateStreamChunk,
    complete_message=sglang.GenerateComplete,
    output_logprobs=sglang.OutputLogProbs,
    top_logprobs=sglang.TopLogProbs,
    matched=partial(grpc_policy.matched_fields, eos_reports_id=True),
    tags_request_id=True,
    counts_carried_tokens=False,
)


def abort_reply(request: sglang.AbortRequest, ended: int) -> sglang.AbortResponse:
    # SGLang's servicer forwards the abort to its scheduler and reports success either way.
    return sglang.AbortResponse(success=True, message=f"Request {request.request_id} aborted")


def model_info(
    request: sglang.GetModelInfoRequest, view: EngineView
) -> sglang.GetModelInfoResponse:
    return sglang.GetModelInfoResponse(
        **grpc_management.model_info_fields(view),
        is_generation=not view.model.pooling,
        weight_version=grpc_management.WEIGHT_VERSION,
        eos_token_ids=view.model.engine.eos_ids,
        max_req_input_len=view.model.engine.max_model_len - 1,
    )


def server_info(
    request: sglang.GetServerInfoRequest, view: EngineView
) -> sglang.GetServerInfoResponse:
    return sglang.GetServerInfoResponse(
        server_args=grpc_management.server_args_struct(
            view, skip_tokenizer_init=True, grpc_mode=True
        ),
        scheduler_info=grpc_management.scheduler_info_struct(view),
        active_requests=view.running + view.waiting,
        last_receive_timestamp=view.now,
        uptime_seconds=view.now - view.started_at,
        sglang_version=SGLANG_VERSION,
        server_type="grpc",
        start_time=grpc_management.timestamp(view.started_at),
        max_total_num_tokens=grpc_management.max_total_tokens(view),
    )


POLICY: Final = RuntimePolicy(
    engine_name="sglang-grpc",
    description="a reference SGLang scheduler serving sglang.grpc.scheduler.SglangScheduler",
    service_base=sglang_scheduler_grpc.SglangSchedulerBase,
    admit=admit,
    chunk=RESPONSES.chunk,
    complete=RESPONSES.complete,
    abort_targets=lambda request: (request.request_id,),
    abort_reply=abort_reply,
    abort_ending=grpc_policy.AbortEnding.COMPLETE,
    embed=grpc_pooling.SGLANG_EMBED,
    unary={
        "HealthCheck": health_answer(
            sglang.HealthCheckResponse,
            healthy="Health check passed",
            unhealthy="Server is shutting down",
        ),
        "GetModelInfo": model_info,
        "GetServerInfo": server_info,
        "GetLoads": grpc_management.loads_answer(
            sglang.GetLoadsResponse,
            sglang.SchedulerLoad,
            version=SGLANG_VERSION,
            aggregate=sglang.AggregateMetrics,
        ),
        "FlushCache": grpc_management.flush_cache,
        "ListLoadedLoRAAdapters": lambda request, view: sglang.ListLoadedLoRAAdaptersResponse(),
    },
)
