"""`python -m bench zmq_throughput --quick` still runs end to end (engine subprocess, both
passes, the profile and the report), at a size that keeps it from rotting without timing
anything."""

from __future__ import annotations

from tests.bench.bench_command import command_output, number, table_rows

STREAMS = 2
TIMEOUT_S = 60.0


async def test_two_streams_of_eight_tokens_through_both_passes() -> None:
    text = await command_output("zmq_throughput", "--quick", "--no-write", timeout_s=TIMEOUT_S)
    rows = table_rows(text, "backend") + table_rows(text, "pipeline")
    assert [(row[0], int(row[1])) for row in rows] == [("backend", STREAMS), ("pipeline", STREAMS)]
    for row in rows:
        assert int(row[2]) == STREAMS  # every request done, none capped
        assert 1.0 <= number(row[7]) <= STREAMS  # tokens per engine message
        assert number(row[4]) > 0  # client CPU per token
    assert text.startswith("<!-- bench: zmq_throughput -->\n## ZMQ backend throughput\n")
    for name in ("backend", "pipeline"):
        assert f"cProfile (wall clock) of one {name} run:" in text
    assert "output reader task" in text
