"""I/O. A reference TokenSpeed scheduler speaking its real ZMQ wire (docs/wire.md §B), for tests, the
demo and benchmarks: `smg-trio engine tokenspeed-zmq --handshake tcp://HOST:PORT`.

As TokenSpeed 0.1.1 in `--zmq-msgpack` mode: HELLO/READY with all four keys; READY right after
INIT, then the input DEALER registers (TokenSpeed's ready map, `prefix_granularity` instead of
`block_size`), then the output PUSH connects; only `inputs[0]`/`outputs[0]` are used. Requests
are tagged `TokenizedGenerateReqInput` arrays; outputs are column batches
(`BatchTokenIDOutSlim`) with string finish reasons and cumulative counts. It stops at the model
folder's EOS ids by itself (unless `ignore_eos`), on `stop_token_ids` and at `max_new_tokens`
(default: the rest of the context); `min_new_tokens` masks them. An unseeded request's seed is
crc32(rid), as TokenSpeed derives it. Validation failures (n != 1, unsupported logprob options,
a prompt the model cannot hold, `validation_error` set) are admitted finished with "abort";
client ABORTs are silent; shutdown sends ENGINE_CORE_DEAD. Cadence: with `stream` a frame every
`stream_interval` tokens (server default 1), without it after the first token and every 50.

Test-only extension: a UTILITY frame (0x03, which real TokenSpeed drops) carrying a vLLM
`UtilityCall` is answered with a vLLM `UtilityOutput` message, so `smg_trio_counters` and
`smg_trio_received` work on both engines. No gateway sends it. `logit_bias` steers the fake
model (`engines.token_rules`); a `regex` of literal alternatives (a choice) is followed (`engines.choice_script`);
`json_schema`/`regex`/`ebnf` are reported, with
the rest of the decoded SamplingParams, by `smg_trio_received`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, Final, assert_never

import msgspec

from smg_trio.engines.batching import EngineConfig
from smg_trio.engines.choice_script import choice_script, constraint_choices
from smg_trio.engines.engine_process import run_engine
from smg_trio.engines.generation import (
    EosStop,
    Generation,
    Greedy,
    LengthStop,
    SamplingKey,
    Seeded,
    StopRules,
    TokenStop,
)
from smg_trio.engines.token_rules import TokenRules
from smg_trio.engines.vllm_engine_outputs import encode_utility_reply
from smg_trio.engines.wire_adapter import (
    BLOCK_SIZE,
    Abort,
    Aborted,
    ActiveRequest,
    Add,
    Command,
    Emission,
    EngineModel,
    Ignored,
    Load,
    Outcome,
    OutputMessage,
    Pooled,
    Reject,
    Rejected,
    Utility,
    prompt_problem,
    sampled_logprob,
)
from smg_trio.errors import BackendProtocolError
from smg_trio.wire.tokenspeed_zmq import (
    OutputRow,
    ReadyResponse,
    TokenizedGenerateReqInput,
    build_batch,
    decode_request,
    encode_handshake,
    encode_outputs,
    encode_ready_response,
)
from smg_trio.wire.vllm_zmq import decode_utility_call
from smg_trio.wire.zmq_transport import HELLO, READY, EngineAddresses, RequestType, decode_abort

TOKENSPEED_VERSION: Final = "tokenspeed-0.1.1"
GREEDY_BELOW: Final = 1e-6
GREEDY_TOP_K: Final = 1  # normalized greedy: temperature 1.0, top_k 1
DEFAULT_STREAM_INTERVAL: Final = 1
NON_STREAM_INTERVAL: Final = 50
HANDSHAKE_TIMEOUT_SECONDS: Final = 600.0


class TokenSpeedWire:
    """`WireAdapter` for TokenSpeed (docs/wire.md §B.1-B.6)."""

    ready_before_registration = True
    handshake_timeout_seconds = HANDSHAKE_TIMEOUT_SECONDS
    sentinel_on_shutdown = True

    def __init__(self, model: EngineModel, *, engine_index: int = 0, max_batch: int = 256) -> None:
        self.model = model
        self.engine_index = engine_index
        self.max_batch = max_batch

    def hello(self) -> bytes:
        return encode_handshake(HELLO)

    def ready(self) -> bytes:
        return encode_handshake(READY)

    def registration(self) -> bytes:
        model = self.model
        return encode_ready_response(
            ReadyResponse(
                max_model_len=model.max_model_len,
                num_gpu_blocks=model.num_gpu_blocks,
                prefix_granularity=BLOCK_SIZE,
                dtype=model.dtype,
                vllm_version=TOKENSPEED_VERSION,
                data_parallel_rank=self.engine_index,
                max_num_seqs=self.max_batch,
                max_num_batched_tokens=max(8192, model.max_model_len),
                instance_id=model.served_name,
                kv_cache_size_tokens=model.num_gpu_blocks * BLOCK_SIZE,
                kv_cache_max_concurrency=model.num_gpu_blocks * BLOCK_SIZE / model.max_model_len,
            )
        )

    def addresses(self, addresses: EngineAddresses) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return addresses.inputs[:1], addresses.outputs[:1]

    def parse(self, frames: Sequence[bytes]) -> Command:
        if len(frames) < 2:
            return Ignored(f"an input message needs a type frame and a payload, got {len(frames)}")
        try:
            match RequestType.of_frame(frames[0]):
                case RequestType.ADD:
                    return self._add(decode_request(frames[1]))
                case RequestType.ABORT:
                    return Abort(decode_abort(frames[1]))
                case RequestType.UTILITY:  # the test-only extension, see the module docstring
                    call = decode_utility_call(frames[1])
                    return Utility(0, call.call_id, call.method, call.args)
                case other:
                    return Ignored(f"TokenSpeed has no {other.name} request")
        except BackendProtocolError as exc:
            return Ignored(str(exc))

    def _add(self, request: TokenizedGenerateReqInput) -> Command:
        rid = request.rid
        if rid is None:
            return Ignored("an ADD without a rid cannot be answered")
        problem = _request_problem(request) or prompt_problem(request.input_ids or (), self.model)
        if problem is not None:
            return Reject(rid, 0, problem)
        params = request.sampling_params
        prompt = request.input_ids or ()
        room = self.model.max_model_len - len(prompt)
        try:
            rules = StopRules(
                max_tokens=room if params.max_new_tokens is None else params.max_new_tokens,
                max_model_len=self.model.max_model_len,
                eos_ids=frozenset(() if params.ignore_eos else self.model.eos_ids),
                stop_token_ids=frozenset(params.stop_token_ids or ()),
                min_tokens=params.min_new_tokens,
            )
            # String token-id keys on this wire (docs/wire.md §B.4).
            bias = {int(key): value for key, value in (params.logit_bias or {}).items()}
        except ValueError as exc:
            return Reject(rid, 0, str(exc))
        greedy = params.top_k == GREEDY_TOP_K or (
            not params.is_normalized and params.temperature < GREEDY_BELOW
        )
        key: SamplingKey
        if greedy:
            key = Greedy()
        else:
            key = Seeded(zlib.crc32(rid.encode()) if params.seed is None else params.seed)
        if request.stream:
            interval = params.stream_interval or DEFAULT_STREAM_INTERVAL
        else:
            interval = NON_STREAM_INTERVAL
        return Add(
            ActiveRequest(
                request_id=rid,
                client_index=0,
                generation=Generation(
                    self.model.source,
                    prompt,
                    key,
                    rules,
                    TokenRules.of(
                        logit_bias=bias,
                        script=choice_script(
                            constraint_choices(
                                None,
                                params.regex,
                                json_schema=params.json_schema,
                                answers_in_json=self.model.source.answers_in_json,
                            ),
                            self.model.tokenizer,
                            () if params.ignore_eos else self.model.eos_ids,
                        ),
                    ),
                ),
                logprobs=0 if request.return_logprob else None,
                emit_interval=interval,
            ),
            received={
                name: value
                for name, value in msgspec.structs.asdict(params).items()
                if value is not None
            },
        )

    def encode_step(self, emissions: Sequence[Emission], load: Load) -> Sequence[OutputMessage]:
        if not emissions:
            return []
        batch = build_batch(
            [_row(emission) for emission in emissions],
            engine_index=self.engine_index,
            num_running=load.running,
            num_waiting=load.waiting,
            kv_active_pages=load.used_blocks,
            kv_total_pages=load.total_blocks,
        )
        return [(0, encode_outputs(batch))]

    def encode_utility_reply(self, call_id: int, failure: str | None, value: Any) -> bytes:
        return encode_utility_reply(self.engine_index, call_id, failure, value)

    def reset_media(self) -> bool:
        return True  # TokenSpeed takes no image: nothing is held


def _request_problem(request: TokenizedGenerateReqInput) -> str | None:
    """The checks TokenSpeed's receive path makes before admitting a request."""
    params = request.sampling_params
    if request.validation_error is not None:
        return request.validation_error
    if params.n != 1:
        return f"n must be 1 on this wire, got {params.n}"
    if request.logprob_start_len >= 0:
        return "prompt logprobs are not supported"
    if request.top_logprobs_num > 0:
        return "top logprobs are not supported yet"
    if request.token_ids_logprob is not None:
        return "token_ids_logprob is not supported"
    if params.logprobs not in (None, 0):
        return f"logprobs must be nil or 0, got {params.logprobs}"
    return None


def _finish_text(outcome: Outcome | None) -> str:
    match outcome:
        case None:
            return ""
        case EosStop() | TokenStop():
            return "stop"
        case LengthStop():
            return "length"
        case Aborted() | Rejected():
            return "abort"
        case Pooled():  # pragma: no cover - TokenSpeed admits no pooling request
            return "stop"
        case _:
            assert_never(outcome)


def _row(emission: Emission) -> OutputRow:
    with_logprobs = emission.logprobs is not None
    return OutputRow(
        rid=emission.request_id,
        output_ids=emission.new_token_ids,
        finished_reason=_finish_text(emission.outcome),
        prompt_tokens=emission.prompt_tokens,
        completion_tokens=emission.completion_tokens,
        logprobs=tuple(map(sampled_logprob, emission.new_token_ids)) if with_logprobs else (),
        logprob_token_ids=emission.new_token_ids if with_logprobs else (),
    )


def run_tokenspeed_engine(model: EngineModel, config: EngineConfig) -> int:
    adapter = TokenSpeedWire(model, engine_index=config.engine_index, max_batch=config.max_batch)
    return run_engine(adapter, model, config)
