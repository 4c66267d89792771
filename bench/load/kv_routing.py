"""I/O. `python -m bench kv_routing`: prefix-cache hit rates of the routing policies over two
engines with KV events on (docs/routing.md §9.5), with one and with two gateway processes.

    python -m bench kv_routing [--engines reference|vllm] [--processes 1 2]
        [--prefixes 16] [--users 24] [--system-words 120] [--kv-blocks 240] [--concurrency 8]
        [--vllm-venv DIR --real-model DIR] [--rounds 3 --first-seed 32]

Each configuration is started fresh (its gateway `smg-trio serve --processes N` and two engines
as subprocesses, every engine cache empty), then sends `prefixes × users` completions
(`max_tokens` 4) in a seeded random order at `--concurrency`: prompt = one of the system prompts
+ a per-user tail. The hit rate is the engines' own counters: a headless EngineCore serves no
/metrics, but it sends vLLM's `prefix_cache_stats` (the deltas behind its `prefix_cache_hits` /
`_queries` counters) with its scheduler stats, which the gateway sums into
`smg_trio_engine_prefix_cache_hits_total` / `_queries_total` (docs/routing.md §9.5); one scrape
after the run, summed over workers and engines (with `--processes 2` the scrape already sums
the processes, each of which heard part of the stats). The per-request count is kept as a
check: the cached prompt tokens each engine reported for each request (vLLM's
`PrefillStats.num_cached_tokens`, in the response's `usage.prompt_tokens_details`) over all
prompt tokens; the report gives the largest gap between the two. `ceiling` is the rate if
every request but the first of each system prompt found its whole system prompt (in whole
blocks) cached.

Policies: round_robin, cache_aware, kv_events, and `oracle`: consistent_hash keyed by the system
prompt, its keys picked so prefixes alternate between the two workers (always the worker that
has the prompt's prefix, and an even split).

The engines' KV capacity (`--kv-blocks`, per engine) is what makes the comparison meaningful: it
must hold about half of the system prompts (plus the churn of user tails) but not all of them,
else every policy ends up with every prefix on both engines and the same hit rate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Final

import httpx
import trio
import trio.lowlevel

from bench.reports.results_page import Recording, recording_parser
from harness.ports import free_port
from smg_trio.core.finalize import WorkerTarget
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.routing.policies import ConsistentHash
from smg_trio.routing.vocabulary import RoutingContext, Worker

POLICIES: Final = ("round_robin", "cache_aware", "kv_events", "oracle")
READY_S: Final = 300.0
SETTLE_S: Final = 5.0
SEED: Final = 32
MAX_TOKENS: Final = 4
VOCABULARY: Final = [
    "river",
    "mountain",
    "lantern",
    "copper",
    "violet",
    "harbor",
    "meadow",
    "signal",
    "anchor",
    "willow",
    "ember",
    "quartz",
    "falcon",
    "orchard",
    "thistle",
    "canyon",
    "marble",
    "cobalt",
    "juniper",
    "saffron",
    "tundra",
    "beacon",
    "cedar",
    "glacier",
]


@dataclass(frozen=True)
class Setup:
    engines: str
    prefixes: int
    users: int
    system_words: int
    kv_blocks: int
    concurrency: int
    step_ms: float
    vllm_venv: Path | None
    model: Path
    block_size: int = 16
    seed: int = SEED


def system_prompt(index: int, words: int) -> str:
    rng = random.Random(index)
    body = " ".join(rng.choice(VOCABULARY) for _ in range(words))
    return f"System prompt number {index}. You are assistant {index}. {body}\n"


def user_tail(prefix: int, user: int) -> str:
    return f"User {user} of desk {prefix} asks: what about item {user * 7 + prefix}?"


def oracle_keys(prefixes: int) -> list[str]:
    """A session key per prefix such that consistent_hash sends prefix i to worker w(i%2 + 1)."""
    ring = ConsistentHash(random.Random(0))
    workers = [
        Worker(name, WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ), None)  # type: ignore[arg-type]
        for name in ("w1", "w2")
    ]
    keys = []
    for prefix in range(prefixes):
        want = workers[prefix % 2].name
        for attempt in range(10_000):
            key = f"prefix-{prefix}-{attempt}"
            if ring.choose(workers, RoutingContext(session_key=key)).name == want:
                keys.append(key)
                break
    return keys


def spec(handshake: int, kv_dir: Path, number: int, policy: str) -> str:
    """The worker spec; its engine's KV-event endpoints only where the policy reads them."""
    events = f"ipc://{kv_dir}/kv{number}.sock"
    query = f"?kv_events={events}&kv_replay={events}r" if policy == "kv_events" else ""
    return f"vllm+zmq://127.0.0.1:{handshake}{query}"


def engine_argv(setup: Setup, handshake: int, kv_dir: Path, number: int) -> list[str]:
    events = f"ipc://{kv_dir}/kv{number}.sock"
    if setup.engines == "reference":
        return [
            *(sys.executable, "-m", "smg_trio.engines", "vllm-zmq"),
            *("--handshake", f"tcp://127.0.0.1:{handshake}", "--model-path", str(setup.model)),
            *("--step-ms", str(setup.step_ms), "--kv-cache-blocks", str(setup.kv_blocks)),
            *("--kv-events-endpoint", events, "--kv-events-replay-endpoint", f"{events}r"),
            *("--log-level", "WARNING"),
        ]
    assert setup.vllm_venv is not None
    kv_config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": events,
        "replay_endpoint": f"{events}r",
    }
    return [
        *(str(setup.vllm_venv / "bin" / "vllm"), "serve", str(setup.model)),
        *("--dtype", "float32", "--max-model-len", "2048", "--block-size", str(setup.block_size)),
        *("--num-gpu-blocks-override", str(setup.kv_blocks), "--enable-prefix-caching"),
        *("--kv-events-config", json.dumps(kv_config)),
        *("--headless", "--data-parallel-size", "1", "--data-parallel-size-local", "1"),
        *("--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(handshake)),
    ]


@contextlib.contextmanager
def launched(argv: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process in its own session; its group is SIGTERMed, then SIGKILLed, by its PID."""
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            list(argv), stdout=out, stderr=out, env=environment, start_new_session=True
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_routable(
    base_url: str, workers: int, processes: Sequence[subprocess.Popen[bytes]]
) -> None:
    """Until the gateway's metrics say every worker is routable (in every process)."""
    deadline = time.monotonic() + READY_S
    with httpx.Client(base_url=base_url, timeout=5) as client:
        while time.monotonic() < deadline:
            if any(process.poll() is not None for process in processes):
                raise RuntimeError("a gateway or engine exited during startup (see the logs)")
            with contextlib.suppress(httpx.TransportError):
                text = client.get("/metrics").text
                routable = [
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith("smg_trio_worker_routable{")
                ]
                if len(routable) >= workers and all(value >= 1 for value in routable):
                    return
            time.sleep(0.5)
    raise RuntimeError(f"{base_url}: workers not routable after {READY_S} s")


@dataclass
class Outcome:
    prompt_tokens: int = 0  # the responses' usage, summed
    cached_tokens: int = 0
    ceiling_tokens: int = 0
    errors: int = 0
    seconds: float = 0.0
    engine_queries: float = 0.0  # the engines' own counters, from the gateway's /metrics
    engine_hits: float = 0.0

    @property
    def rate(self) -> float:
        """The engines' own hit rate, %."""
        return 100 * self.engine_hits / max(1.0, self.engine_queries)

    @property
    def per_request_rate(self) -> float:
        return 100 * self.cached_tokens / max(1, self.prompt_tokens)


def engine_prefix_cache(text: str) -> tuple[float, float]:
    """(queries, hits): the engines' prefix-cache counters in one scrape, summed over every
    worker and engine."""
    sums = {"queries": 0.0, "hits": 0.0}
    for line in text.splitlines():
        for name in sums:
            if line.startswith(f"smg_trio_engine_prefix_cache_{name}_total{{"):
                sums[name] += float(line.rsplit(" ", 1)[1])
    return sums["queries"], sums["hits"]


def read_engine_counters(base_url: str, outcome: Outcome) -> None:
    """The counters once they count every prompt token the responses reported, or as they are
    after SETTLE_S (with several processes a scrape's figures may be MIRROR_PERIOD_S stale)."""
    deadline = time.monotonic() + SETTLE_S
    with httpx.Client(base_url=base_url, timeout=10) as client:
        while True:
            queries, hits = engine_prefix_cache(client.get("/metrics").text)
            outcome.engine_queries, outcome.engine_hits = queries, hits
            if queries >= outcome.prompt_tokens:
                return
            if time.monotonic() >= deadline:
                if queries == 0 and outcome.prompt_tokens:
                    raise RuntimeError(
                        "no engine prefix-cache counters in /metrics: do the engines log stats?"
                    )
                return
            time.sleep(0.1)


def wait_listening(port: int, gateway: subprocess.Popen[bytes]) -> None:
    """Until the gateway's handshake ROUTER accepts TCP connections (it binds them before the
    engines may dial, docs/real-engines.md), within READY_S."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if gateway.poll() is not None:
            raise RuntimeError("the gateway exited during startup (see the logs)")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1.0):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the gateway's handshake port {port} not listening after {READY_S} s")


async def send_workload(
    base_url: str, setup: Setup, policy: str, system_tokens: list[int]
) -> Outcome:
    rng = random.Random(setup.seed)
    order = [(p, u) for p in range(setup.prefixes) for u in range(setup.users)]
    rng.shuffle(order)
    keys = oracle_keys(setup.prefixes) if policy == "oracle" else []
    systems = [system_prompt(p, setup.system_words) for p in range(setup.prefixes)]
    outcome = Outcome()
    seen: set[int] = set()
    limiter = trio.CapacityLimiter(setup.concurrency)
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:

        async def one(prefix: int, user: int, first: bool) -> None:
            async with limiter:
                body = {
                    "model": "served",
                    "prompt": systems[prefix] + user_tail(prefix, user),
                    "max_tokens": MAX_TOKENS,
                    "temperature": 0,
                }
                headers = {"x-session-id": keys[prefix]} if keys else {}
                response = await client.post("/v1/completions", json=body, headers=headers)
            if response.status_code != 200:
                outcome.errors += 1
                return
            usage = response.json()["usage"]
            details = usage.get("prompt_tokens_details") or {}
            outcome.prompt_tokens += usage["prompt_tokens"]
            outcome.cached_tokens += details.get("cached_tokens", 0)
            if not first:
                outcome.ceiling_tokens += (
                    system_tokens[prefix] // setup.block_size * setup.block_size
                )

        async with trio.open_nursery() as nursery:
            for prefix, user in order:
                first = prefix not in seen
                seen.add(prefix)
                nursery.start_soon(one, prefix, user, first)
                await trio.lowlevel.checkpoint()  # keep the submission order the seeded order
    outcome.seconds = time.perf_counter() - started
    return outcome


def system_token_counts(base_url: str, setup: Setup) -> list[int]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        return [
            len(
                client.post(
                    "/tokenize",
                    json={"model": "served", "prompt": system_prompt(p, setup.system_words)},
                ).json()["tokens"]
            )
            for p in range(setup.prefixes)
        ]


def run_one(setup: Setup, policy: str, processes: int, workdir: Path) -> Outcome:
    kv_dir = Path(workdir) / f"{policy}-{processes}-{setup.seed}"
    kv_dir.mkdir(parents=True)
    port = free_port()
    handshakes = [free_port(), free_port()]
    gateway = [
        *(sys.executable, "-m", "smg_trio", "serve", "--model-path", str(setup.model)),
        *("--served-model-name", "served", "--host", "127.0.0.1", "--port", str(port)),
        *("--policy", "consistent_hash" if policy == "oracle" else policy),
        *("--processes", str(processes), "--request-timeout", "300"),
        *(
            flag
            for number, handshake in enumerate(handshakes)
            for flag in ("--worker", spec(handshake, kv_dir, number, policy))
        ),
    ]
    base_url = f"http://127.0.0.1:{port}"
    log = kv_dir / "log.txt"
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(launched(gateway, log))]
        for handshake in handshakes:
            wait_listening(handshake, started[0])
        for number, handshake in enumerate(handshakes):
            argv = engine_argv(setup, handshake, kv_dir, number)
            started.append(stack.enter_context(launched(argv, kv_dir / f"engine{number}.txt")))
        wait_routable(base_url, 2, started)
        counts = system_token_counts(base_url, setup)
        outcome = trio.run(send_workload, base_url, setup, policy, counts)
        read_engine_counters(base_url, outcome)
        return outcome


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("kv_routing", __doc__)
    parser.add_argument("--engines", choices=("reference", "vllm"), default="reference")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--prefixes", type=int, default=16)
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--system-words", type=int, default=120)
    parser.add_argument("--kv-blocks", type=int, default=240, help="KV capacity per engine")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=2.0, help="reference engines' step")
    parser.add_argument(
        "--block-size", type=int, help="real vLLM's (CPU: a multiple of 32; default 32)"
    )
    parser.add_argument("--vllm-venv", type=Path)
    parser.add_argument("--real-model", type=Path)
    parser.add_argument("--rounds", type=int, default=3, help="seeded orders per policy")
    parser.add_argument(
        "--first-seed", type=int, default=SEED, help="the first round's order (then +1 a round)"
    )
    parser.add_argument("--workdir", type=Path, help="keep logs and sockets here (default: temp)")
    args = parser.parse_args(argv)
    if args.engines == "vllm" and (args.vllm_venv is None or args.real_model is None):
        parser.error("--engines vllm needs --vllm-venv and --real-model")
    setup = Setup(
        engines=args.engines,
        prefixes=args.prefixes,
        users=args.users,
        system_words=args.system_words,
        kv_blocks=args.kv_blocks,
        concurrency=args.concurrency,
        step_ms=args.step_ms,
        vllm_venv=args.vllm_venv,
        model=args.real_model or demo_model_path(),
        block_size=16 if args.engines == "reference" else (args.block_size or 32),
    )
    recording = Recording(f"kv_routing_{args.engines}", f"KV-event routing, {args.engines} engines")
    rows = [
        "| processes | policy | hit rate (median) | rounds | of oracle | of ceiling | errors "
        "| per-request rate (median) | largest gap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or stack.enter_context(TemporaryDirectory(prefix="kv-routing-"))
        for processes in args.processes:
            rates: dict[str, list[float]] = {}
            per_request: dict[str, list[float]] = {}
            gaps: dict[str, float] = {}
            ceiling: list[float] = []
            errors = 0
            for policy in args.policies:
                for round_ in range(args.rounds):
                    seeded = dataclasses.replace(setup, seed=args.first_seed + round_)
                    outcome = run_one(seeded, policy, processes, Path(workdir))
                    rate = outcome.rate
                    rates.setdefault(policy, []).append(rate)
                    per_request.setdefault(policy, []).append(outcome.per_request_rate)
                    gap = abs(rate - outcome.per_request_rate)
                    gaps[policy] = max(gaps.get(policy, 0.0), gap)
                    ceiling.append(100 * outcome.ceiling_tokens / max(1, outcome.prompt_tokens))
                    errors += outcome.errors
                    print(
                        f"processes {processes} {policy} seed {seeded.seed}: {rate:.1f}% "
                        f"(engines' counters {outcome.engine_hits:.0f}/"
                        f"{outcome.engine_queries:.0f}; per request "
                        f"{outcome.cached_tokens}/{outcome.prompt_tokens} = "
                        f"{outcome.per_request_rate:.1f}%, gap {gap:.2f} points; "
                        f"{outcome.errors} errors, {outcome.seconds:.1f} s)",
                        flush=True,
                    )
            oracle = statistics.median(rates["oracle"]) if "oracle" in rates else None
            top = statistics.median(ceiling)
            for policy, values in rates.items():
                median = statistics.median(values)
                of_oracle = "—" if not oracle else f"{100 * median / oracle:.0f}%"
                rows.append(
                    f"| {processes} | {policy} | {median:.1f}% | "
                    f"{', '.join(f'{value:.1f}' for value in values)} | {of_oracle} | "
                    f"{100 * median / top:.0f}% (ceiling {top:.1f}%) | {errors} | "
                    f"{statistics.median(per_request[policy]):.1f}% | "
                    f"{gaps[policy]:.2f} points |"
                )
    note = (
        f"\n{args.rounds} rounds per policy (seeded orders {args.first_seed}.."
        f"{args.first_seed + args.rounds - 1}); "
        f"{setup.prefixes} system prompts ({setup.system_words} words) × {setup.users} users, "
        f"{setup.prefixes * setup.users} completions of {MAX_TOKENS} tokens at concurrency "
        f"{setup.concurrency}, seeded order; 2 engines of {setup.kv_blocks} KV blocks "
        f"({setup.block_size} tokens) each. Hit rate: the engines' own prefix-cache counters "
        f"(hits over queries, in tokens) from the gateway's /metrics; per-request rate: the "
        f"cached prompt tokens each response reported over its prompt tokens, and the largest "
        f"gap between the two over the rounds; ceiling: every system prompt but its first use "
        f"cached.\n"
    )
    recording.publish("\n".join(rows) + "\n" + note, write=not args.no_write)
    return 0
