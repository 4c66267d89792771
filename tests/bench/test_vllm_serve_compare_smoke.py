"""`python -m bench vllm_serve_compare` needs a real vLLM and smg (it runs outside `make test`):
here its argument bounds, and that it refuses to start without vLLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.bench_command import REFUSED, command_status

TIMEOUT_S = 60.0


@pytest.mark.parametrize(
    "extra", [["--rounds", "0"], ["--rounds", "11"], ["--num-prompts", "0"], []]
)
async def test_out_of_bounds_arguments_and_a_missing_vllm_are_refused(
    extra: list[str], tmp_path: Path
) -> None:
    argv = ["--vllm-venv", str(tmp_path), "--real-model", str(tmp_path), "--smg-bin", "smg"]
    status = await command_status("vllm_serve_compare", *argv, *extra, timeout_s=TIMEOUT_S)
    assert status == REFUSED
