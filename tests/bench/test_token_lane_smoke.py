"""`python -m bench token_lane` runs end to end at a tiny size, with and without the fast lane,
and refuses out-of-bounds arguments."""

from __future__ import annotations

from typing import Final

import pytest

from tests.bench.bench_command import REFUSED, command_output, command_status, number

TIMEOUT_S: Final = 60.0


async def test_both_lanes_are_measured_and_compared() -> None:
    text = await command_output(
        "token_lane", "--tokens", "200", "--rounds", "2", timeout_s=TIMEOUT_S
    )
    lines = text.splitlines()
    assert [line.split(":")[0] for line in lines] == ["lane off", "lane on", "lane on / off"]
    assert number(lines[0].split(":")[1]) > 0
    assert number(lines[2].split(":")[1]) > 0


@pytest.mark.parametrize("extra", [["--tokens", "-1"], ["--rounds", "0"], ["--rounds", "21"]])
async def test_out_of_bounds_arguments_are_refused(extra: list[str]) -> None:
    assert await command_status("token_lane", *extra, timeout_s=TIMEOUT_S) == REFUSED
