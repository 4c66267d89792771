"""I/O. `vllm bench serve` through smg-trio and through smg, each in front of a real headless vLLM
EngineCore over ZMQ, interleaved, with each gateway's CPU (issue 15's throughput figure).

    python -m bench vllm_serve_compare --vllm-venv /opt/venvs/vllm
        --real-model ../shared/models/tiny-llama --smg-bin /opt/venvs/smg/bin/smg
        [--rounds 2] [--num-prompts 256] [--max-concurrency 64]

Each run starts its own headless vLLM (CPU) and gateway, waits until a completion is served,
reads the gateway's CPU from /proc, runs `vllm bench serve` (random 128/128 tokens,
`--ignore-eos`, HTTP/1.1 streams, as real-engines.md's anchors), reads the CPU again and
stops both. The gateways alternate ABBA within each round (smg-trio first in odd rounds), so
a change in the machine's load reaches both. Printed: every run's output tokens/s and ms of
gateway CPU per 1,000 output tokens, then the medians and smg-trio's ratios to smg's. On two
shared cores the engine, the gateway and the load tool compete for the CPU, so single runs
range widely (bench/RESULTS.md); compare medians of several rounds.

Bounded: at most 10 rounds and 1,024 prompts per run, loopback only.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from bench.load.targets import Target, smg_target, smg_trio_target, vllm_headless
from harness.ports import LOOPBACK

MAX_ROUNDS: Final = 10
MAX_PROMPTS: Final = 1024
BENCH_S: Final = 900.0  # one `vllm bench serve` run, at most
INPUT_TOKENS: Final = 128  # per prompt (`--random-input-len`)
OUTPUT_TOKENS: Final = 128  # per request, every one (`--random-output-len`, `--ignore-eos`)
THROUGHPUT: Final = re.compile(r"Output token throughput \(tok/s\):\s+([\d.]+)")
SUCCESSFUL: Final = re.compile(r"Successful requests:\s+(\d+)")


@dataclass(frozen=True)
class RunResult:
    gateway: str
    output_tok_s: float
    completed: int
    cpu_ms_per_1k: float


def parse_bench_output(text: str) -> tuple[float, int]:
    """(output tokens/s, successful requests) from `vllm bench serve`'s summary."""
    throughput = THROUGHPUT.search(text)
    successful = SUCCESSFUL.search(text)
    if throughput is None or successful is None:
        raise ValueError(f"no summary in vllm bench serve's output:\n{text[-2000:]}")
    return float(throughput.group(1)), int(successful.group(1))


def bench_command(
    venv: Path, model_path: Path, target: Target, prompts: int, concurrency: int
) -> list[str]:
    return [
        str(venv / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        f"http://{LOOPBACK}:{target.port}",
        "--endpoint",
        "/v1/completions",
        "--model",
        target.model,
        "--tokenizer",
        str(model_path),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(INPUT_TOKENS),
        "--random-output-len",
        str(OUTPUT_TOKENS),
        "--ignore-eos",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(concurrency),
    ]


async def one_run(
    name: str,
    target_cm: AbstractAsyncContextManager[Target],
    venv: Path,
    model_path: Path,
    prompts: int,
    concurrency: int,
) -> RunResult:
    async with target_cm as target:
        assert target.probe is not None  # a gateway process of its own
        before = target.probe.cpu_s()
        with trio.fail_after(BENCH_S):
            done = await trio.run_process(
                bench_command(venv, model_path, target, prompts, concurrency),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        cpu_s = target.probe.cpu_s() - before
    tok_s, completed = parse_bench_output(done.stdout.decode(errors="replace"))
    tokens = completed * OUTPUT_TOKENS
    return RunResult(name, tok_s, completed, cpu_s * 1e6 / tokens if tokens else float("nan"))


def report(results: list[RunResult]) -> list[str]:
    lines = ["| gateway | output tok/s (runs, in order) | median | ms CPU per 1k (runs) | median |"]
    lines.append("|---|---|---:|---|---:|")
    medians: dict[str, tuple[float, float]] = {}
    for name in dict.fromkeys(result.gateway for result in results):
        runs = [result for result in results if result.gateway == name]
        tok = statistics.median(run.output_tok_s for run in runs)
        cpu = statistics.median(run.cpu_ms_per_1k for run in runs)
        medians[name] = (tok, cpu)
        lines.append(
            f"| {name} | {' / '.join(f'{run.output_tok_s:,.0f}' for run in runs)} | {tok:,.0f} "
            f"| {' / '.join(f'{run.cpu_ms_per_1k:.1f}' for run in runs)} | {cpu:.1f} |"
        )
    if "smg-trio" in medians and "smg" in medians:
        (ours_tok, ours_cpu), (smg_tok, smg_cpu) = medians["smg-trio"], medians["smg"]
        lines.append("")
        lines.append(
            f"smg-trio / smg: output tok/s {ours_tok / smg_tok:.3f}x, "
            f"CPU per 1k output tokens {ours_cpu / smg_cpu:.2f}x"
        )
    incomplete = [result for result in results if result.completed == 0]
    if incomplete:
        lines.append(f"runs that completed nothing: {len(incomplete)}")
    return lines


async def run(
    venv: Path, model_path: Path, smg_bin: Path, rounds: int, prompts: int, concurrency: int
) -> list[str]:
    engine = vllm_headless(venv, model_path)
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="vllm-serve-compare-") as logs:
        log_dir = Path(logs)
        kinds: dict[str, Callable[[], AbstractAsyncContextManager[Target]]] = {
            "smg-trio": lambda: smg_trio_target(model_path, engine, log_dir),
            "smg": lambda: smg_target(smg_bin, model_path, engine, log_dir),
        }
        for index in range(rounds):
            order = ["smg-trio", "smg", "smg", "smg-trio"]
            if index % 2:
                order.reverse()
            for name in order:
                result = await one_run(name, kinds[name](), venv, model_path, prompts, concurrency)
                print(
                    f"round {index + 1}: {name} {result.output_tok_s:,.0f} tok/s, "
                    f"{result.completed} completed, {result.cpu_ms_per_1k:.1f} ms CPU per 1k",
                    flush=True,
                )
                results.append(result)
    return report(results)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench vllm_serve_compare", description=__doc__)
    parser.add_argument("--vllm-venv", type=Path, required=True)
    parser.add_argument("--real-model", type=Path, required=True)
    parser.add_argument("--smg-bin", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--max-concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be in 1..{MAX_ROUNDS}")
    if not 1 <= args.num_prompts <= MAX_PROMPTS or not 1 <= args.max_concurrency <= MAX_PROMPTS:
        parser.error(f"--num-prompts and --max-concurrency must be in 1..{MAX_PROMPTS}")
    if not (args.vllm_venv / "bin" / "vllm").is_file():
        parser.error(f"no vllm in {args.vllm_venv}/bin")
    lines = trio.run(
        run,
        args.vllm_venv,
        args.real_model.resolve(),
        args.smg_bin,
        args.rounds,
        args.num_prompts,
        args.max_concurrency,
    )
    print("\n".join(lines))
    return 0
