"""I/O. The streamed token's bar (issue 44): smg-trio and smg, each in front of its own engine,
in interleaved rounds; per round each gateway's output tokens/s, its CPU per 1,000 output tokens
and its TTFT p50, smg-trio's ratios to smg, and the medians of all three over the rounds.

    python -m bench stream_bar --engine vllm --vllm-venv /opt/venvs/vllm
        --real-model /work/shared/models/tiny-llama --smg-bin /opt/venvs/smg/bin/smg
        [--rounds 3] [--num-prompts 256] [--concurrency 64]
    python -m bench stream_bar [--engine reference] [--step-ms 0] [--smg-bin ...]

`--engine vllm` is the bar itself: a headless real vLLM (CPU) EngineCore over ZMQ per run, and
`vllm bench serve` (random 128/128 tokens, `--ignore-eos`, HTTP/1.1 streams) as the load, as
issue 44 measured it. `--engine reference` (the default, step 0) is the same comparison with our
reference vLLM EngineCore in place of vLLM and our own HTTP/1.1 load client in place of
`vllm bench serve` (streamed completions, 128 prompt and 128 output tokens): the gateways' own
costs with no engine competing for the cores, the figures to keep beside the bar's so a
regression on either side is seen. Without `--smg-bin` only smg-trio runs (no ratios).

Each run starts its own engine and gateway, waits until a completion is served, warms up with
a few requests, reads the gateway's CPU from /proc, runs the load, reads the CPU again and stops
both. Within a round the gateways alternate (smg-trio first in odd rounds), so a change in the
machine's load reaches both. On two shared cores single runs range widely: compare medians.

Bounded: at most 10 rounds and 1,024 prompts per run, each run under a time cap; loopback only.
"""

from __future__ import annotations

import re
import statistics
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from bench.load.runner import run_load
from bench.load.targets import (
    EngineLaunch,
    Target,
    reference_engine,
    smg_target,
    smg_trio_target,
    vllm_headless,
)
from bench.load.transports import RequestBodies, open_http_transport
from bench.load.vllm_serve_compare import bench_command, parse_bench_output
from bench.load.workload import (
    FixedConcurrency,
    LengthRange,
    Workload,
    prompt_words,
    request_specs,
)
from bench.reports.results_page import Recording, recording_parser
from harness.ports import LOOPBACK
from smg_trio.model.folder import demo_model_path, load_model_dir

MAX_ROUNDS: Final = 10
MAX_PROMPTS: Final = 1024
RUN_S: Final = 900.0  # one run's load, at most
INPUT_TOKENS: Final = 128
OUTPUT_TOKENS: Final = 128
WARM_UP_REQUESTS: Final = 8
ATTEMPTS: Final = 3  # a run that completed fewer than its prompts is run again, at most twice
MEDIAN_TTFT: Final = re.compile(r"Median TTFT \(ms\):\s+([\d.]+)")
During = Callable[[int], AbstractAsyncContextManager[None]]
"""Something around a run's measured load, given the gateway's pid (a profiler)."""


@dataclass(frozen=True)
class BarRun:
    gateway: str
    output_tok_s: float
    completed: int
    cpu_ms_per_1k: float
    ttft_p50_ms: float


def parse_median_ttft(text: str) -> float:
    """`vllm bench serve`'s median TTFT, ms."""
    found = MEDIAN_TTFT.search(text)
    if found is None:
        raise ValueError(f"no median TTFT in vllm bench serve's output:\n{text[-2000:]}")
    return float(found.group(1))


def round_order(index: int, gateways: Sequence[str]) -> list[str]:
    """The gateways of round `index` (0-based) in running order: alternated per round."""
    order = list(gateways)
    return order[::-1] if index % 2 else order


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.3f}" if theirs > 0 else "-"


def report(rounds: Sequence[dict[str, BarRun]], discarded: Sequence[str] = ()) -> list[str]:
    """A row per round (and the medians): each gateway's tok/s, CPU per 1k output tokens and
    TTFT p50, and smg-trio's ratios to smg where both ran; then the runs discarded (`discarded`:
    one line each, a run that failed some of its requests and was run again)."""
    both = all("smg" in runs for runs in rounds)
    head = "| round | smg-trio tok/s | ms CPU per 1k | TTFT p50 ms |"
    rule = "|---|---:|---:|---:|"
    if both:
        head += " smg tok/s | ms CPU per 1k | TTFT p50 ms | tok/s ratio | CPU ratio | TTFT ratio |"
        rule += "---:|---:|---:|---:|---:|---:|"
    lines = [head, rule]

    def row(label: str, ours: BarRun, theirs: BarRun | None) -> str:
        cells = [
            label,
            f"{ours.output_tok_s:,.0f}",
            f"{ours.cpu_ms_per_1k:.1f}",
            f"{ours.ttft_p50_ms:.1f}",
        ]
        if theirs is not None:
            cells += [
                f"{theirs.output_tok_s:,.0f}",
                f"{theirs.cpu_ms_per_1k:.1f}",
                f"{theirs.ttft_p50_ms:.1f}",
                _ratio(ours.output_tok_s, theirs.output_tok_s),
                _ratio(ours.cpu_ms_per_1k, theirs.cpu_ms_per_1k),
                _ratio(ours.ttft_p50_ms, theirs.ttft_p50_ms),
            ]
        return "| " + " | ".join(cells) + " |"

    for index, runs in enumerate(rounds, 1):
        lines.append(row(str(index), runs["smg-trio"], runs.get("smg") if both else None))

    def median_run(gateway: str) -> BarRun:
        runs = [r[gateway] for r in rounds]
        return BarRun(
            gateway,
            statistics.median(run.output_tok_s for run in runs),
            min(run.completed for run in runs),
            statistics.median(run.cpu_ms_per_1k for run in runs),
            statistics.median(run.ttft_p50_ms for run in runs),
        )

    ours = median_run("smg-trio")
    theirs = median_run("smg") if both else None
    lines.append(row("median", ours, theirs))
    if both:
        ratios = {
            name: statistics.median(
                getattr(r["smg-trio"], name) / getattr(r["smg"], name)
                for r in rounds
                if getattr(r["smg"], name) > 0
            )
            for name in ("output_tok_s", "cpu_ms_per_1k", "ttft_p50_ms")
        }
        lines += [
            "",
            f"smg-trio / smg, median of the rounds' ratios: output tok/s "
            f"{ratios['output_tok_s']:.3f}x, gateway CPU per 1k output tokens "
            f"{ratios['cpu_ms_per_1k']:.2f}x, TTFT p50 {ratios['ttft_p50_ms']:.2f}x",
        ]
    short = [run for runs in rounds for run in runs.values() if run.completed == 0]
    if short:
        lines.append(f"runs that completed nothing: {len(short)}")
    if discarded:
        lines += [
            "",
            "Runs discarded and run again (a fresh engine and gateway), not in the table:",
        ]
        lines += [f"- {line}" for line in discarded]
    return lines


@dataclass(frozen=True)
class BarLoad:
    """How a run loads its gateway: `vllm bench serve` (venv set) or our HTTP/1.1 client."""

    model_path: Path
    prompts: int
    concurrency: int
    vllm_venv: Path | None

    async def run(
        self, name: str, target: Target, words: Sequence[str], during: During | None = None
    ) -> BarRun:
        """Warm up, then the measured load (inside `during(gateway pid)`, if given)."""
        assert target.probe is not None  # a gateway process of its own
        await self._ours(target, words, WARM_UP_REQUESTS, measured=False)
        async with AsyncExitStack() as stack:
            if during is not None:
                await stack.enter_async_context(during(target.probe.pid))
            before = target.probe.cpu_s()
            if self.vllm_venv is None:
                tok_s, completed, ttft_ms = await self._ours(target, words, self.prompts)
            else:
                with trio.fail_after(RUN_S):
                    done = await trio.run_process(
                        bench_command(
                            self.vllm_venv, self.model_path, target, self.prompts, self.concurrency
                        ),
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                    )
                text = done.stdout.decode(errors="replace")
                tok_s, completed = parse_bench_output(text)
                ttft_ms = parse_median_ttft(text)
            cpu_s = target.probe.cpu_s() - before
        tokens = completed * OUTPUT_TOKENS
        per_1k = cpu_s * 1e6 / tokens if tokens else float("nan")
        return BarRun(name, tok_s, completed, per_1k, ttft_ms)

    async def _ours(
        self, target: Target, words: Sequence[str], requests: int, *, measured: bool = True
    ) -> tuple[float, int, float]:
        assert target.port is not None
        workload = Workload(
            FixedConcurrency(min(self.concurrency, requests)),
            requests,
            LengthRange(INPUT_TOKENS, INPUT_TOKENS),
            LengthRange(OUTPUT_TOKENS, OUTPUT_TOKENS),
            time_cap_s=RUN_S,
            seed=requests,
        )
        specs = request_specs(workload, words)
        bodies = RequestBodies(
            specs, model=target.model, endpoint="completions", stops=(), ignore_eos=True
        )
        async with open_http_transport(
            "http1", LOOPBACK, target.port, bodies, connections=1
        ) as transport:
            summary, _ = await run_load(
                transport,
                specs,
                workload,
                target=target.name,
                scenario="stream bar" if measured else "warm-up",
            )
        if summary.errors or summary.cancelled:
            raise RuntimeError(f"{target.name}: {summary.first_error or 'cancelled requests'}")
        return summary.tokens_per_s, summary.completed, summary.ttft.p50_ms or float("nan")


async def run(
    engine: EngineLaunch, load: BarLoad, smg_bin: Path | None, rounds: int
) -> tuple[list[dict[str, BarRun]], list[str]]:
    """The rounds, and a line per discarded run: one that completed fewer than its prompts
    (a gateway failing requests, e.g. smg's 10 s send window when its engine is slow to read,
    measures something else) is run again with a fresh engine and gateway, `ATTEMPTS` times at
    most; the last attempt is kept whatever it completed."""
    model = load_model_dir(load.model_path)
    words = prompt_words(model.tokenizer, model.tokenizer.vocab_size)
    results: list[dict[str, BarRun]] = []
    discarded: list[str] = []
    with tempfile.TemporaryDirectory(prefix="stream-bar-") as logs:
        log_dir = Path(logs)
        kinds: dict[str, Callable[[], AbstractAsyncContextManager[Target]]] = {
            "smg-trio": lambda: smg_trio_target(load.model_path, engine, log_dir),
        }
        if smg_bin is not None:
            kinds["smg"] = lambda: smg_target(smg_bin, load.model_path, engine, log_dir)
        for index in range(rounds):
            runs: dict[str, BarRun] = {}
            for name in round_order(index, list(kinds)):
                for attempt in range(ATTEMPTS):
                    async with kinds[name]() as target:
                        result = await load.run(name, target, words)
                    line = (
                        f"round {index + 1}: {name} {result.output_tok_s:,.0f} tok/s, "
                        f"{result.completed} completed, {result.cpu_ms_per_1k:.1f} ms CPU per "
                        f"1k, TTFT p50 {result.ttft_p50_ms:.1f} ms"
                    )
                    print(line, flush=True)
                    if result.completed >= load.prompts or attempt == ATTEMPTS - 1:
                        break
                    discarded.append(f"{line} (of {load.prompts})")
                runs[name] = result
            results.append(runs)
    return results, discarded


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("stream_bar", __doc__)
    parser.add_argument("--engine", choices=("reference", "vllm"), default="reference")
    parser.add_argument("--step-ms", type=float, default=0.0, help="the reference engine's step")
    parser.add_argument("--vllm-venv", type=Path, help="--engine vllm: vLLM's venv")
    parser.add_argument("--real-model", type=Path, default=demo_model_path())
    parser.add_argument("--smg-bin", type=Path, help="smg; without it only smg-trio runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be in 1..{MAX_ROUNDS}")
    if not 1 <= args.num_prompts <= MAX_PROMPTS or not 1 <= args.concurrency <= MAX_PROMPTS:
        parser.error(f"--num-prompts and --concurrency must be in 1..{MAX_PROMPTS}")
    if not 0 <= args.step_ms <= 1000:
        parser.error("--step-ms must be in 0..1000")
    if args.smg_bin is not None and not args.smg_bin.is_file():
        parser.error(f"no smg at {args.smg_bin}")
    model_path = args.real_model.resolve()
    if args.engine == "vllm":
        if args.vllm_venv is None or not (args.vllm_venv / "bin" / "vllm").is_file():
            parser.error("--engine vllm needs --vllm-venv with bin/vllm")
        engine = vllm_headless(args.vllm_venv, model_path)
        venv = args.vllm_venv
        what = (
            "Real vLLM CPU (headless EngineCore over ZMQ, one per run), `vllm bench serve` "
            f"random {INPUT_TOKENS}/{OUTPUT_TOKENS}, `--ignore-eos`"
        )
    else:
        engine = reference_engine(model_path, args.step_ms)
        venv = None
        what = (
            f"Reference vLLM EngineCore at step {args.step_ms:g} ms (one per run), our HTTP/1.1 "
            f"load client, streamed completions of {INPUT_TOKENS}/{OUTPUT_TOKENS} tokens"
        )
    recording = Recording(f"stream_bar-{args.engine}", f"The streamed token's bar ({args.engine})")
    load = BarLoad(model_path, args.num_prompts, args.concurrency, venv)
    rounds, discarded = trio.run(run, engine, load, args.smg_bin, args.rounds)
    body = (
        f"{what}, {args.num_prompts} prompts at concurrency {args.concurrency}; each gateway "
        "in front of its own engine, alternated within each round. Gateway CPU from /proc "
        "over the measured load (the warm-up excluded).\n\n" + "\n".join(report(rounds, discarded))
    )
    recording.publish(body, write=not args.no_write)
    return 0
