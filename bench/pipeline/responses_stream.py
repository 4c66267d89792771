"""I/O. `python -m bench responses_stream`: what OpenAI Responses costs beside chat
(docs/client-apis.md §3), on this machine, in this process, loopback only.

1. Per streamed token: one long generation (bench/pipeline/core_pipeline.py's ~5,200 tokens), one engine
   message per token, through the `ResponseAssembler` and the request's dialect to the bytes
   an HTTP stream sends: chat (OpenAI dialect) against Responses (its renderer, its items, its
   numbering dialect); plain text, and with output parsers (qwen3 reasoning, a hermes call).
2. Per stored response: `put` then `get` of a ~4 KB response in the SQLite store, each through
   the thread pool (`responses/store/pool.py`), from trio.

Bounded: `--repetitions` (default 15) generations per variant (the best one is reported: on a
shared machine the rest measure the neighbours), `--stores` (default 200) round trips (medians);
about 20 s in all. Prints a Markdown table (bench/RESULTS.md, "Responses API").
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import msgspec
import trio

from bench.reports.results_page import Recording, recording_parser
from harness.generations import PARSERS, long_generation, parsed_generation
from smg_trio.core.api_dialect import OPENAI, ApiDialect
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import ChoiceFinished, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.responses.store.stores import StoredResponse, open_response_store
from smg_trio.wire.responses_objects import ResponseSettings

RESPONSE_BYTES: Final = 4096


def plan_for(endpoint: Endpoint, parsed: bool) -> GeneratePlan:
    return GeneratePlan(
        request_id="bench",
        endpoint=endpoint,
        model="demo",
        prompt_ids=(1, 2, 3),
        sampling=SamplingParams(),
        stream=True,
        stop_spec=StopSpec(),
        parsers=PARSERS if parsed else None,
        responses=ResponseSettings() if endpoint is Endpoint.RESPONSES else None,
    )


def one_stream(
    plan: GeneratePlan,
    dialect: Callable[[], ApiDialect],
    tokenizer: TokenizerLike,
    ids: Sequence[int],
) -> int:
    """ns for one whole stream: every token's bytes, the finish and the end."""
    start = time.perf_counter_ns()
    assembler = ResponseAssembler(plan, tokenizer, created=0)
    framing = dialect()
    for token_id in ids:
        framing.frame(assembler.on_events([TokenDelta(0, (token_id,))]))
    framing.frame(assembler.on_events([ChoiceFinished(0, "stop", None, 3, len(ids))]))
    framing.end(assembler.stream_end().payloads)
    return time.perf_counter_ns() - start


def per_token(repetitions: int) -> list[tuple[str, float]]:
    tokenizer = load_model_dir(demo_model_path()).prompt_model().tokenizer
    plain = long_generation(tokenizer, ())
    parsed, _ = parsed_generation(tokenizer, plain)
    rows = []
    for name, endpoint, dialect, with_parsers in (
        ("chat, plain text", Endpoint.CHAT, lambda: OPENAI, False),
        ("Responses, plain text", Endpoint.RESPONSES, ResponsesDialect, False),
        ("chat, reasoning + tool call", Endpoint.CHAT, lambda: OPENAI, True),
        ("Responses, reasoning + tool call", Endpoint.RESPONSES, ResponsesDialect, True),
    ):
        ids = parsed if with_parsers else plain
        plan = plan_for(endpoint, with_parsers)
        times = [one_stream(plan, dialect, tokenizer, ids) for _ in range(repetitions)]
        # The best run: on a shared machine the others measure the neighbours.
        rows.append((name, min(times) / len(ids)))
    return rows


async def store_round_trips(count: int) -> tuple[float, float]:
    """Median µs of a put and of a get, each off the loop through the store's pool."""
    response = msgspec.json.encode({"text": "x" * RESPONSE_BYTES})
    puts, gets = [], []
    with tempfile.TemporaryDirectory() as folder:
        async with open_response_store(f"sqlite:///{Path(folder) / 'bench.sqlite3'}") as store:
            for index in range(count):
                stored = StoredResponse(f"resp_{index}", 0, response, b"[]")
                start = time.perf_counter_ns()
                await store.put(stored)
                middle = time.perf_counter_ns()
                assert await store.get(stored.id) == stored
                puts.append(middle - start)
                gets.append(time.perf_counter_ns() - middle)
    return statistics.median(puts) / 1000, statistics.median(gets) / 1000


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("responses_stream", __doc__)
    parser.add_argument("--repetitions", type=int, default=15)
    parser.add_argument("--stores", type=int, default=200)
    args = parser.parse_args(argv)
    recording = Recording("responses_stream", "Responses API")
    rows = per_token(max(1, min(args.repetitions, 100)))
    put_us, get_us = trio.run(store_round_trips, max(1, min(args.stores, 5000)))
    lines = [
        "| per streamed token (assembler + renderer + dialect), best run | ns/token | tokens/s |",
        "|---|---:|---:|",
        *(f"| {name} | {ns:,.0f} | {1e9 / ns:,.0f} |" for name, ns in rows),
        "",
        f"SQLite store, {RESPONSE_BYTES} B response: put {put_us:,.0f} µs, get {get_us:,.0f} µs",
    ]
    recording.publish("\n".join(lines), write=not args.no_write)
    return 0
