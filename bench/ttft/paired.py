"""I/O. Time to first token at one stream, the gateways interleaved request by request.

    python -m bench ttft_paired [--rounds 400] [--tree DIR ...] [--smg-bin PATH]
        [--floor hypercorn|sansio|raw|raw-untokenized ...] [--output-tokens 16] [--gap-ms 2]
        [--transport h2c|http1]

Scenario (a)'s 1-stream rows run one gateway after the other, 128 back-to-back requests each,
so a change in the machine's load lands on one row and not the next, and a gateway never waits
while another works (bench/RESULTS.md, "Issue 15, sixth session": the rows' gap to smg moved
by ±1 ms between runs). Here every target serves one request of each round, in a shuffled
order, with the same prompt (fresh random words per round), so the targets share the machine's
moments (the prompt: 128 one-token words of the demo model, in the load bench's body). The
paired difference of two targets' TTFTs in the same round is the figure; its median holds
within ~0.05 ms between runs where each target's own p50 moves by 0.5 ms.

Targets: `smg-trio serve` from each `--tree` (a checkout; default this one), started with the
tree as its working directory so that `python -m smg_trio` runs that tree's code: an A/B of
two commits needs no reinstall. Given `--smg-bin`, the Rust smg too. Given `--floor`, the
first token's floor (`bench.floors.ttft_floor`: a relay that only decodes, tokenizes, sends the ADD and
writes constant chunks; the `raw` ones serve HTTP/1.1 only). Each target has a reference vLLM
EngineCore of its own at step 0 (the gateway's cost, not the engine's) and one
connection (the load bench's client: h2c, or HTTP/1.1 keep-alive with `--transport http1`).
TTFT: the request's send to the first bytes of its body. Bounded:
at most `--rounds` rounds (≤ 2,000), `--gap-ms` idle between requests, loopback only.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from bench.floors.ttft_floor import SERVERS as FLOOR_SERVERS
from bench.load.h2c_client import H2cConnection, open_h2c_connection
from bench.load.http1_client import Http1Connection
from bench.load.servers import (
    python_module,
    smg_trio_command,
    started_process,
    wait_serving,
)
from bench.load.targets import reference_engine, smg_target
from bench.load.workload import RequestSpec, prompt_words, request_body
from harness.ports import LOOPBACK, free_port
from smg_trio.model.folder import demo_model_path, load_model_dir

CHECKOUT: Final = Path(__file__).resolve().parents[2]
MAX_ROUNDS: Final = 2000
WARM_UP_ROUNDS: Final = 20
PROMPT_WORDS: Final = 128
READY_S: Final = 60.0
ROUND_CAP_S: Final = 30.0  # one round of every target, at most (a hang, not a speed bound)


@dataclass(frozen=True)
class Served:
    name: str
    model: str
    port: int


@asynccontextmanager
async def smg_trio_served(tree: Path, name: str, log_dir: Path) -> AsyncIterator[Served]:
    """`smg-trio serve` from `tree`'s code, with its own reference EngineCore at step 0."""
    port, handshake = free_port(), free_port()
    serve = smg_trio_command(port, f"vllm+zmq://{LOOPBACK}:{handshake}", demo_model_path())
    engine = reference_engine(demo_model_path(), 0.0).command(handshake)
    async with (
        started_process(serve, log_dir / f"{name}.log", cwd=tree) as gateway,
        started_process(engine, log_dir / f"{name}-engine.log", cwd=tree),
    ):
        model = await wait_serving(gateway, port, timeout_s=READY_S)
        yield Served(name, model, port)


@asynccontextmanager
async def floor_served(server: str, log_dir: Path) -> AsyncIterator[Served]:
    """`bench.floors.ttft_floor` from this checkout, with its own reference EngineCore at step 0."""
    port, handshake = free_port(), free_port()
    relay = python_module(
        "bench",
        "ttft_floor",
        "--server",
        server,
        "--port",
        str(port),
        "--handshake",
        str(handshake),
    )
    engine = reference_engine(demo_model_path(), 0.0).command(handshake)
    name = f"floor {server}"
    async with (
        started_process(relay, log_dir / f"{name}.log", cwd=CHECKOUT) as served,
        started_process(engine, log_dir / f"{name}-engine.log", cwd=CHECKOUT),
    ):
        model = await wait_serving(served, port, timeout_s=READY_S)
        yield Served(name, model, port)


async def first_token_ms(connection: H2cConnection | Http1Connection, body: bytes) -> float:
    """One streamed completion, read to its end; ms from its send to its body's first bytes."""
    sent = time.perf_counter()
    first: float | None = None
    if isinstance(connection, Http1Connection):
        firsts: list[float] = []

        def on_data(_: int, __: bytes) -> None:
            if not firsts:
                firsts.append(time.perf_counter())

        status = await connection.post("/v1/completions", body, on_data=on_data)
        first = firsts[0] if firsts else None
    else:
        async with connection.post("/v1/completions", body) as response:
            status = await response.status()
            async for _ in response:
                first = first or time.perf_counter()
    if status != 200 or first is None:
        raise RuntimeError(f"a completion answered {status} with no body")
    return (first - sent) * 1e3


async def open_connection(
    stack: AsyncExitStack, port: int, transport: str
) -> H2cConnection | Http1Connection:
    if transport == "http1":
        connection = await Http1Connection.connect(LOOPBACK, port)
        stack.push_async_callback(connection.aclose)
        return connection
    return await stack.enter_async_context(open_h2c_connection(LOOPBACK, port))


async def measure(
    targets: Sequence[Served],
    rounds: int,
    output_tokens: int,
    gap_s: float,
    transport: str = "h2c",
    seed: int = 1,
) -> dict[str, list[float]]:
    """Each target's TTFT per round (after `WARM_UP_ROUNDS` unrecorded ones), in round order."""
    model = load_model_dir(demo_model_path())
    words = prompt_words(model.tokenizer, model.tokenizer.vocab_size)
    rng = random.Random(seed)
    ttft: dict[str, list[float]] = {target.name: [] for target in targets}
    async with AsyncExitStack() as stack:
        connections = [await open_connection(stack, target.port, transport) for target in targets]
        for index in range(WARM_UP_ROUNDS + rounds):
            prompt = "".join(rng.choices(words, k=PROMPT_WORDS))
            spec = RequestSpec(index, prompt, PROMPT_WORDS, output_tokens)
            order = list(range(len(targets)))
            rng.shuffle(order)
            with trio.fail_after(ROUND_CAP_S):
                for k in order:
                    body = json.dumps(
                        request_body(
                            spec,
                            model=targets[k].model,
                            endpoint="completions",
                            stops=(),
                            ignore_eos=True,
                        )
                    ).encode()
                    took = await first_token_ms(connections[k], body)
                    if index >= WARM_UP_ROUNDS:
                        ttft[targets[k].name].append(took)
                    await trio.sleep(gap_s)
    return ttft


def report(ttft: dict[str, list[float]]) -> list[str]:
    """Markdown: each target's p50 / p90, then each later target paired with the first."""
    lines = ["| target | TTFT p50 ms | p90 ms | paired with the first: p50 of the difference, ms |"]
    lines.append("|---|---:|---:|---:|")
    names = list(ttft)
    for name in names:
        values = ttft[name]
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
        paired = "—"
        if name != names[0]:
            differences = [a - b for a, b in zip(values, ttft[names[0]], strict=True)]
            paired = f"{statistics.median(differences):+.3f}"
        lines.append(f"| {name} | {statistics.median(values):.3f} | {p90:.3f} | {paired} |")
    return lines


async def run(
    trees: Sequence[Path],
    smg_bin: Path | None,
    rounds: int,
    tokens: int,
    gap_s: float,
    transport: str = "h2c",
    floors: Sequence[str] = (),
) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="ttft-paired-") as log_dir:
        async with AsyncExitStack() as stack:
            targets: list[Served] = []
            for index, tree in enumerate(trees, 1):
                name = f"smg-trio {tree.name}"
                if any(target.name == name for target in targets):
                    name += f" #{index}"  # the same tree twice: its spread against itself
                targets.append(
                    await stack.enter_async_context(smg_trio_served(tree, name, Path(log_dir)))
                )
            if smg_bin is not None:
                engine = reference_engine(demo_model_path(), 0.0)
                smg = await stack.enter_async_context(
                    smg_target(smg_bin, demo_model_path(), engine, Path(log_dir))
                )
                assert smg.port is not None  # a gateway of its own, not in-process
                targets.append(Served("smg", smg.model, smg.port))
            targets += [
                await stack.enter_async_context(floor_served(server, Path(log_dir)))
                for server in floors
            ]
            ttft = await measure(targets, rounds, tokens, gap_s, transport)
    return report(ttft)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ttft_paired", description=__doc__)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument("--smg-bin", type=Path)
    parser.add_argument(
        "--floor", choices=FLOOR_SERVERS, action="append", default=[], help="repeatable"
    )
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--transport", choices=("h2c", "http1"), default="h2c")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be in 1..{MAX_ROUNDS}")
    if not 1 <= args.output_tokens <= 1024 or not 0 <= args.gap_ms <= 1000:
        parser.error("--output-tokens must be in 1..1024 and --gap-ms in 0..1000")
    if {"raw", "raw-untokenized"} & set(args.floor) and args.transport != "http1":
        parser.error("--floor raw serves HTTP/1.1 only: add --transport http1")
    trees = [tree.resolve() for tree in args.tree or [Path.cwd()]]
    for tree in trees:
        if not (tree / "smg_trio" / "__init__.py").is_file():
            parser.error(f"--tree {tree} is not a smg-trio checkout")
    lines = trio.run(
        run,
        trees,
        args.smg_bin,
        args.rounds,
        args.output_tokens,
        args.gap_ms / 1e3,
        args.transport,
        args.floor,
    )
    print("\n".join(lines))
    return 0
