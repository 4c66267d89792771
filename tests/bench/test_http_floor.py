"""`python -m bench floor_compare --quick`: both floor servers (hypercorn's over HTTP/1.1 and
h2c, the raw trio one over HTTP/1.1) and smg-trio serve every requested stream, each server
process is measured, the comparison table prices a token against the hypercorn floor, and the
split attributes smg-trio's token to its own work and what lies below it (where both
sides took a CPU tick: a quick run may be under it)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.bench_command import command_output, table_rows

TIMEOUT_S = 60.0
TARGETS = (
    "smg-trio http1",
    "smg-trio h2c",
    "hypercorn floor http1",
    "hypercorn floor h2c",
    "raw trio floor http1",
)


async def test_every_server_streams_every_request_and_the_floors_price_a_token(
    tmp_path: Path,
) -> None:
    text = await command_output(
        "floor_compare", "--quick", "--step-ms", "0", "--concurrency", "2",
        "--out", str(tmp_path), timeout_s=TIMEOUT_S,
    )  # fmt: skip
    runs = table_rows(text, "one token per chunk, step 0 ms")
    assert [row[1] for row in runs] == list(TARGETS)
    for row in runs:
        assert row[3] == "4 / 0 / 0", row  # --quick: 4 requests of 16 tokens, at 2 streams
        assert row[10] != "—", row  # the server process was measured
    priced = [row for row in table_rows(text, "") if row[0] in TARGETS and row[1] == "c=2"]
    assert [row[0] for row in priced] == list(TARGETS)
    assert priced[2][5] in ("1.00x", "—")  # the floor against itself (— : under a CPU tick)
    # The split's lines need a CPU tick on both sides, which a quick run may not reach.
    assert "Server CPU per output token, split" in text
    for line in text.splitlines():
        if line.startswith("- http1, 2 streams: "):
            assert line.startswith("- http1, 2 streams: smg-trio "), line
            assert " µs = its own work " in line, line
