"""Pure. The reference vLLM gRPC engine's runtime policy: `vllm.grpc.engine.VllmEngine` as vLLM's
frontend behind smg's servicer serves it (docs/wire.md §C.2).

- Input: token ids, or text the engine tokenizes itself. Unset temperature is 1.0; temperature
  below 1e-5 or top_k 1 is greedy; `seed` keys sampling (unseeded: a fresh seed per request).
- EOS is added by the engine: the model's first EOS id stops with no stop reason, the others
  (generation_config's) ride `stop_token_ids` and are reported as the matched id;
  `ignore_eos` drops both. `min_tokens` masks them.
- Stop strings are matched by the engine on its own detokenized output (`TextStops`), with
  `skip_special_tokens` and `include_stop_str_in_output` as asked; a match reports
  finish "stop" and the string. Output ids are never trimmed (the text would be).
- Streaming: one chunk per step with the step's tokens and `completion_tokens` = that delta's
  length; when the request ends a complete follows that repeats the last delta only.
  Non-streaming: one complete with every token. Abort RPC: an empty chunk, then a complete
  with finish "abort".
- A pooling model (`--runner pooling`) answers Embed and refuses Generate (`grpc_pooling`);
  GetModelInfo then says `is_generation` false.
- Images: `mm_inputs` checked as the servicer reads them (`grpc_vllm_media`), the scripted model
  then answers the prompt ids; `media_refs` taken with `--mm-processor inprocess` (advertised
  in GetServerInfo) and expanded as the servicer's processor does (`grpc_vllm_media_refs`),
  refused without it, as a default worker refuses them.
- Unsupported here (INVALID_ARGUMENT): n > 1. A structured-output constraint is taken but not
  applied: the scripted model has no grammar (docs/request-fields.md §2).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Final

from smg_trio.engines import grpc_management, grpc_policy, grpc_pooling
from smg_trio.engines.grpc_columns import ColumnsResponses, health_answer
from smg_trio.engines.grpc_policy import EngineView, JobSpec, RuntimePolicy, ServedModel
from smg_trio.engines.grpc_stops import TextStops
from smg_trio.engines.grpc_vllm_media import mm_inputs_problem
from smg_trio.engines.grpc_vllm_media_refs import PROCESSOR, SCHEMES, expanded_by_refs
from smg_trio.engines.token_rules import TokenRules
from smg_trio.engines.wire_adapter import BLOCK_SIZE
from smg_trio.wire._proto import vllm_engine_grpc
from smg_trio.wire._proto import vllm_engine_pb2 as vllm

VLLM_VERSION: Final = "0.33.0"
GREEDY_BELOW: Final = 1e-5  # vLLM's _SAMPLING_EPS

logger = logging.getLogger(__name__)


def admit(request: vllm.GenerateRequest, model: ServedModel) -> JobSpec:
    grpc_pooling.refuse_generation(model, grpc_pooling.VLLM_NOT_GENERATING)
    match request.WhichOneof("input"):
        case "tokenized":
            prompt = grpc_policy.checked_prompt(request.tokenized.input_ids, model)
        case "text":
            prompt = grpc_policy.checked_prompt(
                model.tokenizer.encode(request.text, add_special_tokens=True), model
            )
        case _:
            raise grpc_policy.invalid("the request carries neither tokenized input nor text")
    if request.HasField("media_refs"):
        folded = len(prompt)
        prompt = expanded_by_refs(request, prompt, model)
        logger.info(
            "generate %r: %d image(s) in media_refs (%s), prompt %d -> %d tokens",
            request.request_id,
            len(request.media_refs.items),
            ",".join(sorted({ref.url.partition(":")[0] for ref in request.media_refs.items})),
            folded,
            len(prompt),
        )
    media_problem = mm_inputs_problem(request, prompt)
    if media_problem is not None:
        raise grpc_policy.invalid(media_problem)
    if request.HasField("mm_inputs"):  # as the servicer logs what it took
        images = len(request.mm_inputs.mm_placeholders)
        logger.info("generate %r: %d image(s) in mm_inputs", request.request_id, images)
    p = request.sampling_params
    if p.n > 1:
        raise grpc_policy.invalid(f"this reference engine serves n=1 only, got n={p.n}")
    if any(not stop for stop in p.stop):
        raise grpc_policy.invalid("stop cannot contain an empty string")
    temperature = p.temperature if p.HasField("temperature") else 1.0
    rules = grpc_policy.stop_rules(
        model,
        len(prompt),
        max_tokens=p.max_tokens if p.HasField("max_tokens") else None,
        min_tokens=p.min_tokens,
        stop_token_ids=p.stop_token_ids,
        ignore_eos=p.ignore_eos,
        extra_eos_as_stop_ids=True,
    )
    stops = None
    if p.stop:
        stops = TextStops(
            model.tokenizer,
            p.stop,
            min_tokens=p.min_tokens,
            skip_special_tokens=p.skip_special_tokens,
            include_stop_token_text=p.include_stop_str_in_output,
            after_other_stops=False,
        )
    return JobSpec(
        request_id=request.request_id,
        prompt_ids=prompt,
        key=grpc_policy.sampling_key(
            greedy=temperature < GREEDY_BELOW or p.top_k == 1,
            seed=p.seed if p.HasField("seed") else None,
        ),
        rules=rules,
        stream=request.stream,
        stops=stops,
        logprobs=grpc_policy.logprobs_width(p.logprobs if p.HasField("logprobs") else None),
        token_rules=TokenRules.of(
            logit_bias=p.logit_bias,
            script=grpc_policy.choice_tokens(
                model,
                p.choice.choices if p.WhichOneof("constraint") == "choice" else None,
                p.regex if p.WhichOneof("constraint") == "regex" else None,
                ignore_eos=p.ignore_eos,
                json_schema=p.json_schema if p.WhichOneof("constraint") == "json_schema" else None,
                json_object=p.WhichOneof("constraint") == "json_object",
            ),
        ),
    )


RESPONSES: Final = ColumnsResponses(
    response=vllm.GenerateResponse,
    stream_chunk=vllm.GenerateStreamChunk,
    complete_message=vllm.GenerateComplete,
    output_logprobs=vllm.OutputLogProbs,
    top_logprobs=vllm.TopLogProbs,
    matched=partial(grpc_policy.matched_fields, eos_reports_id=False),
    tags_request_id=False,
    counts_carried_tokens=True,  # each message counts its own tokens, as vLLM's servicer
)


def model_info(request: vllm.GetModelInfoRequest, view: EngineView) -> vllm.GetModelInfoResponse:
    # vLLM reports config.json's eos_token_id (an int or a list), not generation_config's.
    eos = view.model.config.get("eos_token_id")
    return vllm.GetModelInfoResponse(
        **grpc_management.model_info_fields(view),
        is_generation=not view.model.pooling,
        eos_token_ids=[eos] if isinstance(eos, int) else view.model.engine.eos_ids[:1],
        max_req_input_len=view.model.engine.max_model_len,
    )


def server_info(request: vllm.GetServerInfoRequest, view: EngineView) -> vllm.GetServerInfoResponse:
    return vllm.GetServerInfoResponse(
        active_requests=view.running + view.waiting,
        last_receive_timestamp=view.now,
        uptime_seconds=view.now - view.started_at,
        server_type="vllm-grpc",
        data_parallel_size=1,
        block_size=BLOCK_SIZE,
        model_dtype=view.model.engine.dtype,
        max_num_seqs=view.model.max_batch,
        mm_processor=PROCESSOR if view.model.mm_processor else "",
        mm_media_ref_schemes=SCHEMES if view.model.mm_processor else "",
        mm_processor_source="flag" if view.model.mm_processor else "",
    )


POLICY: Final = RuntimePolicy(
    engine_name="vllm-grpc",
    description="a reference vLLM engine serving vllm.grpc.engine.VllmEngine",
    service_base=vllm_engine_grpc.VllmEngineBase,
    admit=admit,
    chunk=RESPONSES.chunk,
    complete=RESPONSES.complete,
    abort_targets=lambda request: tuple(request.request_ids),
    abort_reply=lambda request, ended: vllm.AbortResponse(),
    abort_ending=grpc_policy.AbortEnding.COMPLETE,
    embed=grpc_pooling.VLLM_EMBED,
    unary={
        "HealthCheck": health_answer(
            vllm.HealthCheckResponse, healthy="Health", unhealthy="Engine is not alive"
        ),
        "GetModelInfo": model_info,
        "GetServerInfo": server_info,
        "GetLoads": grpc_management.loads_answer(
            vllm.GetLoadsResponse,
            vllm.SchedulerLoad,
            version=VLLM_VERSION,
        ),
        "FlushCache": grpc_management.flush_cache,
    },
)
