"""`python -m bench embed_bench` runs end to end at a tiny size against the reference engine
(smg-trio only: a row per batch size and one for the sequential requests), and refuses out-of-bounds arguments. The vLLM side is
run by hand (docs/performance.md §7)."""

from __future__ import annotations

from typing import Final

import pytest

from tests.bench.bench_command import REFUSED, command_output, command_status, number, table_rows

TIMEOUT_S: Final = 90.0


async def test_a_tiny_run_gives_a_row_per_batch_size() -> None:
    text = await command_output(
        "embed_bench", "--no-write", "--batches", "1,4", "--requests", "16", "--concurrency", "2",
        "--sequential", "8", timeout_s=TIMEOUT_S,
    )  # fmt: skip
    rows = table_rows(text, "")[2:]
    assert [(row[0], row[1]) for row in rows] == [
        ("1", "smg-trio"),
        ("1 seq", "smg-trio"),
        ("4", "smg-trio"),
    ]
    for row in rows:
        # 8 lone requests may take no whole CPU tick: their requests per CPU-s can be nan
        cells = row[3:5] if row[0].endswith("seq") else row[3:]
        assert all(number(cell) > 0 for cell in cells)


@pytest.mark.parametrize(
    "extra",
    [
        ["--batches", "0"],
        ["--batches", "129"],
        ["--requests", "0"],
        ["--rounds", "6"],
        ["--sequential", "501"],
    ],
)
async def test_out_of_bounds_arguments_are_refused(extra: list[str]) -> None:
    assert await command_status("embed_bench", "--no-write", *extra, timeout_s=30.0) == REFUSED
