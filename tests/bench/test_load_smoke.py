"""The load generator's core still works end to end against a live gateway (in-process `serve`
plus the reference engine in replay mode): every transport completes 2 streams of a few tokens
with usage counted, a stop string ends streams mid-way, the stop-cost tally reads the counted
engine, and the report renders. Scenario (b)'s ZMQ-over-HTTP/1.1-only mode runs `serve
--processes 2` and nothing else. The gRPC target shape (an engine server started first, then a
gateway dialing it) runs with our reference vLLM gRPC engine standing in for vLLM, and its rows
reach the anchors section. Sizes are tiny and nothing is timed."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest
import trio

from bench.__main__ import check_loopback
from bench.load_output import replace_section
from bench.load_report import RunReport, runs_table, to_json
from bench.load_runner import ProcessProbe, run_load
from bench.load_scenarios import LoadPlan, measure, real_vllm
from bench.load_sections import ANCHORS_HEADING, GATEWAY_HEADING, REAL_SCENARIO, sections
from bench.load_servers import LOOPBACK
from bench.load_stats import RequestRecord, RunSummary
from bench.load_targets import (
    ServerEngineLaunch,
    engine_server,
    reference_engine,
    smg_trio_grpc_target,
)
from bench.load_transports import (
    DirectTransport,
    RequestBodies,
    Transport,
    TransportName,
    open_http_transport,
)
from bench.load_workload import (
    FixedConcurrency,
    LengthRange,
    Workload,
    prompt_words,
    request_specs,
)
from bench.stop_cost import stop_costs
from smg_trio.engines.launch import EngineCommand
from smg_trio.model import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Runtime
from tests.e2e.live_server import MODEL, STOP, LiveServer, live_server

STREAMS = 2
TOKENS = 6
LONG = 64  # enough for the replayed text to reach STOP
SCENARIO = "ref engine, step 0 ms"  # as scenario (a) names its rows, so the report finds them


@pytest.fixture(scope="module")
def words() -> tuple[str, ...]:
    model = load_model_dir(demo_model_path())
    return prompt_words(model.tokenizer, model.tokenizer.vocab_size)


def workload(max_tokens: int, stops: Sequence[str] = ()) -> Workload:
    return Workload(
        FixedConcurrency(STREAMS),
        STREAMS,
        LengthRange(8, 16),
        LengthRange(max_tokens, max_tokens),
        time_cap_s=10.0,
        stops=tuple(stops),
    )


async def run_over(
    server: LiveServer, kind: TransportName, load: Workload, words: Sequence[str]
) -> tuple[RunSummary, list[RequestRecord]]:
    specs = request_specs(load, words)
    probe = ProcessProbe(os.getpid())  # the gateway runs in this process here
    if kind == "direct":
        direct: Transport = DirectTransport(
            server.backend,
            load_model_dir(demo_model_path()),
            specs,
            stops=load.stops,
            ignore_eos=True,
        )
        return await run_load(direct, specs, load, target="direct", scenario=SCENARIO)
    bodies = RequestBodies(
        specs, model=MODEL, endpoint=load.endpoint, stops=load.stops, ignore_eos=True
    )
    async with open_http_transport(
        kind, "127.0.0.1", server.port, bodies, connections=1
    ) as transport:
        return await run_load(
            transport, specs, load, target=f"smg-trio {kind}", scenario=SCENARIO, probe=probe
        )


async def test_every_transport_streams_and_a_stop_ends_streams_early(
    tmp_path: Path, words: tuple[str, ...]
) -> None:
    summaries = []
    with trio.fail_after(30):
        async with live_server(tmp_path, api_key=None, step_ms=0.0) as server:
            for kind in ("h2c", "http1", "ws", "direct"):
                summary, _ = await run_over(server, kind, workload(TOKENS), words)
                assert (summary.completed, summary.errors, summary.cancelled) == (STREAMS, 0, 0)
                assert summary.output_tokens == STREAMS * TOKENS, kind
                assert summary.ttft.p50_ms is not None
                summaries.append(summary)
            stopped, records = await run_over(server, "h2c", workload(LONG, [STOP]), words)
    assert stopped.completed == STREAMS
    assert [r.finish for r in records] == ["stop"] * STREAMS  # STOP is at token 34 of 64
    measured = summaries[0].server
    assert measured is not None
    assert measured.cpu_s >= 0
    assert measured.peak_rss_mb > 0

    report = RunReport(
        command="cmd",
        started="2026-01-01T00:00:00+00:00",
        elapsed_s=1.0,
        machine="machine",
        load_average=("0", "0"),
        prompt_tokens="8-16",
        output_tokens=str(TOKENS),
        runs=tuple(summaries),
    )
    stored = json.loads(json.dumps(to_json(report)))
    assert stored["runs"][0]["target"] == "smg-trio h2c"
    assert msgspec.convert(stored, RunReport) == report  # what `python -m bench render` reads
    [(heading, text)] = sections(report)
    assert heading == GATEWAY_HEADING
    assert runs_table(summaries) in text
    assert f"| {SCENARIO} | {STREAMS} |" in text  # the through-the-gateway vs direct ratios
    results = tmp_path / "RESULTS.md"
    results.write_text("# Bench results\n\n## Kept\n\nkept\n\n## Mine\n\nold\n\n## Also kept\n")
    replace_section("## Mine", "## Mine\n\nnew\n", results)
    assert results.read_text() == (
        "# Bench results\n\n## Kept\n\nkept\n\n## Mine\n\nnew\n\n## Also kept\n"
    )


async def test_the_stop_cost_tally_reads_the_counted_engine(
    tmp_path: Path, words: tuple[str, ...]
) -> None:
    with trio.fail_after(30):
        costs = await stop_costs(
            demo_model_path(), None, words, tmp_path, None, stream_counts=(STREAMS,)
        )
    [cost] = costs
    assert cost.target == "smg-trio"
    assert cost.stopped == STREAMS
    assert cost.ends == ("aborted",) * STREAMS  # our gateway aborts at the stop
    assert all(after >= 0 for after in cost.after_stop)


def reference_grpc_engine(port: int) -> list[str]:
    return EngineCommand(
        "vllm-grpc", host=LOOPBACK, port=port, model_path=demo_model_path(), step_ms=0
    ).argv()


async def test_a_gateway_dials_an_engine_server_and_its_rows_reach_the_anchors(
    tmp_path: Path, words: tuple[str, ...]
) -> None:
    launch = ServerEngineLaunch("ref engine gRPC", Runtime.VLLM, reference_grpc_engine, 20.0)
    plan = LoadPlan((STREAMS,), LengthRange(8, 16), LengthRange(TOKENS, TOKENS), 1, STREAMS, 10.0)
    with trio.fail_after(60):
        async with (
            engine_server(launch, tmp_path) as engine,
            smg_trio_grpc_target(demo_model_path(), engine, tmp_path) as target,
        ):
            [ours] = await measure([(target, "h2c")], plan, REAL_SCENARIO, words, None)
    assert ours.target == "smg-trio gRPC h2c"
    assert (ours.completed, ours.errors, ours.cancelled) == (STREAMS, 0, 0)
    assert ours.output_tokens == STREAMS * TOKENS
    assert ours.server is not None  # the gateway subprocess was measured

    at_64 = dataclasses.replace(ours, streams=64)  # the goal lines read 64 streams
    theirs = dataclasses.replace(at_64, target="smg gRPC h2c", tokens_per_s=at_64.tokens_per_s / 2)
    report = RunReport(
        command="cmd",
        started="2026-01-01T00:00:00+00:00",
        elapsed_s=1.0,
        machine="machine",
        load_average=("0", "0"),
        prompt_tokens="8-16",
        output_tokens=str(TOKENS),
        runs=(ours, at_64, theirs),
    )
    [(heading, text)] = sections(report)
    assert heading == ANCHORS_HEADING
    assert f"| **smg-trio gRPC h2c** (this run) | — | — | {at_64.tokens_per_s:,.0f} |" in text
    assert "- smg-trio gRPC h2c / smg gRPC h2c output tok/s at 64 streams: 2.00x" in text
    assert "- smg-trio gRPC http1 / smg gRPC http1 output tok/s at 64 streams: not measured" in text


async def test_scenario_b_zmq_http1_only_runs_smg_trio_with_two_processes_and_nothing_else(
    tmp_path: Path, words: tuple[str, ...]
) -> None:
    """`scenarios --scenarios b --processes 2 --real-zmq-http1-only`, with the reference engine
    dialing the gateway in vLLM's place: one row, `serve --processes 2` over HTTP/1.1, measured;
    no direct, gRPC or vLLM HTTP rows."""
    plan = LoadPlan((STREAMS,), LengthRange(8, 16), LengthRange(TOKENS, TOKENS), 1, STREAMS, 10.0)
    engine = reference_engine(demo_model_path(), 0.0)
    with trio.fail_after(60):
        rows, notes = await real_vllm(
            tmp_path / "no-venv",
            None,
            demo_model_path(),
            plan,
            words,
            tmp_path,
            None,
            processes=(2,),
            zmq_http1_only=True,
            engine=engine,
        )
    assert [row.target for row in rows] == ["smg-trio x2 http1"]
    [row] = rows
    assert (row.completed, row.errors, row.cancelled) == (STREAMS, 0, 0)
    assert row.output_tokens == STREAMS * TOKENS
    assert row.server is not None  # the supervisor was measured (CPU: too little to assert on)
    assert row.server.peak_rss_mb > 0
    assert notes == ["smg rows skipped: no --smg-bin"]


def test_only_loopback_targets_are_accepted() -> None:
    assert check_loopback("http://127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert check_loopback("http://localhost:8000") == ("127.0.0.1", 8000)
    for url in ("http://10.0.0.1:8000", "http://example.com:80", "https://127.0.0.1:1"):
        with pytest.raises(SystemExit):
            check_loopback(url)
