"""The reference vLLM engine's scheduler stats (docs/wire.md §A.7.4, vLLM's
`Scheduler.update_from_output`): with stats logging on, each scheduler step's stats ride on ONE
client's message, the first with outputs in that step, or on a message of their own to client 0
when the step has none; never on a rejection's message, never with `--disable-log-stats`. The
prefix cache hands its counts over as deltas, as vLLM's `make_prefix_cache_stats` does."""

from __future__ import annotations

from typing import Final

import msgspec

from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.prefix_cache import PrefixCache
from smg_trio.engines.vllm_zmq_engine import VllmWire
from smg_trio.engines.wire_adapter import Emission, Load
from smg_trio.model.folder import demo_model_path
from smg_trio.wire.vllm_zmq_outputs import FullSchedulerStats, PrefixCacheStats, decode_outputs

MODEL: Final = load_engine_model(demo_model_path())
CACHE: Final = PrefixCacheStats(requests=2, queries=40, hits=16)
STEP: Final = Load(3, 1, 7, used_blocks=4, total_blocks=16, prefix_cache_stats=CACHE)


def frames_of(payload: bytes | list[bytes]) -> list[bytes]:
    return payload if isinstance(payload, list) else [payload]


def emission(request_id: str, client_index: int) -> Emission:
    return Emission(request_id, client_index, (5,), None, prompt_tokens=20, completion_tokens=1)


def test_stats_go_with_the_first_clients_message_only() -> None:
    wire = VllmWire(MODEL)
    sent = wire.encode_step([emission("a", 1), emission("b", 0), emission("c", 1)], STEP)
    assert [client for client, _ in sent] == [1, 0]
    first, second = (decode_outputs(frames_of(payload)) for _, payload in sent)
    raw = msgspec.msgpack.decode(frames_of(sent[0][1])[0])
    assert list(raw[2]) == list(FullSchedulerStats.__struct_fields__)  # every key, vLLM's order
    assert second.scheduler_stats is None
    stats = first.scheduler_stats
    assert stats is not None
    assert (stats.num_running_reqs, stats.num_waiting_reqs, stats.kv_cache_usage) == (3, 1, 0.25)
    assert stats.step_counter == 0  # vLLM's make_stats leaves it to data parallelism
    assert stats.prefix_cache_stats == CACHE


def test_a_step_without_outputs_sends_its_stats_to_client_0() -> None:
    (sent,) = VllmWire(MODEL).encode_step([], STEP)
    client, payload = sent
    message = decode_outputs(frames_of(payload))
    assert client == 0
    assert message.outputs == ()
    assert message.scheduler_stats is not None
    assert message.scheduler_stats.prefix_cache_stats == CACHE


def test_no_stats_outside_a_step_or_without_stats_logging() -> None:
    rejected = Load(0, 0, 0, 0, 16)  # a rejection's or shutdown's message: no step
    assert VllmWire(MODEL).encode_step([], rejected) == []
    (sent,) = VllmWire(MODEL).encode_step([emission("a", 0)], rejected)
    assert decode_outputs(frames_of(sent[1])).scheduler_stats is None
    quiet = VllmWire(MODEL, log_stats=False)
    assert quiet.encode_step([], STEP) == []
    (sent,) = quiet.encode_step([emission("a", 0)], STEP)
    assert decode_outputs(frames_of(sent[1])).scheduler_stats is None


def test_the_prefix_cache_hands_over_deltas() -> None:
    cache = PrefixCache(capacity_blocks=64, block_size=16, seed=1)
    prompt = list(range(100, 150))  # 3 whole blocks and 2 tokens
    assert cache.take_stats() == PrefixCacheStats()
    cache.admit(prompt)
    cache.admit(prompt)  # the last token is always computed: 3 blocks hit
    assert cache.take_stats() == PrefixCacheStats(requests=2, queries=100, hits=48)
    assert cache.take_stats() == PrefixCacheStats()  # handed over: counted once
    cache.clear()
    cache.admit(prompt)
    assert cache.take_stats() == PrefixCacheStats(reset=True, requests=1, queries=50, hits=0)
