"""The reference TokenSpeed engine as a subprocess, driven over the real wire."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import msgspec

from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.generation import Generation, Seeded, StopRules
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.sampling import EngineRequest, SamplingParams
from smg_trio.wire import tokenspeed_zmq
from smg_trio.wire.tokenspeed_zmq import OutputRow
from smg_trio.wire.zmq_transport import RequestType, is_engine_dead

from .zmq_frontend import Frontend, running_engine, stop_engine

CONTEXT = 4096
MODEL = load_engine_model(demo_model_path())
PROMPT = [400, 401, 402, 403]


def engine_request(rid: str, sampling: SamplingParams) -> EngineRequest:
    return EngineRequest(
        request_id=rid, choice_index=0, prompt_ids=tuple(PROMPT), sampling=sampling
    )


def add(frontend: Frontend, rid: str, stream: bool = True, **sampling: object) -> None:
    request = tokenspeed_zmq.build_request(
        engine_request(rid, msgspec.convert(sampling, SamplingParams)),
        engine_request_id=rid,
        max_model_len=CONTEXT,
        stream=stream,
    )
    frontend.send(RequestType.ADD, tokenspeed_zmq.encode_request(request))


def batches_until_finished(frontend: Frontend, *rids: str) -> list[tuple[OutputRow, ...]]:
    batches: list[tuple[OutputRow, ...]] = []
    ended: set[str] = set()
    while not ended >= set(rids):
        frames = frontend.receive()
        assert not is_engine_dead(frames)
        rows = tokenspeed_zmq.split_batch(tokenspeed_zmq.decode_outputs(frames))
        batches.append(rows)
        ended |= {row.rid for row in rows if row.finished_reason}
    return batches


def rows_of(batches: Sequence[tuple[OutputRow, ...]], rid: str) -> list[OutputRow]:
    return [row for rows in batches for row in rows if row.rid == rid]


def tokens_of(batches: Sequence[tuple[OutputRow, ...]], rid: str) -> list[int]:
    return [t for row in rows_of(batches, rid) for t in row.output_ids]


def test_handshake_and_registration_are_tokenspeeds() -> None:
    with running_engine("tokenspeed-zmq") as (_, handshake, process):
        assert handshake.hello_raw == {
            "status": "HELLO",
            "local": True,
            "headless": True,
            "parallel_config_hash": None,
        }
        raw = msgspec.msgpack.decode(handshake.registration)
        assert "block_size" not in raw
        registration = tokenspeed_zmq.decode_ready_response(handshake.registration)
        assert registration.prefix_granularity == 16
        assert registration.vllm_version == "tokenspeed-0.1.1"
        assert registration.max_model_len == CONTEXT
        assert stop_engine(process) < 5


def test_stops_at_the_models_eos_by_itself() -> None:
    with running_engine("tokenspeed-zmq", "--eos-probability", "1") as (frontend, _, _process):
        add(frontend, "eos", max_tokens=10)
        add(frontend, "ignore", max_tokens=5, ignore_eos=True)
        add(frontend, "min", max_tokens=10, min_tokens=3)
        batches = batches_until_finished(frontend, "eos", "ignore", "min")
    (eos,) = rows_of(batches, "eos")
    assert eos.output_ids[0] in MODEL.eos_ids
    assert eos.finished_reason == "stop"
    ignored = rows_of(batches, "ignore")
    assert [row.completion_tokens for row in ignored] == [1, 2, 3, 4, 5]
    assert [row.finished_reason for row in ignored] == ["", "", "", "", "length"]
    assert all(row.prompt_tokens == 4 for row in ignored)
    minimum = tokens_of(batches, "min")
    assert len(minimum) == 4
    assert not set(MODEL.eos_ids) & set(minimum[:3])


def test_seeds_come_from_the_rid_when_unset() -> None:
    rules = StopRules(max_tokens=8, max_model_len=CONTEXT)
    expected = Generation(MODEL.source, PROMPT, Seeded(zlib.crc32(b"r1")), rules)
    while expected.step().finish is None:
        pass
    engine_flags = ("--eos-probability", "0", "--step-ms", "20")  # 20 ms: all four join a step
    with running_engine("tokenspeed-zmq", *engine_flags) as (frontend, _, _process):
        add(frontend, "r1", max_tokens=8, temperature=1.0)
        add(frontend, "r2", max_tokens=8, temperature=1.0)
        add(frontend, "g1", max_tokens=8, temperature=0.0)
        add(frontend, "g2", max_tokens=8, temperature=0.0)
        batches = batches_until_finished(frontend, "r1", "r2", "g1", "g2")
    assert tokens_of(batches, "r1") == expected.output_ids
    assert tokens_of(batches, "r1") != tokens_of(batches, "r2")
    assert tokens_of(batches, "g1") == tokens_of(batches, "g2")
    assert max(len(rows) for rows in batches) == 4


def test_stop_token_ids_and_non_streaming_cadence() -> None:
    with running_engine("tokenspeed-zmq", "--mode", "echo") as (frontend, _, _process):
        add(frontend, "stop", max_tokens=10, stop_token_ids=(402,), logprobs=0)
        add(frontend, "quiet", stream=False, max_tokens=120)
        batches = batches_until_finished(frontend, "stop", "quiet")
    stop = rows_of(batches, "stop")
    assert tokens_of(batches, "stop") == [400, 401, 402]
    assert stop[-1].finished_reason == "stop"
    assert [row.logprob_token_ids for row in stop] == [(400,), (401,), (402,)]
    quiet = rows_of(batches, "quiet")
    assert [row.completion_tokens for row in quiet] == [1, 50, 100, 120]
    assert [len(row.output_ids) for row in quiet] == [1, 49, 50, 20]
    assert quiet[-1].finished_reason == "length"


def test_invalid_requests_finish_with_abort() -> None:
    with running_engine("tokenspeed-zmq") as (frontend, _, _process):
        request = tokenspeed_zmq.build_request(
            engine_request("n2", SamplingParams(max_tokens=4)),
            engine_request_id="n2",
            max_model_len=CONTEXT,
        )
        params = msgspec.structs.replace(request.sampling_params, n=2)
        request = msgspec.structs.replace(request, sampling_params=params)
        frontend.send(RequestType.ADD, tokenspeed_zmq.encode_request(request))
        (rows,) = batches_until_finished(frontend, "n2")
    assert [(row.rid, row.finished_reason, row.output_ids) for row in rows] == [("n2", "abort", ())]


def test_abort_is_silent_and_shutdown_sends_the_dead_sentinel() -> None:
    with running_engine("tokenspeed-zmq", "--step-ms", "20") as (frontend, _, process):
        add(frontend, "long", max_tokens=1000, ignore_eos=True)
        frontend.receive()
        frontend.abort("long")
        late = []
        while not frontend.quiet_for(0.2):
            late.append(frontend.receive())
        assert len(late) <= 1  # at most the step already under way
        counters = frontend.counters()
        assert counters["tokens_after_abort"] == 0
        assert counters["requests_aborted"] == 1
        assert stop_engine(process) < 5
        assert is_engine_dead(frontend.receive())
