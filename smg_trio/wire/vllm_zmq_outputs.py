"""Pure. vLLM EngineCore's output stream (vLLM 0.32/0.33, docs/wire.md §A.7, §A.9 replies): the
`EngineCoreOutputs` messages on the PULL socket, per-request `EngineCoreOutput` steps, finish
reasons, sample logprobs and utility replies. Decoders for the gateway, encoders for our
reference engine.

`EngineCoreOutputs`, `EngineCoreOutput`, `UtilityOutput` and `LogprobsLists` are positional
arrays; stats, prefill stats, events and request errors are maps. We encode the full 0.33
layouts (9 and 19 elements; 0.32 frontends ignore the trailing `error`); decoders accept any
prefix down to the required fields and ignore extra trailing elements.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.errors import BackendProtocolError
from smg_trio.neutral.events import TokenLogprob, TopLogprob
from smg_trio.wire.msgpack_arrays import WireArray, array_values, inline_array
from smg_trio.wire.zmq_transport import decode_message


class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4


_FINISH_TEXT: Final = {0: "stop", 1: "length", 2: "abort", 3: "error", 4: "stop"}


def finish_reason_text(code: int | None) -> str | None:
    """OpenAI finish string: repetition counts as "stop"; an unknown future code as well."""
    return None if code is None else _FINISH_TEXT.get(code, "stop")


class LogprobsLists(msgspec.Struct, array_like=True, frozen=True):
    """Sample logprobs: ids and logprobs `[positions, k+1]` (column 0 = sampled), ranks `[positions]`."""

    logprob_token_ids: WireArray
    logprobs: WireArray
    sampled_token_ranks: WireArray
    cu_num_generated_tokens: tuple[int, ...] | None = None


def decode_logprobs(lists: LogprobsLists, frames: Sequence[bytes]) -> tuple[TokenLogprob, ...]:
    """Resolve a LogprobsLists against its message's frames (`frames[0]` = payload): per
    position the sampled token, its logprob and 1-based vocab rank, and the top-k."""
    shape = lists.logprob_token_ids.shape
    if len(shape) != 2 or lists.logprobs.shape != shape or shape[1] < 1:
        raise BackendProtocolError(f"logprob arrays have inconsistent shapes {shape}")
    ids = array_values(lists.logprob_token_ids, frames)
    values = array_values(lists.logprobs, frames)
    ranks = array_values(lists.sampled_token_ranks, frames)
    positions, width = shape
    if len(ranks) != positions:
        raise BackendProtocolError(f"{len(ranks)} sampled ranks for {positions} positions")
    return tuple(
        TokenLogprob(
            token_id=int(ids[row * width]),
            logprob=float(values[row * width]),
            rank=int(ranks[row]),
            top=tuple(
                TopLogprob(token_id=int(ids[i]), logprob=float(values[i]))
                for i in range(row * width + 1, (row + 1) * width)
            ),
        )
        for row in range(positions)
    )


def encode_logprobs(positions: Sequence[TokenLogprob]) -> LogprobsLists:
    """Engine side: pack positions inline as vLLM's dtypes (int32 ids, float32 logprobs, int64 ranks)."""
    width = 1 + (len(positions[0].top) if positions else 0)
    if any(len(position.top) != width - 1 for position in positions):
        raise ValueError("every position must carry the same number of top logprobs")
    ranks = [position.rank for position in positions if position.rank is not None]
    if len(ranks) != len(positions):
        raise ValueError("vLLM reports every sampled token's rank: each position needs one")
    ids: list[int] = []
    values: list[float] = []
    for position in positions:
        ids += [position.token_id, *(top.token_id for top in position.top)]
        values += [position.logprob, *(top.logprob for top in position.top)]
    shape = (len(positions), width)
    return LogprobsLists(
        logprob_token_ids=inline_array("<i4", shape, ids),
        logprobs=inline_array("<f4", shape, values),
        sampled_token_ranks=inline_array("<i8", (len(positions),), ranks),
    )


class LogprobsTensors(msgspec.Struct, array_like=True, frozen=True):
    """Prompt logprobs (vLLM's LogprobsTensors, torch dtypes): ids and logprobs
    `[prompt_len - 1, k+1]` (column 0 = the prompt token at positions 1..), ranks
    `[prompt_len - 1]`, then two batch-boundary fields that are nil here. vLLM sends them
    whole, with the first sampled token."""

    logprob_token_ids: WireArray
    logprobs: WireArray
    selected_token_ranks: WireArray
    cu_num_generated_tokens: tuple[int, ...] | None = None
    cu_num_generated_tokens_tensor: Any = None


def decode_prompt_logprobs(raw: Any, frames: Sequence[bytes]) -> tuple[TokenLogprob, ...]:
    """`new_prompt_logprobs_tensors` (decoded as Any: nil when not asked) resolved like
    `decode_logprobs`: per prompt position its token, logprob, rank and the top-k."""
    try:
        tensors = msgspec.convert(raw, LogprobsTensors)
    except msgspec.ValidationError as exc:
        raise BackendProtocolError(f"malformed prompt logprobs: {exc}") from exc
    lists = LogprobsLists(tensors.logprob_token_ids, tensors.logprobs, tensors.selected_token_ranks)
    return decode_logprobs(lists, frames)


def encode_prompt_logprobs(positions: Sequence[TokenLogprob]) -> LogprobsTensors:
    """Engine side: pack prompt positions inline as vLLM's tensors (int64 ids and ranks,
    float32 logprobs)."""
    lists = encode_logprobs(positions)
    ids, values, ranks = lists.logprob_token_ids, lists.logprobs, lists.sampled_token_ranks
    frames = (b"",)
    return LogprobsTensors(
        logprob_token_ids=inline_array("int64", ids.shape, array_values(ids, frames)),
        logprobs=inline_array("float32", values.shape, array_values(values, frames)),
        selected_token_ranks=inline_array("int64", ranks.shape, array_values(ranks, frames)),
    )


class EngineCoreEvent(msgspec.Struct, frozen=True):
    type: int  # 1 QUEUED, 2 SCHEDULED, 3 PREEMPTED
    timestamp: float  # engine-process monotonic seconds


class PrefillStats(msgspec.Struct, frozen=True):
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0
    num_cache_creation_tokens: int = 0


class PrefixCacheStats(msgspec.Struct, frozen=True):
    """vLLM's prefix-cache counts since the engine's previous stats message (deltas): requests
    admitted after a cache lookup, their prompt tokens looked up (`queries`) and found cached
    (`hits`); the same for preempted requests looked up again; `reset`: `reset_prefix_cache`
    ran since then. 0.32 adds `hits_by_source` (e.g. {"device": n})."""

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    hits_by_source: dict[str, int] = {}


class SchedulerStats(msgspec.Struct, frozen=True):
    """vLLM's SchedulerStats map up to `prefix_cache_stats`, keys in its order: what the gateway
    decodes (the load keys and the prefix-cache deltas); the later keys are skipped."""

    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_skipped_waiting_reqs: int = 0
    num_kv_fetch_reqs_by_stage: dict[str, int] = {}
    step_counter: int = 0
    current_wave: int = 0
    kv_cache_usage: float = 0.0
    iteration_details: Any = None
    prefix_cache_stats: PrefixCacheStats | None = None  # always a map from vLLM 0.32


class FullSchedulerStats(SchedulerStats, frozen=True):
    """The whole map, every key in vLLM's order, as our reference engine sends it (vLLM encodes
    every field of its dataclass). Decoding them would cost the gateway ~0.3 µs a message for
    keys it does not read."""

    connector_prefix_cache_stats: Any = None
    kv_cache_eviction_events: tuple[Any, ...] = ()
    spec_decoding_stats: Any = None
    kv_connector_stats: Any = None
    ec_connector_stats: Any = None
    waiting_lora_adapters: dict[str, int] = {}
    running_lora_adapters: dict[str, int] = {}
    cudagraph_stats: Any = None
    perf_stats: Any = None


class RequestError(msgspec.Struct, frozen=True):
    """0.33: why an ERROR finish happened, e.g. code "validation_error"."""

    code: str = ""
    message: str = ""
    retryable: bool = False


class EngineCoreOutput(msgspec.Struct, array_like=True, frozen=True, omit_defaults=True, gc=False):
    """One request's step. Terminal iff `finish_reason` is not None; tokens are this step's delta.

    `gc=False` (as `EngineCoreOutputs`): one per streamed token, holding only decoded values, so
    never in a reference cycle; untracked, it does not count toward the collector's next run."""

    request_id: str
    new_token_ids: tuple[int, ...]
    new_logprobs: LogprobsLists | None = None
    new_prompt_logprobs_tensors: Any = None  # LogprobsTensors; see decode_prompt_logprobs
    pooling_output: Any = None
    finish_reason: int | None = None  # FinishReason; see finish_reason_text
    stop_reason: int | str | None = None  # matched stop token id (int), else None
    events: tuple[EngineCoreEvent, ...] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    trace_headers: dict[str, str] | None = None
    prefill_stats: PrefillStats | None = None  # on the first output after a prefill
    routed_experts: Any = None
    num_nans_in_logits: int = 0
    mm_cache_miss_hashes: tuple[str, ...] | None = None
    new_sampling_mask: Any = None
    spec_decode_metrics: Any = None
    prompt_token_id_logprobs: Any = None
    error: RequestError | None = None  # 0.33


class UtilityOutput(msgspec.Struct, array_like=True, frozen=True):
    """Reply to a UtilityCall. On success `result` is `[type_info, value]` with type_info nil."""

    call_id: int
    failure_message: str | None = None
    result: tuple[Any, Any] | None = None


class EngineCoreOutputs(msgspec.Struct, array_like=True, frozen=True, omit_defaults=True, gc=False):
    """One output message. `engine_index` names the producing engine (PULL has no identity)."""

    engine_index: int = 0
    outputs: tuple[EngineCoreOutput, ...] = ()
    scheduler_stats: SchedulerStats | None = None
    timestamp: float = 0.0  # engine monotonic clock: never compare with ours
    utility_output: UtilityOutput | None = None
    finished_requests: tuple[str, ...] | None = None
    wave_complete: int | None = None
    start_wave: int | None = None
    weight_version: str | None = None


_ENCODER: Final = msgspec.msgpack.Encoder()
_OUTPUTS_DECODER: Final = msgspec.msgpack.Decoder(EngineCoreOutputs)


def encode_outputs(outputs: EngineCoreOutputs) -> bytes:
    """Engine side. Arrays are inline (ext 3), so the message is this single frame."""
    return _ENCODER.encode(outputs)


def decode_outputs(frames: Sequence[bytes]) -> EngineCoreOutputs:
    """Decode `frames[0]`; keep `frames` to resolve logprob arrays with `decode_logprobs`.

    Check `zmq_transport.is_engine_dead(frames)` first: the sentinel is not msgpack.
    """
    if not frames:
        raise BackendProtocolError("empty output message")
    return decode_message(_OUTPUTS_DECODER, frames[0], "EngineCoreOutputs")
