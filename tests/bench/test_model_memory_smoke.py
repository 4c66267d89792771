"""`python -m bench model_memory` still runs end to end: two small models and a synthetic
vocabulary of 8,000 tokens, one start each, nothing written."""

from __future__ import annotations

from typing import Final

from tests.bench.bench_command import command_output, number, table_rows

TIMEOUT_S: Final = 100.0


async def test_model_memory_runs_at_a_small_size() -> None:
    text = await command_output(
        "model_memory", "--repeats", "1", "--synthetic-vocab", "8000", "--no-write",
        timeout_s=TIMEOUT_S,
    )  # fmt: skip
    rows = [row for row in table_rows(text, "") if row[0].isdigit()]
    assert [row[1] for row in rows][:2] == ["demo", "harmony"]
    assert rows[-1][1] == "synthetic-8k"
    assert number(rows[-1][2]) >= 8000  # the vocabulary it was asked for (and added tokens)
    assert all(number(row[4]) > 0 for row in rows)  # a resident set read for each
