"""Per-token cost of an Anthropic Messages stream against the same chat stream, through the
pure core: engine events → `ResponseAssembler` → payload bytes, one token per engine message
(the costliest case: one event per token), plain text and with output parsers (qwen3 thinking
then a hermes tool call, as `bench/pipeline/core_pipeline.py`'s parsed row).

Run: `python -m bench messages_cost` (about 5 s). First checks the Messages stream it times is
right (thinking, text, then a tool_use whose input_json_deltas add up to the arguments); prints
ns/token for chat and Messages and their ratio, and writes its section of bench/RESULTS.md
(`--no-write`, or a shorter `--tokens` run: print only). The goal (docs/client-apis.md §2.3): Messages costs no more per token than
chat, since a text delta is one JSON string encode spliced into a prebuilt event.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Sequence
from typing import Final

from bench.reports.results_page import Recording, recording_parser
from harness.generations import PARSERS, STOP_SETS, long_generation, parsed_generation
from smg_trio.core.anthropic_rendering import AnthropicDialect
from smg_trio.core.api_dialect import OPENAI, split_named_events
from smg_trio.core.plan import GeneratePlan, ParserSetup, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams

REPETITIONS: Final = 15


def plan_for(endpoint: Endpoint, parsers: ParserSetup | None) -> GeneratePlan:
    stops = STOP_SETS[4]
    return GeneratePlan(
        request_id="bench",
        endpoint=endpoint,
        model="demo",
        prompt_ids=(1,),
        sampling=SamplingParams(stop=stops),
        stream=True,
        stop_spec=StopSpec(strings=stops),
        parsers=parsers,
    )


def stream_bytes(
    plan: GeneratePlan, tokenizer: TokenizerLike, batches: Sequence[list[EngineEvent]]
) -> tuple[bytes, float]:
    """The whole stream's bytes as its dialect frames them, and ns per token to make them."""
    dialect = AnthropicDialect() if plan.endpoint is Endpoint.MESSAGES else OPENAI
    assembler = ResponseAssembler(plan, tokenizer, created=0)
    on_events, frame = assembler.on_events, dialect.frame
    started = time.perf_counter_ns()
    out = [frame(on_events(batch)) for batch in batches]
    elapsed = time.perf_counter_ns() - started
    out.append(frame(assembler.on_events([ChoiceFinished(0, "stop", None, 1, len(batches))])))
    return b"".join(out), elapsed / len(batches)


def cost(
    endpoint: Endpoint,
    parsers: ParserSetup | None,
    tokenizer: TokenizerLike,
    ids: Sequence[int],
    repetitions: int,
) -> float:
    """Median ns/token over `repetitions` fresh streams of `ids`."""
    plan = plan_for(endpoint, parsers)
    batches: list[list[EngineEvent]] = [[TokenDelta(0, (token_id,))] for token_id in ids]
    costs = []
    for _ in range(repetitions):
        gc.collect()
        costs.append(stream_bytes(plan, tokenizer, batches)[1])
    return statistics.median(costs)


def table(
    repetitions: int = REPETITIONS, tokens: int | None = None
) -> list[tuple[str, float, float]]:
    """(row, chat ns/token, Messages ns/token) for plain text and for parsed output."""
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    plain = long_generation(tokenizer, STOP_SETS[4])
    parsed, _ = parsed_generation(tokenizer, plain)
    rows = []
    for name, ids, parsers in (
        ("plain text", plain, None),
        ("thinking + tool call", parsed, PARSERS),
    ):
        ids = ids[:tokens] if tokens else ids
        chat = cost(Endpoint.CHAT, parsers, tokenizer, ids, repetitions)
        messages = cost(Endpoint.MESSAGES, parsers, tokenizer, ids, repetitions)
        rows.append((name, chat, messages))
    return rows


def check_messages_stream(tokenizer: TokenizerLike) -> None:
    """Refuse to time a wrong stream: the parsed generation through the Messages dialect must
    open a thinking, a text and a tool_use block, stream the call's arguments as more than 100
    input_json_deltas that add up to them, and end on tool_use then message_stop."""
    ids, arguments = parsed_generation(tokenizer, long_generation(tokenizer, STOP_SETS[4]))
    batches: list[list[EngineEvent]] = [[TokenDelta(0, (token_id,))] for token_id in ids]
    whole, _ = stream_bytes(plan_for(Endpoint.MESSAGES, PARSERS), tokenizer, batches)
    events = [(name.decode(), json.loads(data)) for name, data in split_named_events(whole)]
    starts = [
        data["content_block"]["type"] for name, data in events if name == "content_block_start"
    ]
    fragments = [
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    ]
    problems = [
        what
        for what, wrong in (
            (f"blocks {starts}", starts != ["thinking", "text", "tool_use"]),
            ("arguments", "".join(fragments) != arguments),
            (f"{len(fragments)} argument fragments", len(fragments) <= 100),
            ("stop reason", events[-2][1]["delta"]["stop_reason"] != "tool_use"),
            (f"last event {events[-1][0]}", events[-1][0] != "message_stop"),
        )
        if wrong
    ]
    if problems:
        raise SystemExit(f"messages_cost: the Messages stream is wrong: {', '.join(problems)}")


def render(rows: list[tuple[str, float, float]]) -> str:
    lines = [
        "2 shared cores, other engineers running (absolute ns move by ±30 %; the ratio, "
        "measured back to back, moves less).",
        "",
        "One token per engine message, 4 stop strings, streamed, the dialect's framing included;"
        " median of fresh streams over the demo corpus's long generation (core_pipeline's).",
        "",
        "| output | chat ns/token | Messages ns/token | Messages / chat |",
        "|---|---:|---:|---:|",
    ]
    for name, chat, messages in rows:
        lines.append(f"| {name} | {chat:,.0f} | {messages:,.0f} | {messages / chat:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("messages_cost", __doc__)
    parser.add_argument("--repetitions", type=int, default=REPETITIONS)
    parser.add_argument("--tokens", type=int, help="time only the first N tokens (never written)")
    args = parser.parse_args(argv)
    if not 1 <= args.repetitions <= 100 or (args.tokens is not None and args.tokens < 100):
        parser.error("bounded runs only: repetitions in 1..100, tokens >= 100")
    recording = Recording("messages_cost", "Anthropic Messages: per-token cost")
    check_messages_stream(load_model_dir(demo_model_path()).tokenizer)
    rows = table(args.repetitions, args.tokens)
    recording.publish(render(rows), write=not args.no_write and args.tokens is None)
    return 0
