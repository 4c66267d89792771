"""`python -m bench ttft_paired` runs end to end at a tiny size (two gateways from this checkout,
so the paired difference is of a target with its twin), and its report pairs rounds as
measured."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from bench import ttft_paired

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("transport", ["h2c", "http1"])
async def test_two_gateways_from_one_tree_are_measured_round_by_round(transport: str) -> None:
    with trio.fail_after(120):
        lines = await ttft_paired.run([CHECKOUT, CHECKOUT], None, 3, 4, 0.0, transport)
    rows = [line.split("|")[1:-1] for line in lines[2:]]
    name = f"smg-trio {CHECKOUT.name}"
    assert [row[0].strip() for row in rows] == [name, f"{name} #2"]
    assert all(float(row[1]) > 0 for row in rows)
    assert rows[0][3].strip() == "—"
    float(rows[1][3])  # a paired difference


def test_the_report_pairs_each_target_with_the_first_round_by_round() -> None:
    lines = ttft_paired.report({"a": [1.0, 5.0, 2.0], "b": [2.0, 5.5, 2.2]})
    assert lines[2].startswith("| a | 2.000 |")
    assert lines[3].startswith("| b | 2.200 |")
    assert lines[3].endswith("| +0.500 |")  # b - a per round: 1.0, 0.5, 0.2


@pytest.mark.parametrize(
    "argv", [["--rounds", "0"], ["--rounds", "2001"], ["--tree", "/nonexistent"]]
)
def test_out_of_bounds_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        ttft_paired.main(argv)
