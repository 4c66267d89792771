"""`python -m bench.messages_cost`, scaled down: a Messages stream of the bench's parsed output
is right (thinking, text and a tool_use whose input_json_deltas add up to the arguments) and,
per token, within a loose bound of the same chat stream (the bench measures about 1x; this
checks under 3x, best of three, so a loaded machine does not fail it while an order of
magnitude would), and not under the core pipeline test's floor of 10,000 tokens/s."""

from __future__ import annotations

import json

from bench.core_pipeline import PARSERS, STOP_SETS, long_generation, parsed_generation
from bench.messages_cost import plan_for, stream_bytes
from smg_trio.core.api_dialect import split_named_events
from smg_trio.model import demo_model_path, load_model_dir
from smg_trio.neutral.events import EngineEvent, TokenDelta
from smg_trio.neutral.runtime import Endpoint

TOKENS = 1500
FLOOR_TOKENS_PER_S = 10_000
MAX_RATIO = 3.0


def test_a_messages_stream_is_right_and_costs_about_a_chat_stream() -> None:
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    ids, arguments = parsed_generation(tokenizer, long_generation(tokenizer, STOP_SETS[4]))
    batches: list[list[EngineEvent]] = [[TokenDelta(0, (token_id,))] for token_id in ids]
    best: dict[Endpoint, float] = {}
    for endpoint in (Endpoint.CHAT, Endpoint.MESSAGES):
        plan = plan_for(endpoint, PARSERS)
        for _ in range(3):
            _, ns_per_token = stream_bytes(plan, tokenizer, batches[:TOKENS])
            best[endpoint] = min(best.get(endpoint, float("inf")), ns_per_token)
    assert best[Endpoint.MESSAGES] <= MAX_RATIO * best[Endpoint.CHAT]
    assert 1e9 / best[Endpoint.MESSAGES] >= FLOOR_TOKENS_PER_S
    whole, _ = stream_bytes(plan_for(Endpoint.MESSAGES, PARSERS), tokenizer, batches)
    events = [(name.decode(), json.loads(data)) for name, data in split_named_events(whole)]
    starts = [
        data["content_block"]["type"] for name, data in events if name == "content_block_start"
    ]
    assert starts == ["thinking", "text", "tool_use"]
    fragments = [
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    ]
    assert "".join(fragments) == arguments
    assert len(fragments) > 100  # streamed, not sent whole at the close
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-1][0] == "message_stop"
