"""`python -m bench stream_profile` runs end to end at a tiny size against a reference engine:
py-spy attached to the gateway for the load, its samples split into buckets whose shares add up
to the event-loop thread's; it refuses out-of-bounds arguments. Skipped without py-spy."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Final

import pytest

from tests.bench.bench_command import REFUSED, command_output, command_status, number, table_rows

TIMEOUT_S: Final = 90.0
TINY: Final = ("--no-write", "--num-prompts", "8", "--concurrency", "2", "--rate", "100")
HAS_PY_SPY: Final = (Path(sys.executable).parent / "py-spy").is_file() or bool(
    shutil.which("py-spy")
)


@pytest.mark.skipif(not HAS_PY_SPY, reason="py-spy is not installed")
async def test_the_load_is_profiled_and_split_into_buckets() -> None:
    text = await command_output("stream_profile", *TINY, timeout_s=TIMEOUT_S)
    buckets = [row for row in table_rows(text, "") if row[-1].replace(".", "").isdigit()]
    assert buckets, text
    shares = [number(row[2]) for row in buckets]
    assert sum(shares) == pytest.approx(100.0, abs=1.0)


@pytest.mark.parametrize(
    "extra", [["--num-prompts", "0"], ["--rate", "5"], ["--engine", "vllm"], ["--step-ms", "-1"]]
)
async def test_out_of_bounds_arguments_are_refused(extra: list[str]) -> None:
    assert await command_status("stream_profile", *TINY, *extra, timeout_s=TIMEOUT_S) == REFUSED
