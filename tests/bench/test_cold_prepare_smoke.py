"""`python -m bench cold_prepare` runs at a tiny size and times both works both ways."""

from __future__ import annotations

from tests.bench.bench_command import REFUSED, command_output, command_status, number, table_rows

TIMEOUT_S = 60.0


async def test_both_works_are_timed_hot_and_after_a_gap() -> None:
    text = await command_output(
        "cold_prepare", "--calls", "3", "--gap-ms", "1", "--no-write", timeout_s=TIMEOUT_S
    )
    rows = table_rows(text, "")[2:]  # past the head and its rule
    assert [row[0] for row in rows] == ["prepare_for_path", "tokenizer encode"]
    assert all(number(row[3]) > 0 for row in rows)  # cold / hot, of the unrounded times


async def test_out_of_bounds_arguments_are_refused() -> None:
    assert await command_status("cold_prepare", "--calls", "0", timeout_s=TIMEOUT_S) == REFUSED
