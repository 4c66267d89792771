"""I/O. A reference vLLM EngineCore speaking the real ZMQ wire (docs/wire.md §A), for tests, the demo
and benchmarks: `smg-trio engine vllm-zmq --handshake tcp://HOST:PORT`.

It behaves like a headless `vllm serve --headless` engine 0.33 as far as a frontend can see:
HELLO/READY with `local=false, headless=true`; the output PUSH and the input DEALER (which
registers with the full ready-response map) connect before READY; one `EngineCoreOutputs` per
step per client; stop rules of `check_stop` (EOS only via `_eos_token_id`, `stop_token_ids`
report the id as `stop_reason`, `min_tokens` masks `_all_stop_token_ids`); client ABORTs are
silent; SIGTERM aborts in-flight requests with finish ABORT and `finished_requests`; a fatal
error sends ENGINE_CORE_DEAD. Stats logging is on, as in `vllm serve`: every step's
`scheduler_stats` (running and waiting counts, KV usage, the prefix cache's counts since the
previous step) ride on the first client's message of that step, or on a message of their own
to client 0 when the step has no outputs; `--disable-log-stats` sends none.

A pooling ADD (`sampling_params` nil, `pooling_params` set) finishes in its first step with the
pooler's tensor in an aux frame, as a `--runner pooling` engine's does (`vllm_pooling_add`,
docs/pooling.md §5).

Deliberate differences, all kinder than the real engine: a duplicate in-flight request id, an
ADD that fails to decode (when its id can still be read) or a prompt the model cannot hold get a
terminal ERROR output (vLLM would assert, lose its input thread, or
crash on the GPU). `logprobs=-1` (full vocabulary) returns the top 20, as does
`prompt_logprobs=-1`. Prompt logprobs (`wire_adapter.prompt_position_logprobs`) go whole with a
request's first output, as vLLM sends them once its prefill is done. `logit_bias`,
`allowed_token_ids` and `_bad_words_token_ids` steer the fake model (`engines.token_rules`);
`structured_outputs` is refused as the real EngineCore refuses it (a `choice`, which only
vLLM's front end turns into a grammar, or no `_backend`: `vllm_request_checks`) and
followed only for a choice's grammar (`engines.choice_script`), after the
reasoning when launched with `--reasoning-parser` and the ADD's `reasoning_ended` says so
(`engines.reasoning_gate`), and reported, with the rest of the decoded SamplingParams (and
`reasoning_ended` when set), by the test-only `smg_trio_received` utility (`engines.batching`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.engines.batching import EngineConfig
from smg_trio.engines.choice_script import choice_script, constraint_choices
from smg_trio.engines.engine_process import run_engine
from smg_trio.engines.generation import (
    Generation,
    Greedy,
    SamplingKey,
    Seeded,
    StopRules,
)
from smg_trio.engines.reasoning_gate import grammar_gate
from smg_trio.engines.token_rules import TokenRules
from smg_trio.engines.vllm_engine_outputs import (
    cache_miss,
    encode_utility_reply,
    finish_fields,
    step_payload,
    with_pooled,
)
from smg_trio.engines.vllm_mm_checks import (
    MEDIA_CACHE_KEYS,
    MediaKeys,
    mm_features_problem,
    summary,
)
from smg_trio.engines.vllm_pooling_add import pooling_add
from smg_trio.engines.vllm_request_checks import reject_undecodable, structured_outputs_problem
from smg_trio.engines.wire_adapter import (
    BLOCK_SIZE,
    RUNNER_UP_LOGPROB,
    Abort,
    Aborted,
    ActiveRequest,
    Add,
    Command,
    Emission,
    EngineModel,
    Ignored,
    Load,
    OutputMessage,
    Reject,
    Rejected,
    Utility,
    prompt_position_logprobs,
    prompt_problem,
    runner_up_ids,
    sampled_logprob,
)
from smg_trio.errors import BackendProtocolError
from smg_trio.neutral.events import TokenLogprob, TopLogprob
from smg_trio.wire.vllm_zmq import (
    EngineCoreRequest,
    ReadyResponse,
    VllmSamplingParams,
    decode_request,
    decode_utility_call,
    encode_ready_response,
)
from smg_trio.wire.vllm_zmq_outputs import (
    EngineCoreOutput,
    EngineCoreOutputs,
    FullSchedulerStats,
    PrefillStats,
    encode_logprobs,
    encode_prompt_logprobs,
)
from smg_trio.wire.zmq_transport import (
    HELLO,
    READY,
    EngineAddresses,
    RequestType,
    decode_abort,
    encode_handshake,
)

VLLM_VERSION: Final = "0.33.0"  # the layouts we speak (22-element request, 19-element output)
GREEDY_BELOW: Final = 1e-5  # vLLM's _SAMPLING_EPS
MAX_LOGPROBS: Final = 20
WEIGHT_VERSION: Final = "default"  # vLLM's EngineCore's until its RL API names another
HANDSHAKE_TIMEOUT_SECONDS: Final = 300.0  # HANDSHAKE_TIMEOUT_MINS = 5


class VllmWire:
    """`WireAdapter` for vLLM EngineCore (docs/wire.md §A.3-A.10)."""

    ready_before_registration = False
    handshake_timeout_seconds = HANDSHAKE_TIMEOUT_SECONDS
    sentinel_on_shutdown = False

    def __init__(
        self,
        model: EngineModel,
        *,
        engine_index: int = 0,
        max_batch: int = 256,
        log_stats: bool = True,
    ) -> None:
        self.model = model
        self.engine_index = engine_index
        self.max_batch = max_batch
        self.log_stats = log_stats
        self._seeds = random.Random()  # unseeded sampling draws one seed per request from here
        # Requests that asked for prompt logprobs: (prompt ids, top-k width), until first output.
        self._prompt_logprobs: dict[str, tuple[tuple[int, ...], int]] = {}
        # vLLM's receiver cache of image items (mm_processor_cache_gb): keys sent with data.
        self._media = MediaKeys(MEDIA_CACHE_KEYS)

    def hello(self) -> bytes:
        return encode_handshake(HELLO, local=False, headless=True)

    def ready(self) -> bytes:
        return encode_handshake(READY, local=False, headless=True)

    def registration(self) -> bytes:
        model = self.model
        return encode_ready_response(
            ReadyResponse(
                max_model_len=model.max_model_len,
                num_gpu_blocks=model.num_gpu_blocks,
                block_size=BLOCK_SIZE,
                dtype=model.dtype,
                vllm_version=VLLM_VERSION,
                data_parallel_rank=self.engine_index,
                max_num_seqs=self.max_batch,
                max_num_batched_tokens=max(8192, model.max_model_len),
                instance_id=f"smg-trio-{model.served_name}-{self.engine_index}",
                kv_cache_size_tokens=model.num_gpu_blocks * BLOCK_SIZE,
                kv_cache_max_concurrency=model.num_gpu_blocks * BLOCK_SIZE / model.max_model_len,
            )
        )

    def addresses(self, addresses: EngineAddresses) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return addresses.inputs, addresses.outputs

    def parse(self, frames: Sequence[bytes]) -> Command:
        if len(frames) < 2:
            return Ignored(f"an input message needs a type frame and a payload, got {len(frames)}")
        try:
            kind = RequestType.of_frame(frames[0])
            match kind:
                case RequestType.ADD:
                    return self._add(frames[1], frames[1:])
                case RequestType.ABORT:
                    aborted = decode_abort(frames[1])
                    for request_id in aborted:  # aborted before its first output
                        self._prompt_logprobs.pop(request_id, None)
                    return Abort(aborted)
                case RequestType.UTILITY:
                    call = decode_utility_call(frames[1])
                    return Utility(call.client_index, call.call_id, call.method, call.args)
                case _:
                    return Ignored(f"{kind.name} is not handled without data parallelism")
        except BackendProtocolError as exc:
            return Ignored(str(exc))

    def _add(self, payload: bytes, frames: Sequence[bytes]) -> Command:
        """`frames`: the payload (index 0) and its extra tensor frames."""
        try:
            request = decode_request(payload)
        except BackendProtocolError as exc:
            return reject_undecodable(payload, str(exc))
        params = request.sampling_params
        if params is None:  # a pooling request (docs/pooling.md §5)
            return pooling_add(request, self.model)
        prompt = request.prompt_token_ids or ()
        problem = prompt_problem(prompt, self.model) or mm_features_problem(
            request.mm_features, frames, prompt, self.model.model_type
        )
        if problem is not None:
            return Reject(request.request_id, request.client_index, problem)
        missing = self._media.missing(request.mm_features)
        if missing:  # vLLM: finish ERROR, no tokens, the keys in mm_cache_miss_hashes
            return Reject(
                request.request_id, request.client_index, "image cache miss", cache_miss=missing
            )
        try:
            rules = StopRules(
                max_tokens=params.effective_max_tokens,
                max_model_len=self.model.max_model_len,
                eos_ids=frozenset(() if params.eos_token_id is None else (params.eos_token_id,)),
                stop_token_ids=frozenset(params.stop_token_ids or ()),
                min_tokens=params.min_tokens,
                masked_ids=frozenset(params.all_stop_token_ids),
            )
        except ValueError as exc:
            return Reject(request.request_id, request.client_index, str(exc))
        problem = structured_outputs_problem(params.structured_outputs)
        if problem is not None:
            return Reject(request.request_id, request.client_index, problem)
        key: SamplingKey
        if params.temperature < GREEDY_BELOW or params.top_k == 1:
            key = Greedy()
        elif params.seed is not None:
            key = Seeded(params.seed)
        else:
            key = Seeded(self._seeds.getrandbits(64))
        logprobs = params.logprobs
        if logprobs is not None:
            logprobs = MAX_LOGPROBS if logprobs < 0 else min(logprobs, MAX_LOGPROBS)
        if params.prompt_logprobs is not None:
            width = params.prompt_logprobs
            width = MAX_LOGPROBS if width < 0 else min(width, MAX_LOGPROBS)
            self._prompt_logprobs[request.request_id] = (tuple(prompt), width)
        token_rules = TokenRules.of(
            logit_bias=params.logit_bias,
            allowed_token_ids=params.allowed_token_ids,
            bad_words=params.bad_words_token_ids or (),
            script=self._choice_script(params),
            script_after=grammar_gate(
                request.reasoning_ended, prompt, self.model.reasoning_end_ids
            ),
        )
        generation = Generation(self.model.source, prompt, key, rules, token_rules)
        return Add(
            ActiveRequest(
                request.request_id,
                request.client_index,
                generation,
                logprobs,
                prompt_ids=tuple(prompt),
            ),
            received=_received(request),
        )

    def _choice_script(self, params: VllmSamplingParams) -> tuple[int, ...]:
        constraint = params.structured_outputs
        if constraint is None:
            return ()
        end = () if params.eos_token_id is None else (params.eos_token_id,)
        choices = constraint_choices(
            None,
            constraint.regex,
            constraint.grammar,
            json_schema=constraint.json,
            json_object=bool(constraint.json_object),
            answers_in_json=self.model.source.answers_in_json,
        )
        return choice_script(choices, self.model.tokenizer, end)

    def encode_step(self, emissions: Sequence[Emission], load: Load) -> list[OutputMessage]:
        by_client: dict[int, list[Emission]] = {}
        for emission in emissions:
            by_client.setdefault(emission.client_index, []).append(emission)
        # The step's stats go to one client only, as vLLM's (`update_from_output`): the first
        # with outputs this step, else client 0 in a message of its own.
        stats = self._scheduler_stats(load)
        if stats is not None and not by_client:
            by_client[0] = []
        messages = []
        for client_index, group in by_client.items():
            engine_ended = tuple(
                e.request_id for e in group if isinstance(e.outcome, Aborted | Rejected)
            )
            frames: list[bytes] = []  # aux frames: pooling tensors
            outputs = EngineCoreOutputs(
                engine_index=self.engine_index,
                outputs=tuple(with_pooled(self._output(e), e.outcome, frames) for e in group),
                scheduler_stats=stats,
                timestamp=time.monotonic(),
                finished_requests=engine_ended or None,
                # vLLM's EngineCore names its weights on every step ("default" until its front
                # end's RL API sets another; docs/vllm-frontend.md §7).
                weight_version=WEIGHT_VERSION,
            )
            stats = None
            messages.append((client_index, step_payload(outputs, frames)))
        return messages

    def _scheduler_stats(self, load: Load) -> FullSchedulerStats | None:
        """vLLM's `make_stats`: a scheduler step's stats when stats logging is on."""
        if not self.log_stats or load.prefix_cache_stats is None:
            return None
        return FullSchedulerStats(
            num_running_reqs=load.running,
            num_waiting_reqs=load.waiting,
            kv_cache_usage=load.kv_cache_usage,
            prefix_cache_stats=load.prefix_cache_stats,
        )

    def _output(self, emission: Emission) -> EngineCoreOutput:
        finish_reason, stop_reason, error = finish_fields(emission.outcome)
        new_logprobs = None
        if emission.logprobs is not None and emission.new_token_ids:
            new_logprobs = encode_logprobs(
                [self._position_logprobs(t, emission.logprobs) for t in emission.new_token_ids]
            )
        prompt_logprobs = None
        asked = self._prompt_logprobs.pop(emission.request_id, None)
        if asked is not None:
            prompt, width = asked
            prompt_logprobs = encode_prompt_logprobs(
                [prompt_position_logprobs(self.model, t, width) for t in prompt[1:]]
            )
        prefill_stats = None
        if emission.first and emission.prompt_tokens:
            prefill_stats = PrefillStats(
                num_prompt_tokens=emission.prompt_tokens,
                num_computed_tokens=emission.prompt_tokens,
                num_cached_tokens=emission.cached_tokens,
                num_local_cached_tokens=emission.cached_tokens,
                num_cache_creation_tokens=emission.cache_creation_tokens,
            )
        return EngineCoreOutput(
            request_id=emission.request_id,
            new_token_ids=emission.new_token_ids,
            new_logprobs=new_logprobs,
            new_prompt_logprobs_tensors=prompt_logprobs,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            prefill_stats=prefill_stats,
            error=error,
            mm_cache_miss_hashes=cache_miss(emission.outcome),
        )

    def _position_logprobs(self, token_id: int, width: int) -> TokenLogprob:
        # Rank 1, so the top-k list starts with the sampled token itself.
        runners_up = runner_up_ids(self.model, token_id, max(0, width - 1))
        sampled = sampled_logprob(token_id)
        top = [TopLogprob(token_id=token_id, logprob=sampled)][:width]
        top += [
            TopLogprob(token_id=other, logprob=sampled + RUNNER_UP_LOGPROB * (i + 1))
            for i, other in enumerate(runners_up)
        ]
        return TokenLogprob(token_id=token_id, logprob=sampled, rank=1, top=tuple(top))

    def encode_utility_reply(self, call_id: int, failure: str | None, value: Any) -> bytes:
        return encode_utility_reply(self.engine_index, call_id, failure, value)

    def reset_media(self) -> bool:
        self._media.clear()
        return True


def run_vllm_engine(model: EngineModel, config: EngineConfig) -> int:
    adapter = VllmWire(
        model,
        engine_index=config.engine_index,
        max_batch=config.max_batch,
        log_stats=config.log_stats,
    )
    return run_engine(adapter, model, config)


def _received(request: EngineCoreRequest) -> dict[str, Any]:
    """What `smg_trio_received` reports: the sampling map, `reasoning_ended` when set, and
    what arrived of the images (`vllm_mm_checks.summary`)."""
    received: dict[str, Any] = msgspec.to_builtins(request.sampling_params)
    if request.reasoning_ended is not None:
        received["reasoning_ended"] = request.reasoning_ended
    if request.mm_features is not None:
        received["mm_features"] = summary(request.mm_features)
    return received
