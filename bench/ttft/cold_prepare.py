"""Pure work, timed. What one request's prepare costs hot and cold (issue 15 item 3).

    python -m bench cold_prepare [--calls 300] [--gap-ms 5]

At one stream the gateway sits idle between requests, and its first-token steps then run on
cold caches: `python -m bench ttft_trace` reads them 2-3x slower than the same code in a loop.
This shows it on one step that does no I/O: `prepare_for_path` for the trace's body (a streamed
completion with a 128-word prompt, decoded, validated and tokenized) is timed back to back, and
again after sleeping `--gap-ms` before each call; the tokenizer's call alone the same two ways.
Prints the medians in microseconds. Bounded: at most 2,000 calls per row.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Final

from bench.reports.results_page import Recording, recording_parser
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.request.endpoints import prepare_for_path

MAX_CALLS: Final = 2000
WARM_UP: Final = 50
BODY: Final = json.dumps(
    {
        "model": "demo_model",
        "prompt": "one two three four five six seven eight " * 16,
        "max_tokens": 16,
        "ignore_eos": True,
        "stream": True,
    }
).encode()


def median_us(work: Callable[[], object], calls: int, gap_s: float) -> float:
    for _ in range(WARM_UP):
        work()
    times = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def rows(calls: int, gap_ms: float) -> list[tuple[str, float, float]]:
    """(work, hot µs, after the gap µs) for the prepare and for its tokenizer call."""
    model = load_model_dir(demo_model_path()).prompt_model()
    text = "one two three four five six seven eight " * 16

    def prepare() -> object:
        return prepare_for_path("/v1/completions", BODY, model, lambda _: None, "req-1", [])

    def tokenize() -> object:
        return model.tokenizer.encode(text, add_special_tokens=False)

    gap_s = gap_ms / 1000
    return [
        (name, median_us(work, calls, 0.0), median_us(work, calls, gap_s))
        for name, work in (("prepare_for_path", prepare), ("tokenizer encode", tokenize))
    ]


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("cold_prepare", __doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args(argv)
    if not 1 <= args.calls <= MAX_CALLS or not 0 <= args.gap_ms <= 100:
        parser.error(f"--calls is 1..{MAX_CALLS} and --gap-ms 0..100")
    recording = Recording("cold_prepare", "A request's prepare, hot and cold")
    lines = [
        f"Medians of {args.calls} calls per row.",
        "",
        f"| work | back to back µs | after {args.gap_ms:g} ms idle µs | ratio |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {hot:.0f} | {cold:.0f} | {cold / hot:.1f} |"
            for name, hot, cold in rows(args.calls, args.gap_ms)
        ),
    ]
    recording.publish("\n".join(lines), write=not args.no_write)
    return 0
