"""The ZMQ throughput bench still runs end to end (engine subprocess, both passes, the profile
and the report), at a size that keeps it from rotting without timing anything."""

from __future__ import annotations

from pathlib import Path

import trio

from bench.zmq_throughput import run_bench
from bench.zmq_throughput_report import HEADING, section, summarize, write_section

STREAMS = 2
MAX_TOKENS = 8


async def test_two_streams_of_eight_tokens_through_both_passes(tmp_path: Path) -> None:
    with trio.fail_after(30):
        report = await run_bench(
            stream_counts=(STREAMS,),
            requests={STREAMS: STREAMS},
            max_tokens=MAX_TOKENS,
            repetitions=1,
            profile_streams=STREAMS,
        )

    by_pass = {m.workload.pipeline: m for m in report.measurements}
    assert sorted(by_pass) == [False, True]
    for measured in report.measurements:
        assert not measured.capped
        assert measured.requests_done == STREAMS
        assert measured.tokens == STREAMS * MAX_TOKENS  # ignore_eos: every request runs to the end
        assert MAX_TOKENS <= measured.messages <= STREAMS * MAX_TOKENS
        assert measured.client_cpu_s > 0
    assert by_pass[False].payload_bytes == 0
    assert by_pass[True].payload_bytes > 0  # the assembler rendered SSE chunks
    assert set(report.profiles) == {"backend", "pipeline"}
    assert "output reader task" in report.profiles["backend"]

    rows = summarize(report.measurements)
    assert [(row.pass_name, row.streams) for row in rows] == [
        ("backend", STREAMS),
        ("pipeline", STREAMS),
    ]
    text = section(report, command="cmd", elapsed_s=1.0, setup="setup", interpretation="notes")
    assert text.startswith(HEADING + "\n")

    results = tmp_path / "RESULTS.md"
    results.write_text("# Bench results\n\n## Pure core\n\nkept\n", encoding="utf-8")
    write_section(text, results)
    results.write_text(results.read_text(encoding="utf-8") + "\n## Later\n\nalso kept\n")
    write_section(text.replace("notes", "newer notes"), results)  # replaces, never appends
    written = results.read_text(encoding="utf-8")
    assert written.startswith("# Bench results\n\n## Pure core\n\nkept\n\n" + HEADING)
    assert written.endswith("newer notes\n\n## Later\n\nalso kept\n")
    assert written.count(HEADING) == 1
