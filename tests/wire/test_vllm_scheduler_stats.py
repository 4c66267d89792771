"""vLLM's `SchedulerStats` on the output wire (docs/wire.md §A.7.4): golden bytes written by
vLLM 0.32's own `MsgpackEncoder`, decoded into the load and prefix-cache counts the gateway
keeps, and our reference engine's encoding of the same stats byte for byte."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.backends.base import NO_PREFIX_CACHE_DELTA, EngineLoad, PrefixCacheCounts
from smg_trio.backends.zmq_codec import decode_output
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.vllm_zmq_outputs import (
    EngineCoreOutputs,
    FullSchedulerStats,
    PrefixCacheStats,
    SchedulerStats,
    decode_outputs,
    encode_outputs,
)

# Under vLLM 0.32 (/opt/venvs/vllm):
#   pcs = PrefixCacheStats()
#   pcs.record(num_tokens=40, num_hits=32, preempted=False,
#              hits_by_source={CacheHitSource.DEVICE: 32})
#   pcs.record(num_tokens=20, num_hits=0, preempted=False)
#   pcs.record(num_tokens=50, num_hits=16, preempted=True)
#   pcs.reset = True
#   stats = SchedulerStats(num_running_reqs=2, num_waiting_reqs=1, kv_cache_usage=0.25,
#                          prefix_cache_stats=pcs)
#   MsgpackEncoder().encode(EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput(
#       request_id="r-1", new_token_ids=[7])], scheduler_stats=stats, timestamp=12.5))
# One frame; its 18-element EngineCoreOutput is 0.32's layout.
STATS_MAP = bytes.fromhex(
    "de0012b06e756d5f72756e6e696e675f7265717302b06e756d5f77616974696e675f7265717301b86e756d5f"
    "736b69707065645f77616974696e675f7265717300ba6e756d5f6b765f66657463685f726571735f62795f73"
    "7461676580ac737465705f636f756e74657200ac63757272656e745f7761766500ae6b765f63616368655f75"
    "73616765cb3fd0000000000000b1697465726174696f6e5f64657461696c73c0b27072656669785f63616368"
    "655f737461747388a57265736574c3a8726571756573747302a7717565726965733ca46869747320b2707265"
    "656d707465645f726571756573747301b1707265656d707465645f7175657269657332ae707265656d707465"
    "645f6869747310ae686974735f62795f736f7572636581a664657669636520bc636f6e6e6563746f725f7072"
    "656669785f63616368655f7374617473c0b86b765f63616368655f6576696374696f6e5f6576656e747390b3"
    "737065635f6465636f64696e675f7374617473c0b26b765f636f6e6e6563746f725f7374617473c0b265635f"
    "636f6e6e6563746f725f7374617473c0b577616974696e675f6c6f72615f616461707465727380b572756e6e"
    "696e675f6c6f72615f616461707465727380af6375646167726170685f7374617473c0aa706572665f737461"
    "7473c0"
)
GOLDEN = (
    bytes.fromhex("990091dc0012a3722d319107c0c0c0c0c0c0c0c0c0c0c000c0c0c0c0")
    + STATS_MAP
    + bytes.fromhex("cb4029000000000000c0c0c0c0c0")
)
EXPECTED_CACHE = PrefixCacheStats(
    reset=True,
    requests=2,
    queries=60,
    hits=32,
    preempted_requests=1,
    preempted_queries=50,
    preempted_hits=16,
    hits_by_source={"device": 32},
)


def test_vllm_032_stats_decode() -> None:
    message = decode_outputs([GOLDEN])
    assert message.timestamp == 12.5
    assert [output.request_id for output in message.outputs] == ["r-1"]
    stats = message.scheduler_stats
    assert stats is not None
    assert (stats.num_running_reqs, stats.num_waiting_reqs, stats.kv_cache_usage) == (2, 1, 0.25)
    assert stats.prefix_cache_stats == EXPECTED_CACHE


def test_the_gateway_keeps_the_load_and_the_prefix_cache_deltas() -> None:
    decoded = decode_output(Runtime.VLLM, [GOLDEN])
    assert decoded.load == EngineLoad(2, 1, 0.25)
    assert decoded.prefix_cache == PrefixCacheCounts(
        requests=2,
        queries=60,
        hits=32,
        preempted_requests=1,
        preempted_queries=50,
        preempted_hits=16,
        resets=1,
    )


def test_our_engine_encodes_the_stats_map_as_vllm_does() -> None:
    stats = FullSchedulerStats(
        num_running_reqs=2,
        num_waiting_reqs=1,
        kv_cache_usage=0.25,
        prefix_cache_stats=EXPECTED_CACHE,
    )
    assert msgspec.msgpack.encode(stats) == STATS_MAP


def test_a_step_without_lookups_reports_no_delta() -> None:
    stats = SchedulerStats(num_running_reqs=1, prefix_cache_stats=PrefixCacheStats())
    message = encode_outputs(EngineCoreOutputs(engine_index=0, scheduler_stats=stats))
    assert decode_output(Runtime.VLLM, [message]).prefix_cache is NO_PREFIX_CACHE_DELTA


def test_stats_without_a_prefix_cache_map_report_none() -> None:
    """An older engine's stats map (no `prefix_cache_stats` key): load only."""
    legacy = msgspec.msgpack.encode(
        [0, [], {"num_running_reqs": 3, "num_waiting_reqs": 0, "kv_cache_usage": 0.5}, 1.0]
    )
    decoded = decode_output(Runtime.VLLM, [legacy])
    assert decoded.load == EngineLoad(3, 0, 0.5)
    assert decoded.prefix_cache is None


counts = st.integers(0, 2**40)


@given(st.lists(st.tuples(st.booleans(), counts, counts, counts, counts), max_size=8))
def test_summed_deltas_are_the_engines_totals(
    reports: list[tuple[bool, int, int, int, int]],
) -> None:
    """Whatever the reports, their running sum is the field-wise total, resets counted."""
    total = PrefixCacheCounts()
    for reset, requests, queries, hits, preempted in reports:
        stats = SchedulerStats(
            prefix_cache_stats=PrefixCacheStats(
                reset=reset,
                requests=requests,
                queries=queries,
                hits=hits,
                preempted_requests=preempted,
            )
        )
        message = encode_outputs(EngineCoreOutputs(engine_index=0, scheduler_stats=stats))
        delta = decode_output(Runtime.VLLM, [message]).prefix_cache
        assert delta is not None
        total = total.plus(delta)
    assert total.requests == sum(report[1] for report in reports)
    assert total.queries == sum(report[2] for report in reports)
    assert total.hits == sum(report[3] for report in reports)
    assert total.preempted_requests == sum(report[4] for report in reports)
    assert total.resets == sum(report[0] for report in reports)
