"""`python -m bench ttft_paired` runs end to end at a tiny size (two gateways from this checkout,
so the paired difference is of a target with its twin; the first token's floors beside one),
its report pairs rounds as measured, and each floor streams whole completions over the
transports it serves."""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgspec
import pytest
import trio

from bench import ttft_paired
from bench.h2c_client import open_h2c_connection
from bench.http1_client import Http1Connection
from bench.load_servers import LOOPBACK

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
    with trio.fail_after(120):
        lines = await ttft_paired.run([CHECKOUT], None, 3, 4, 0.0, transport, floors)
    rows = [line.split("|")[1:-1] for line in lines[2:]]
    names = [f"smg-trio {CHECKOUT.name}", *(f"floor {server}" for server in floors)]
    assert [row[0].strip() for row in rows] == names
    assert all(float(row[1]) > 0 for row in rows[1:])


def _events(body: bytes) -> list[bytes]:
    return [event.removeprefix(b"data: ") for event in body.split(b"\n\n") if event]


@pytest.mark.parametrize("server", ["hypercorn", "sansio"])
async def test_a_floor_streams_a_chunk_per_output_then_the_end(server: str) -> None:
    with trio.fail_after(60), tempfile.TemporaryDirectory() as log_dir:
        async with ttft_paired.floor_served(server, Path(log_dir)) as floor:
            request = {"model": floor.model, "prompt": "one two", "max_tokens": 5}
            request["ignore_eos"] = True
            body = msgspec.json.encode(request)
            received = bytearray()
            connection = await Http1Connection.connect(LOOPBACK, floor.port)
            try:
                status = await connection.post(
                    "/v1/completions", body, on_data=lambda _, data: received.extend(data)
                )
            finally:
                await connection.aclose()
            assert status == 200
            http1 = _events(bytes(received))
            async with (
                open_h2c_connection(LOOPBACK, floor.port) as h2c,
                h2c.post("/v1/completions", body) as response,
            ):
                assert await response.status() == 200
                h2 = _events(b"".join([data async for data in response]))
    for events in (http1, h2):
        assert events[-1] == b"[DONE]"
        chunks = [msgspec.json.decode(event) for event in events[:-1]]
        texts = [chunk["choices"][0]["text"] for chunk in chunks]
        assert texts[-1] == ""  # a chunk per output, then the end
        assert 1 <= len(texts) - 1 <= 5
        assert set(texts[:-1]) == {" w"}
        assert chunks[-1]["usage"]["completion_tokens"] == 5


def test_the_report_pairs_each_target_with_the_first_round_by_round() -> None:
    lines = ttft_paired.report({"a": [1.0, 5.0, 2.0], "b": [2.0, 5.5, 2.2]})
    assert lines[2].startswith("| a | 2.000 |")
    assert lines[3].startswith("| b | 2.200 |")
    assert lines[3].endswith("| +0.500 |")  # b - a per round: 1.0, 0.5, 0.2


@pytest.mark.parametrize(
    "argv",
    [
        ["--rounds", "0"],
        ["--rounds", "2001"],
        ["--tree", "/nonexistent"],
        ["--floor", "raw"],  # HTTP/1.1 only, and the default transport is h2c
    ],
)
def test_out_of_bounds_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        ttft_paired.main(argv)
