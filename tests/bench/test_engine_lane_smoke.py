"""`python -m bench engine_lane` runs end to end at a tiny size (vLLM output messages through the
backend's output reader to a few streams' sockets) and refuses out-of-bounds arguments."""

from __future__ import annotations

from typing import Final

import pytest

from tests.bench.bench_command import REFUSED, command_output, command_status, number

TIMEOUT_S: Final = 60.0


async def test_a_token_from_the_engines_bytes_is_measured() -> None:
    text = await command_output(
        "engine_lane", "--tokens", "20", "--streams", "4", "--rounds", "2", timeout_s=TIMEOUT_S
    )
    (line,) = text.splitlines()
    assert line.startswith("4 streams: ")
    assert number(line.split(":")[1].split("ns")[0]) > 0


@pytest.mark.parametrize(
    "extra",
    [["--tokens", "-1"], ["--streams", "0"], ["--streams", "257"], ["--rounds", "21"]],
)
async def test_out_of_bounds_arguments_are_refused(extra: list[str]) -> None:
    assert await command_status("engine_lane", *extra, timeout_s=TIMEOUT_S) == REFUSED
