"""`python -m bench stream_bar` (issue 44's bar) runs end to end at a tiny size against
reference engines, one per run, with a row per round and the medians; it refuses out-of-bounds
arguments and a vLLM run without vLLM. The real-vLLM/smg mode is opt-in (`-m real_engine`, with
SMG_TRIO_VLLM_VENV, SMG_TRIO_VLLM_MODEL and SMG_TRIO_SMG_BIN set; docs/real-engines.md):

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
    SMG_TRIO_SMG_BIN=/opt/venvs/smg/bin/smg \\
        .venv/bin/pytest tests/bench/test_stream_bar_smoke.py -m real_engine -s
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import pytest

from tests.bench.bench_command import REFUSED, command_output, command_status, number, table_rows

TIMEOUT_S: Final = 90.0
TINY: Final = ("--no-write", "--num-prompts", "4", "--concurrency", "2")
VENV: Final = os.environ.get("SMG_TRIO_VLLM_VENV", "")
MODEL: Final = os.environ.get("SMG_TRIO_VLLM_MODEL", "")
SMG_BIN: Final = os.environ.get("SMG_TRIO_SMG_BIN", "")


async def test_rounds_against_reference_engines_give_a_row_each_and_the_medians() -> None:
    text = await command_output("stream_bar", *TINY, "--rounds", "2", timeout_s=TIMEOUT_S)
    rows = table_rows(text, "")[2:]
    assert [row[0] for row in rows] == ["1", "2", "median"]
    for row in rows:
        assert len(row) == 4  # no smg: smg-trio's figures only, no ratios
        tok_s, cpu_per_1k, ttft_ms = (number(cell) for cell in row[1:])
        assert tok_s > 0
        assert cpu_per_1k > 0
        assert ttft_ms > 0


@pytest.mark.parametrize(
    "extra",
    [
        ["--rounds", "0"],
        ["--rounds", "11"],
        ["--num-prompts", "0"],
        ["--concurrency", "1025"],
        ["--engine", "vllm"],  # no --vllm-venv
        ["--smg-bin", "/nonexistent/smg"],
    ],
)
async def test_out_of_bounds_arguments_and_a_missing_vllm_are_refused(extra: list[str]) -> None:
    assert await command_status("stream_bar", *TINY, *extra, timeout_s=TIMEOUT_S) == REFUSED


@pytest.mark.real_engine
@pytest.mark.skipif(
    not (VENV and MODEL and SMG_BIN),
    reason="set SMG_TRIO_VLLM_VENV, SMG_TRIO_VLLM_MODEL and SMG_TRIO_SMG_BIN",
)
@pytest.mark.timeout(1800)
async def test_the_bar_against_real_vllm_compares_smg_trio_with_smg() -> None:
    argv = ("--engine", "vllm", "--vllm-venv", VENV, "--real-model", str(Path(MODEL)))
    text = await command_output(
        "stream_bar",
        *argv,
        "--smg-bin",
        SMG_BIN,
        "--rounds",
        "1",
        "--no-write",
        "--num-prompts",
        "16",
        "--concurrency",
        "8",
        timeout_s=1700.0,
    )
    rows = table_rows(text, "median")
    assert len(rows) == 1
    assert len(rows[0]) == 10
    assert all(number(cell) > 0 for cell in rows[0][1:])
