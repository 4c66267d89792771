"""Pure. The reference TensorRT-LLM gRPC engine's runtime policy: `trtllm.TrtllmService` as
TRT-LLM's own gRPC servicer serves it (docs/wire.md §C.6).

- Input: token ids only; `max_tokens` is required (at least 1). Greedy when temperature is 0,
  top_k is 1, or none of temperature/top_k/top_p is set (TRT-LLM's default); `seed` keys
  sampling and defaults to 0, so unseeded sampling repeats.
- EOS is the engine's: the model's first EOS id is the end id (no matched stop), the others
  (generation_config's) join `stop_token_ids` and are reported as the matched id;
  `ignore_eos` drops both; `min_tokens` masks them.
- Stop strings are stop WORDS: each is tokenized once and matches when the output ends with
  those ids (`TokenSequenceStops`), reported as the matched string.
- The matched stop's tokens (end id, stop id or stop word) are left out of the output unless
  `include_stop_token_in_output`: the final chunk drops them, and the complete's cumulative
  output omits the whole stop word (earlier tokens of a multi-token word were already
  streamed: the engine does not hold tokens back).
- Streaming: a chunk per step (cumulative `completion_tokens`), then a complete with the
  whole output. Non-streaming: one complete. Abort RPC: answers whether the id was known;
  the stream gets a last chunk and a complete with finish "cancelled".
- Unsupported here: beam search, n > 1 (INVALID_ARGUMENT). `guided_decoding` is followed only
  for a regex of literal alternatives (a choice, `engines.choice_script`); `EngineCounters.GetReceived` reports it (test-only, `engines.received_log`).
"""

from __future__ import annotations

from typing import Final

from smg_trio.engines import grpc_policy
from smg_trio.engines.grpc_policy import Delivery, EngineView, JobSpec, RuntimePolicy, ServedModel
from smg_trio.engines.grpc_stops import TokenSequenceStops
from smg_trio.engines.token_rules import TokenRules
from smg_trio.engines.wire_adapter import sampled_logprob
from smg_trio.wire._proto import trtllm_service_grpc
from smg_trio.wire._proto import trtllm_service_pb2 as trtllm

TRTLLM_VERSION: Final = "1.3.0"
GUIDE: Final = trtllm.GuidedDecodingParams


def admit(request: trtllm.GenerateRequest, model: ServedModel) -> JobSpec:
    if not request.HasField("tokenized"):
        raise grpc_policy.invalid("Missing tokenized input")
    prompt = grpc_policy.checked_prompt(request.tokenized.input_token_ids, model)
    if request.max_tokens < 1:
        raise grpc_policy.invalid("max_tokens is required and must be at least 1")
    s = request.sampling_config
    if s.beam_width > 1 or s.num_return_sequences > 1:
        raise grpc_policy.invalid(
            "this reference engine serves one greedy or sampled sequence only"
        )
    greedy = (
        (s.HasField("temperature") and s.temperature == 0.0)
        or (s.HasField("top_k") and s.top_k == 1)
        or not (s.HasField("temperature") or s.HasField("top_k") or s.HasField("top_p"))
    )
    min_tokens = s.min_tokens if s.HasField("min_tokens") else 0
    out = request.output_config
    width = (
        max(0, min(out.logprobs, grpc_policy.MAX_LOGPROBS)) if out.HasField("logprobs") else None
    )
    return JobSpec(
        request_id=request.request_id,
        prompt_ids=prompt,
        key=grpc_policy.sampling_key(greedy=greedy, seed=s.seed if s.HasField("seed") else 0),
        rules=grpc_policy.stop_rules(
            model,
            len(prompt),
            max_tokens=request.max_tokens,
            min_tokens=min_tokens,
            stop_token_ids=request.stop_token_ids,
            ignore_eos=request.ignore_eos,
            extra_eos_as_stop_ids=True,
        ),
        stream=request.streaming,
        stops=(
            TokenSequenceStops(model.tokenizer, request.stop, min_tokens=min_tokens)
            if request.stop
            else None
        ),
        trim_matched_stop=not request.include_stop_token_in_output,
        logprobs=width,
        token_rules=TokenRules.of(
            bad_words=bad_words(request, model),
            script=grpc_policy.choice_tokens(
                model,
                None,
                guided(request, GUIDE.GUIDE_TYPE_REGEX),
                ignore_eos=request.ignore_eos,
                json_schema=guided(request, GUIDE.GUIDE_TYPE_JSON_SCHEMA),
                json_object=guided(request, GUIDE.GUIDE_TYPE_JSON) is not None,
            ),
        ),
    )


def guided(request: trtllm.GenerateRequest, guide_type: int) -> str | None:
    """The guide of `guided_decoding` when it is of this type (`GuidedDecodingParams.GUIDE_TYPE_*`)."""
    if request.HasField("guided_decoding") and request.guided_decoding.guide_type == guide_type:
        return request.guided_decoding.guide
    return None


def bad_words(request: trtllm.GenerateRequest, model: ServedModel) -> list[list[int]]:
    """TRT-LLM tokenizes `bad` words itself (no special tokens); `bad_token_ids` are one-token
    words. Neither ever completes in the output (engines.token_rules)."""
    words = [model.tokenizer.encode(word, add_special_tokens=False) for word in request.bad]
    return [*words, *([token_id] for token_id in request.bad_token_ids)]


def _logprobs(model: ServedModel, spec: JobSpec, ids: tuple[int, ...]) -> list[trtllm.TokenLogprob]:
    if spec.logprobs is None:
        return []
    rows = []
    for token_id in ids:
        top = grpc_policy.position_logprobs(model, token_id, spec.logprobs)
        rows.append(
            trtllm.TokenLogprob(
                token_id=token_id,
                logprob=sampled_logprob(token_id),
                top_logprobs=[trtllm.TopLogprob(token_id=t, logprob=v) for t, v in top],
            )
        )
    return rows


def chunk(model: ServedModel, spec: JobSpec, delivery: Delivery) -> trtllm.GenerateResponse:
    shown = len(delivery.output_ids) if delivery.ending is not None else delivery.generated
    return trtllm.GenerateResponse(
        request_id=spec.request_id,
        chunk=trtllm.GenerateStreamChunk(
            token_ids=delivery.new_ids,
            prompt_tokens=len(spec.prompt_ids),
            completion_tokens=shown,
            logprobs=_logprobs(model, spec, delivery.new_ids),
        ),
    )


def complete(model: ServedModel, spec: JobSpec, delivery: Delivery) -> trtllm.GenerateResponse:
    assert delivery.ending is not None
    return trtllm.GenerateResponse(
        request_id=spec.request_id,
        complete=trtllm.GenerateComplete(
            output_token_ids=delivery.output_ids,
            finish_reason=grpc_policy.finish_reason(delivery.ending, aborted="cancelled"),
            prompt_tokens=len(spec.prompt_ids),
            completion_tokens=len(delivery.output_ids),
            logprobs=_logprobs(model, spec, delivery.output_ids),
            **grpc_policy.matched_fields(delivery.ending, eos_reports_id=False),
        ),
    )


def abort_reply(request: trtllm.AbortRequest, ended: int) -> trtllm.AbortResponse:
    state = "aborted" if ended else "not found"
    return trtllm.AbortResponse(
        success=bool(ended), message=f"Request {request.request_id} {state}"
    )


def health_check(
    request: trtllm.HealthCheckRequest, view: EngineView
) -> trtllm.HealthCheckResponse:
    return trtllm.HealthCheckResponse(status="OK" if view.serving else "Server is shutting down")


def model_info(
    request: trtllm.GetModelInfoRequest, view: EngineView
) -> trtllm.GetModelInfoResponse:
    model = view.model
    return trtllm.GetModelInfoResponse(
        model_id=str(model.path),
        max_input_len=model.engine.max_model_len,
        max_seq_len=model.engine.max_model_len,
        max_batch_size=model.max_batch,
        vocab_size=model.config_int("vocab_size", model.engine.vocab_size),
    )


def server_info(
    request: trtllm.GetServerInfoRequest, view: EngineView
) -> trtllm.GetServerInfoResponse:
    return trtllm.GetServerInfoResponse(
        version=TRTLLM_VERSION,
        backend="tensorrt-llm",
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        context_parallel_size=1,
        world_size=1,
    )


POLICY: Final = RuntimePolicy(
    engine_name="trtllm-grpc",
    description="a reference TensorRT-LLM engine serving trtllm.TrtllmService",
    service_base=trtllm_service_grpc.TrtllmServiceBase,
    admit=admit,
    chunk=chunk,
    complete=complete,
    abort_targets=lambda request: (request.request_id,),
    abort_reply=abort_reply,
    abort_ending=grpc_policy.AbortEnding.COMPLETE,
    unary={"HealthCheck": health_check, "GetModelInfo": model_info, "GetServerInfo": server_info},
)
