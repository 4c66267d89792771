"""Per-token cost of an Anthropic Messages stream against the same chat stream, through the
pure core: engine events → `ResponseAssembler` → payload bytes, one token per engine message
(the costliest case: one event per token), plain text and with output parsers (qwen3 thinking
then a hermes tool call, as `bench/core_pipeline.py`'s parsed row).

Run: `python -m bench.messages_cost` (about 5 s). Prints ns/token for chat and Messages and
their ratio; `--write` puts the table under "## Anthropic Messages: per-token cost" in
bench/RESULTS.md. The goal (docs/client-apis.md §2.3): Messages costs no more per token than
chat, since a text delta is one JSON string encode spliced into a prebuilt event.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
from collections.abc import Sequence
from typing import Final

from bench.core_pipeline import PARSERS, RESULTS, STOP_SETS, long_generation, parsed_generation
from smg_trio.core.anthropic_rendering import AnthropicDialect
from smg_trio.core.api_dialect import OPENAI
from smg_trio.core.plan import GeneratePlan, ParserSetup, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model import demo_model_path, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams

REPETITIONS: Final = 15
HEADING: Final = "## Anthropic Messages: per-token cost"
COMMAND: Final = "python -m bench.messages_cost --write"


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


def render(rows: list[tuple[str, float, float]], seconds: float) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `{COMMAND}` ({seconds:.0f} s). Machine: {platform.machine()}, CPython "
        f"{platform.python_version()}; 2 shared cores, other engineers running (absolute ns "
        "move by ±30 %; the ratio, measured back to back, moves less).",
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


def write_section(section: str) -> None:
    text = RESULTS.read_text()
    if HEADING in text:
        start = text.index(HEADING)
        end = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()
    started = time.monotonic()
    rows = table()
    section = render(rows, time.monotonic() - started)
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
