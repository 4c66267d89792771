"""`python -m bench ttft_trace` still runs end to end at a tiny size: every step of one stream's
first token is stamped (a step no request stamped is left out of the table), and each step after
the engine's answer comes after the one before it."""

from __future__ import annotations

from tests.bench.bench_command import command_output, number, table_rows

TIMEOUT_S = 60.0
STEPS = 10  # stamped from the gateway receiving the request to the client reading its first byte


async def test_three_requests_stamp_every_step() -> None:
    text = await command_output(
        "ttft_trace", "--requests", "3", "--step-ms", "0", "--output-tokens", "4",
        timeout_s=TIMEOUT_S,
    )  # fmt: skip
    steps = {row[0].removeprefix("→ "): row for row in table_rows(text, "→")}
    assert len(steps) == STEPS
    assert (next(iter(steps)), list(steps)[-1]) == ("received", "first_byte")
    for stage in ("chunk", "written", "first_byte"):
        assert number(steps[stage][1]) >= 0, steps[stage]
    assert table_rows(text, "sum of p50s")
