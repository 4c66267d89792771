"""CPU time per streamed token of the request's per-token path with output parsers: no parsers,
qwen3 + hermes, mistral's v11+ form and gpt-oss's Harmony channels (docs/tools-and-reasoning.md
§8, §10).

Run: `python -m bench parser_cpu` (about 20 s). The same generations as `bench.pipeline.core_pipeline`'s
parsed rows, one token per engine message into a fresh `ResponseAssembler` (streaming chat, no
stops), payloads SSE-framed. Timed with the process's CPU clock, so preemption by other jobs on
a shared machine does not count; the minimum over REPETITIONS runs, in ns/token per
SEGMENT-token span. Prints a table; the goal is >= 100,000 tokens/s (<= 10,000 ns/token) in
every span of every row.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Sequence
from typing import Final

from bench.reports.results_page import Recording, recording_parser
from harness.generations import (
    HARMONY_MODEL,
    HARMONY_PARSERS,
    PARSERS,
    STOP_SETS,
    harmony_generation,
    long_generation,
    parsed_generation,
)
from smg_trio.core.plan import GeneratePlan, ParserSetup, StopSpec
from smg_trio.core.render import sse
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import EngineEvent, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams

REPETITIONS: Final = 15
SEGMENT: Final = 500
GOAL_NS_PER_TOKEN: Final = 10_000  # 100,000 tokens/s


MISTRAL: Final = ParserSetup(tool_parser="mistral", tool_names=frozenset({"write"}))


def mistral_generation(tokenizer: TokenizerLike, ids: Sequence[int]) -> list[int]:
    """The generation as Mistral's v11+ form: its first two thirds content, the last the
    JSON-string argument of `[TOOL_CALLS]write[ARGS]{…}`."""
    cut = 2 * len(ids) // 3
    answer, payload = (
        tokenizer.decode(p, skip_special_tokens=True) for p in (ids[:cut], ids[cut:])
    )
    text = f"{answer}[TOOL_CALLS]write[ARGS]{json.dumps({'text': payload}, ensure_ascii=False)}"
    return tokenizer.encode(text, add_special_tokens=False)


def segment_costs(
    tokenizer: TokenizerLike, ids: Sequence[int], parsers: ParserSetup | None
) -> list[float]:
    """Minimum CPU ns/token of each SEGMENT-token span over REPETITIONS runs."""
    plan = GeneratePlan(
        request_id="bench",
        endpoint=Endpoint.CHAT,
        model="demo",
        prompt_ids=(1,),
        sampling=SamplingParams(),
        stream=True,
        stop_spec=StopSpec(skip_special_tokens=parsers is not HARMONY_PARSERS),
        parsers=parsers,
    )
    batches: list[list[EngineEvent]] = [[TokenDelta(0, (token_id,))] for token_id in ids]
    spans = len(batches) // SEGMENT
    best = [float("inf")] * spans
    clock = time.process_time_ns
    for _ in range(REPETITIONS):
        gc.collect()
        assembler = ResponseAssembler(plan, tokenizer, created=0)
        on_events = assembler.on_events
        for span in range(spans):
            started = clock()
            for batch in batches[span * SEGMENT : (span + 1) * SEGMENT]:
                for payload in on_events(batch):
                    sse(payload)
            best[span] = min(best[span], (clock() - started) / SEGMENT)
    return best


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("parser_cpu", __doc__)
    args = parser.parse_args(argv)
    recording = Recording("parser_cpu", "Output parsers: CPU per token")
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    harmony_tokenizer = load_model_dir(HARMONY_MODEL).tokenizer
    ids = long_generation(tokenizer, STOP_SETS[4])
    parsed_ids, _ = parsed_generation(tokenizer, ids)
    rows = [
        ("no parsers", tokenizer, ids, None),
        ("qwen3 + hermes", tokenizer, parsed_ids, PARSERS),
        ("mistral, v11+ form", tokenizer, mistral_generation(tokenizer, ids), MISTRAL),
        ("Harmony (openai + openai_gptoss)", harmony_tokenizer,
         harmony_generation(harmony_tokenizer, ids), HARMONY_PARSERS),
    ]  # fmt: skip
    lines = []
    worst = 0.0
    for name, model_tokenizer, row_ids, parsers in rows:
        costs = segment_costs(model_tokenizer, row_ids, parsers)
        worst = max(worst, *costs) if parsers is not None else worst
        lines.append(f"| {name} | " + " | ".join(f"{c:,.0f}" for c in costs) + " |")
    spans = len(ids) // SEGMENT
    header = " | ".join(f"{i * SEGMENT}-{(i + 1) * SEGMENT}" for i in range(spans))
    verdict = "met" if worst <= GOAL_NS_PER_TOKEN else "NOT met"
    body = [
        "CPU ns per token (process CPU clock, the minimum over repetitions) per span of tokens.",
        "",
        f"| path | {header} |",
        "|---|" + "---:|" * spans,
        *lines,
        "",
        f"Dearest span with parsers: {worst:,.0f} ns/token = {1e9 / worst:,.0f} tokens/s "
        f"(goal >= 100,000 tokens/s: {verdict}).",
    ]
    recording.publish("\n".join(body), write=not args.no_write)
    return 0
