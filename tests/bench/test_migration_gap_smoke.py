"""`python -m bench migration_gap` still runs end to end at a tiny size: a round with four
streams, engine 0 killed once they all have tokens, its streams moved (their texts equal to the
unkilled ones, else the command fails) and their gaps measured; nothing timed here."""

from __future__ import annotations

from tests.bench.bench_command import command_output, table_rows

TIMEOUT_S = 90.0
STREAMS = 4  # round robin: two on the engine that is killed


async def test_one_round_moves_the_killed_engines_streams_and_measures_them() -> None:
    text = await command_output(
        "migration_gap", "--rounds", "1", "--streams", str(STREAMS), "--step-ms", "5",
        "--no-write", timeout_s=TIMEOUT_S,
    )  # fmt: skip
    [moved] = table_rows(text, "client: last chunk before")
    assert int(moved[1]) == STREAMS // 2
    [resumed] = table_rows(text, "gateway `resume_s`")
    assert int(resumed[1]) == STREAMS // 2
    assert "every moved stream's text equal to its reference" in text
