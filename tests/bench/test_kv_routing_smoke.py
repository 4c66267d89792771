"""`python -m bench kv_routing` and `kv_index_memory` still run end to end at a tiny size: two
reference engines with KV events under a `--processes 2` gateway (kv_events, and the oracle it
is measured against; the hit rate from the engines' counters in /metrics, equal to the
per-request count), and an index of a few thousand blocks; nothing timed here."""

from __future__ import annotations

from tests.bench.bench_command import command_output

TIMEOUT_S = 110.0


async def test_kv_routing_runs_with_two_gateway_processes() -> None:
    text = await command_output(
        "kv_routing", "--processes", "2", "--policies", "kv_events", "oracle", "--rounds", "1",
        "--prefixes", "4", "--users", "3", "--system-words", "40", "--kv-blocks", "200",
        "--no-write", timeout_s=TIMEOUT_S,
    )  # fmt: skip
    rows = [line for line in text.splitlines() if line.startswith("| 2 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["kv_events", "oracle"]
    for row in rows:
        hit_rate = float(row.split("|")[3].strip().rstrip("%"))
        assert hit_rate > 0, row  # repeats of a system prompt hit the engine's cache
        assert row.split("|")[7].strip() == "0", row  # no errors
        # The engines' counters (summed over both processes) and the per-request count agree:
        # the reference engine counts each admitted request's prompt and hits exactly once.
        assert row.split("|")[9].strip() == "0.00 points", row


async def test_kv_index_memory_runs_at_a_small_size() -> None:
    text = await command_output(
        "kv_index_memory", "--blocks", "20000", "--workers", "2", "--no-write",
        timeout_s=TIMEOUT_S,
    )  # fmt: skip
    assert "| 20,000 | 2 |" in text  # the entries it was asked for, over 2 workers
