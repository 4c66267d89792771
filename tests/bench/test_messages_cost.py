"""`python -m bench messages_cost`, scaled down: the bench first checks that a Messages stream of
its parsed output is right (thinking, text and a tool_use whose input_json_deltas add up to the
arguments: it exits non-zero otherwise), then, per token, Messages is within a loose bound of
the same chat stream (the bench measures about 1x; this checks under 3x, so a loaded machine
does not fail it while an order of magnitude would), and not under the core pipeline test's
floor of 10,000 tokens/s."""

from __future__ import annotations

from tests.bench.bench_command import command_output, number, table_rows

TOKENS = 1500
FLOOR_TOKENS_PER_S = 10_000
MAX_RATIO = 3.0
TIMEOUT_S = 60.0


async def test_a_messages_stream_is_right_and_costs_about_a_chat_stream() -> None:
    text = await command_output(
        "messages_cost", "--tokens", str(TOKENS), "--repetitions", "3", timeout_s=TIMEOUT_S
    )
    [row] = table_rows(text, "thinking + tool call")
    chat, messages = number(row[1]), number(row[2])
    assert messages <= MAX_RATIO * chat
    assert 1e9 / messages >= FLOOR_TOKENS_PER_S
