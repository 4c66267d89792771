"""Pure. Management answers several reference gRPC runtimes share: the fields of model info
that have the same names across their protos, GetLoads, SGLang-style server info structs, the
cache flush, timestamps.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from smg_trio.engines.grpc_policy import EngineView, UnaryAnswer
from smg_trio.engines.wire_adapter import BLOCK_SIZE
from smg_trio.wire._proto import common_pb2 as common

WEIGHT_VERSION: Final = "default"


def flush_cache(request: common.FlushCacheRequest, view: EngineView) -> common.FlushCacheResponse:
    """The fake model keeps no cache: flushing always succeeds at once."""
    return common.FlushCacheResponse(success=True, message="the reference engine has no cache")


def iso8601(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    whole = int(seconds)
    return timestamp_pb2.Timestamp(seconds=whole, nanos=int((seconds - whole) * 1e9))


def max_total_tokens(view: EngineView) -> int:
    return view.model.engine.num_gpu_blocks * BLOCK_SIZE


def model_info_fields(view: EngineView) -> dict[str, Any]:
    """GetModelInfoResponse fields named alike in vLLM's, SGLang's and TokenSpeed's protos."""
    model = view.model
    return {
        "model_path": str(model.path),
        "tokenizer_path": str(model.path),
        "served_model_name": model.engine.served_name,
        "model_type": str(model.config.get("model_type") or ""),
        "architectures": model.architectures,
        "max_context_length": model.engine.max_model_len,
        "vocab_size": model.config_int("vocab_size", model.engine.vocab_size),
        "pad_token_id": model.config_int("pad_token_id"),
        "bos_token_id": model.config_int("bos_token_id"),
    }


def loads_answer(
    response: type[Message],
    scheduler_load: type[Message],
    *,
    version: str,
    aggregate: type[Message] | None = None,
) -> UnaryAnswer:
    """GetLoads of vLLM, SGLang and TokenSpeed: one data-parallel rank's load, and the
    `aggregate` metrics where the proto has them (SGLang, TokenSpeed)."""

    def answer(request: Any, view: EngineView) -> Message:
        fields: dict[str, Any] = {
            "timestamp": iso8601(view.now),
            "version": version,
            "dp_rank_count": 1,
            "loads": [scheduler_load(**load_fields(view))],
        }
        if aggregate is not None:
            fields["aggregate"] = aggregate(**aggregate_fields(view))
        return response(**fields)

    return answer


def load_fields(view: EngineView) -> dict[str, Any]:
    """SchedulerLoad fields named alike in vLLM's, SGLang's and TokenSpeed's protos."""
    total = max_total_tokens(view)
    return {
        "dp_rank": 0,
        "num_running_reqs": view.running,
        "num_waiting_reqs": view.waiting,
        "num_total_reqs": view.running + view.waiting,
        "num_used_tokens": view.used_blocks * BLOCK_SIZE,
        "max_total_num_tokens": total,
        "token_usage": view.kv_usage,
        "max_running_requests": view.model.max_batch,
    }


def server_args_struct(view: EngineView, **extra: Any) -> struct_pb2.Struct:
    """The few server arguments an SGLang-style GetServerInfo reports."""
    model = view.model
    args = struct_pb2.Struct()
    args.update(
        {
            "model_path": str(model.path),
            "tokenizer_path": str(model.path),
            "served_model_name": model.engine.served_name,
            "context_length": model.engine.max_model_len,
            "max_running_requests": model.max_batch,
            "page_size": BLOCK_SIZE,
            "dtype": model.engine.dtype,
            **extra,
        }
    )
    return args


def scheduler_info_struct(view: EngineView) -> struct_pb2.Struct:
    info = struct_pb2.Struct()
    info.update(
        {
            "max_total_num_tokens": max_total_tokens(view),
            "max_req_input_len": view.model.engine.max_model_len - 1,
            "max_running_requests": view.model.max_batch,
        }
    )
    return info


def aggregate_fields(view: EngineView) -> dict[str, Any]:
    """AggregateMetrics fields of SGLang's and TokenSpeed's GetLoads (one DP rank)."""
    return {
        "total_running_reqs": view.running,
        "total_waiting_reqs": view.waiting,
        "total_reqs": view.running + view.waiting,
        "avg_token_usage": view.kv_usage,
    }
