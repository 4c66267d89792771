"""The load generator still works end to end, run as `python -m bench ...` with tiny sizes and
nothing timed: `run` streams over every HTTP transport from a live gateway (in-process `serve`
plus the reference engine in replay mode) with usage counted, and a stop string ends streams
mid-way; `scenarios --quick` measures scenario (a)'s targets (direct, h2c, WebSocket), writes
its results, and `render` puts its section on a results page, replacing it by its marker; with
the reference engines standing in for vLLM, scenario (b) reaches the gateway over ZMQ and gRPC,
its `--real-zmq-http1-only` mode runs `serve --processes 2` and nothing else, and scenario (c)'s
stop-cost tally reads the counted engine. Only loopback targets are accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.bench_command import command_output, command_status, table_rows
from tests.e2e.live_server import STOP, live_server

STREAMS = 2
TOKENS = 6
LONG = 64  # enough for the replayed text to reach STOP
TIMEOUT_S = 60.0
RUNS_TABLE_CELLS = 12  # bench/load/report.py's runs_table
STOP_TABLE_CELLS = 10  # and its stop_cost_table
TINY = ("--quick", "--no-write", "--concurrency", str(STREAMS), "--step-ms", "0")


def completed_rows(text: str, scenario: str) -> dict[str, list[str]]:
    """Target -> cells of the runs table's rows of `scenario`, each checked complete."""
    rows = {row[1]: row for row in table_rows(text, scenario) if len(row) == RUNS_TABLE_CELLS}
    for row in rows.values():
        done, errors, cancelled = (int(part) for part in row[3].split(" / "))
        assert (errors, cancelled) == (0, 0), row
        assert done >= STREAMS, row
    return rows


async def test_run_streams_over_every_transport_and_a_stop_ends_streams_early(
    tmp_path: Path,
) -> None:
    async with live_server(tmp_path, api_key=None, step_ms=0.0) as server:
        url = f"http://127.0.0.1:{server.port}"
        load = (
            "--concurrency",
            str(STREAMS),
            "--requests",
            str(STREAMS),
            "--prompt-tokens",
            "8-16",
        )
        for kind in ("h2c", "http1", "ws"):
            out = tmp_path / f"{kind}.json"
            text = await command_output(
                "run", "--url", url, "--transport", kind, *load, "--output-tokens", str(TOKENS),
                "--json", str(out), timeout_s=TIMEOUT_S,
            )  # fmt: skip
            [summary] = json.loads(out.read_text())
            assert (summary["completed"], summary["errors"], summary["cancelled"]) == (2, 0, 0)
            assert summary["output_tokens"] == STREAMS * TOKENS, kind
            assert summary["ttft"]["p50_ms"] is not None
            assert summary["server"] is None  # no --pid: nothing measured
            assert "The gateway's view of c=2" in text  # its /metrics beside ours
        out = tmp_path / "stopped.json"
        await command_output(
            "run", "--url", url, *load, "--output-tokens", str(LONG), "--stop", STOP,
            "--json", str(out), timeout_s=TIMEOUT_S,
        )  # fmt: skip
    [stopped] = json.loads(out.read_text())
    assert stopped["completed"] == STREAMS
    assert stopped["output_tokens"] < STREAMS * LONG  # STOP is at token 34 of 64


async def test_scenario_a_writes_its_results_and_render_replaces_its_section(
    tmp_path: Path,
) -> None:
    out = tmp_path / "results"
    text = await command_output(
        "scenarios", "--scenarios", "a", *TINY, "--out", str(out), timeout_s=TIMEOUT_S
    )
    rows = completed_rows(text, "ref engine, step 0 ms")
    assert set(rows) == {"direct", "smg-trio h2c", "smg-trio ws"}
    # The gateway process was measured: its CPU seconds and peak RSS (tokens per CPU-second is
    # "—" when a run this tiny costs less than one 10 ms clock tick).
    cpu_s, rss_mb = rows["smg-trio h2c"][8], rows["smg-trio h2c"][10]
    assert float(cpu_s) >= 0
    assert float(rss_mb) > 0
    assert f"| ref engine, step 0 ms | {STREAMS} |" in text  # through-the-gateway vs direct
    stored = json.loads((out / "load-latest.json").read_text())
    assert {run["target"] for run in stored["runs"]} == set(rows)
    page = tmp_path / "RESULTS.md"
    page.write_text("# Bench results\n\n<!-- bench: kept -->\n## Kept\n\nkept\n")
    for _ in range(2):  # the second replaces the first, never appends
        await command_status(
            "render", str(out / "load-latest.json"), "--results", str(page), timeout_s=TIMEOUT_S
        )
    written = page.read_text()
    assert written.startswith("# Bench results\n\n<!-- bench: kept -->\n## Kept\n\nkept\n\n")
    assert written.count("<!-- bench: scenarios-a -->\n## Gateway load (make bench)\n") == 1
    assert "| ref engine, step 0 ms | smg-trio h2c | c=2 |" in written


async def test_reference_engines_stand_in_for_vllm_and_the_stop_cost_reads_the_tally(
    tmp_path: Path,
) -> None:
    text = await command_output(
        "scenarios", "--scenarios", "b,c", "--reference-engines", *TINY,
        "--real-concurrency", str(STREAMS), "--out", str(tmp_path), timeout_s=TIMEOUT_S,
    )  # fmt: skip
    rows = completed_rows(text, "vLLM CPU")
    ours = ("http1", "h2c", "ws")
    assert list(rows) == [
        "direct",
        *(f"smg-trio {kind}" for kind in ours),
        *(f"smg-trio gRPC {kind}" for kind in ours),
    ]
    assert "<!-- bench: scenarios-b -->\n## Real vLLM anchors\n" in text
    assert "| **smg-trio gRPC h2c** (this run) |" in text
    assert "- smg-trio gRPC h2c / smg gRPC h2c output tok/s at 64 streams: not measured" in text
    [cost] = [row for row in table_rows(text, "smg-trio") if len(row) == STOP_TABLE_CELLS]
    assert cost[1] == str(STREAMS)
    assert cost[3] == str(STREAMS)  # the client saw every stop
    assert cost[-1] == f"aborted {STREAMS}"  # our gateway aborts at the stop


async def test_scenario_b_zmq_http1_only_runs_smg_trio_with_two_processes_and_nothing_else(
    tmp_path: Path,
) -> None:
    text = await command_output(
        "scenarios", "--scenarios", "b", "--reference-engines", "--real-zmq-http1-only",
        "--processes", "2", *TINY, "--real-concurrency", str(STREAMS), "--out", str(tmp_path),
        timeout_s=TIMEOUT_S,
    )  # fmt: skip
    rows = completed_rows(text, "vLLM CPU")
    assert list(rows) == ["smg-trio x2 http1"]
    assert float(rows["smg-trio x2 http1"][10]) > 0  # the supervisor's peak RSS
    assert "Note: smg rows skipped: no --smg-bin" in text


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:8000", "http://example.com:80", "https://127.0.0.1:1"]
)
async def test_only_loopback_targets_are_accepted(url: str) -> None:
    assert await command_status("run", "--url", url, timeout_s=TIMEOUT_S) != 0
