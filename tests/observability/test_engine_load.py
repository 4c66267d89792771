"""The engine load a vLLM ZMQ output message carries (`scheduler_stats`) becomes the backend's
`EngineLoad`, which `/metrics` exports (docs/observability.md §1)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.backends.base import EngineLoad
from smg_trio.backends.zmq_codec import decode_output
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.vllm_zmq_outputs import EngineCoreOutputs, SchedulerStats, encode_outputs


@given(
    running=st.integers(0, 10_000),
    waiting=st.integers(0, 10_000),
    usage=st.floats(0.0, 1.0),
)
def test_vllm_scheduler_stats_are_the_engines_load(
    running: int, waiting: int, usage: float
) -> None:
    stats = SchedulerStats(num_running_reqs=running, num_waiting_reqs=waiting, kv_cache_usage=usage)
    message = encode_outputs(EngineCoreOutputs(engine_index=0, scheduler_stats=stats))
    assert decode_output(Runtime.VLLM, [message]).load == EngineLoad(running, waiting, usage)


def test_a_vllm_message_without_stats_reports_no_load() -> None:
    message = encode_outputs(EngineCoreOutputs(engine_index=0))
    assert decode_output(Runtime.VLLM, [message]).load is None
