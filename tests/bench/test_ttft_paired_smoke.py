"""`python -m bench ttft_paired` runs end to end at a tiny size (two gateways from this checkout,
so the paired difference is of a target with its twin; the first token's floors beside one, over
each transport they serve), and refuses out-of-bounds arguments."""

from __future__ import annotations

import pytest

from tests.bench.bench_command import CHECKOUT, REFUSED, command_output, command_status, table_rows

TIMEOUT_S = 120.0
TINY = ("--rounds", "3", "--output-tokens", "4", "--gap-ms", "0")
GATEWAY = f"smg-trio {CHECKOUT.name}"


@pytest.mark.parametrize("transport", ["h2c", "http1"])
async def test_two_gateways_from_one_tree_are_measured_round_by_round(transport: str) -> None:
    trees = ("--tree", str(CHECKOUT), "--tree", str(CHECKOUT))
    text = await command_output(
        "ttft_paired", *trees, *TINY, "--transport", transport, timeout_s=TIMEOUT_S
    )
    rows = table_rows(text, "smg-trio")
    assert [row[0] for row in rows] == [GATEWAY, f"{GATEWAY} #2"]
    assert all(float(row[1]) > 0 for row in rows)
    assert rows[0][3] == "—"
    float(rows[1][3])  # a paired difference


@pytest.mark.parametrize(
    ("transport", "floors"),
    [
        ("h2c", ("hypercorn", "sansio")),
        ("http1", ("hypercorn", "sansio", "raw", "raw-untokenized")),
    ],
)
async def test_floors_are_measured_beside_a_gateway(
    transport: str, floors: tuple[str, ...]
) -> None:
    chosen = [part for floor in floors for part in ("--floor", floor)]
    text = await command_output(
        "ttft_paired", *chosen, *TINY, "--transport", transport, timeout_s=TIMEOUT_S
    )
    rows = table_rows(text, "smg-trio") + table_rows(text, "floor")
    assert [row[0] for row in rows] == [GATEWAY, *(f"floor {server}" for server in floors)]
    assert all(float(row[1]) > 0 for row in rows)
    assert rows[0][3] == "—"
    for row in rows[1:]:
        float(row[3])  # each floor paired with the gateway: a signed difference, not "—"


@pytest.mark.parametrize(
    "argv",
    [
        ["--rounds", "0"],
        ["--rounds", "2001"],
        ["--tree", "/nonexistent"],
        ["--floor", "raw"],  # HTTP/1.1 only, and the default transport is h2c
    ],
)
async def test_out_of_bounds_arguments_are_refused(argv: list[str]) -> None:
    assert await command_status("ttft_paired", *argv, timeout_s=TIMEOUT_S) == REFUSED
