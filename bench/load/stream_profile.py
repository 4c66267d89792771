"""I/O. Where smg-trio's CPU per streamed token goes (issue 44's profile split): the bar's load
(`stream_bar`) through smg-trio alone, with `py-spy record --native` attached to the gateway
for the measured load, each sample put in one bucket and the buckets' shares turned into µs per
output token with the gateway CPU /proc counted over the same load.

    python -m bench stream_profile [--engine reference|vllm] [--vllm-venv ...]
        [--real-model ...] [--num-prompts 256] [--concurrency 64] [--rate 200]

Needs py-spy (`pip install py-spy` in the venv running the gateway; attaching needs ptrace of
our own child, which Linux allows unless yama forbids it). A sample is bucketed by its deepest
frame that a rule knows, from the leaf up (`bucket_of`): GC, a client socket's system call, the
ZMQ side (receive, decode, demultiplex, the per-request mailboxes and inline dispatch), the
response assembler (detokenize, stops, render), chunk framing and hand-off (the sink, the
hand-off, the connection's direct writes), hypercorn/h11/h2, tokenize, per-request work (the
request layer, prepare, routing, admission), observability, trio's scheduling; the rest is
CPython and native code called from the top of a task. py-spy pauses the gateway for every
sample, so its CPU per token here is above the bar's: the shares are what to read.

Bounded: at most 1,024 prompts, the load under `stream_bar`'s time cap; loopback only.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from bench.load.stream_bar import MAX_PROMPTS, OUTPUT_TOKENS, BarLoad, BarRun
from bench.load.targets import EngineLaunch, reference_engine, smg_trio_target, vllm_headless
from bench.load.workload import prompt_words
from bench.reports.results_page import Recording, recording_parser
from smg_trio.model.folder import demo_model_path, load_model_dir

SPY_START_S: Final = 1.0  # py-spy attaches before the load starts
SPY_STOP_S: Final = 30.0  # writing its samples after SIGINT, at most
MAIN_THREAD: Final = "MainThread"
PYTHON_FRAME: Final = re.compile(r"^(?P<function>.*) \((?P<file>[^():]+\.py|<[^>]+>):\d+\)$")

# (bucket, patterns of a frame's text): the first rule matching the deepest frame that any rule
# matches decides (`bucket_of`).
GC: Final = "GC"
SOCKET: Final = "client socket system calls (write, read)"
ADD: Final = "ADD (open the engine stream, encode, send)"
ZMQ: Final = "ZMQ receive, decode, demux, dispatch"
ASSEMBLER: Final = "response assembler (detokenize, stops, render)"
FRAMING: Final = "chunk framing and hand-off"
HYPERCORN: Final = "hypercorn, h11, h2 (request handling)"
TOKENIZE: Final = "tokenize"
REQUEST: Final = "per request (gateway, prepare, routing, admission)"
OBSERVABILITY: Final = "observability (record, metrics, log)"
TRIO: Final = "trio scheduling"
OTHER: Final = "CPython and native, at a task's top"
RULES: Final = (
    (GC, ("gc_collect", "(gcmodule")),
    (
        ADD,
        (
            "Socket.send",
            "smg_trio/backends/zmq_input_writer",
            "StreamStarter.start",
            "ZmqBackend.open_stream",
            "encode_request",
            "build_request",
        ),
    ),
    (
        ZMQ,
        (
            "zmq/",
            "libzmq",
            "smg_trio/backends/",
            "smg_trio/wire/vllm_zmq",
            "smg_trio/wire/zmq_",
            "smg_trio/neutral/events.py",
            "msgspec",
        ),
    ),
    (
        ASSEMBLER,
        ("smg_trio/core/response_assembler", "smg_trio/core/detokenize", "smg_trio/core/stops"),
    ),
    (ASSEMBLER, ("smg_trio/core/render", "smg_trio/core/logprobs", "smg_trio/core/stream_end")),
    (
        FRAMING,
        (
            "smg_trio/frontends/sse.py",
            "smg_trio/handoff.py",
            "smg_trio/request/nursery.py",
            "smg_trio/frontends/http/connection",
            "smg_trio/frontends/http/hypercorn_seam.py",
            "smg_trio/frontends/http/h2_protocol.py",
            "smg_trio/core/api_dialect.py",
            "smg_trio/sink.py",
        ),
    ),
    (OBSERVABILITY, ("smg_trio/observability/",)),
    (HYPERCORN, ("hypercorn/", "h11/", "h2/", "hpack/", "smg_trio/frontends/")),
    (
        REQUEST,
        (
            "smg_trio/request/",
            "smg_trio/core/",
            "smg_trio/routing/",
            "smg_trio/tenancy/",
            "smg_trio/neutral/",
            "smg_trio/wire/",
            "smg_trio/engines/",
            "smg_trio/model/",
        ),
    ),
    (TRIO, ("trio/", "outcome/", "sniffio/")),
)
SOCKET_CALLERS: Final = ("hypercorn_seam.py", "trio/_socket.py", "trio/_highlevel_socket.py")
WAITS: Final = ("EpollIOManager.get_events (", "Condition.wait (", "Event.wait (", "Queue.get (")
"""Python functions that block in a system call: a sample with a native leaf under one of them
is a thread waiting (py-spy's --native does not always tell), not CPU, and is left out."""


def waiting(frames: Sequence[str]) -> bool:
    """The sample is of a thread blocked in a wait (`WAITS`), not running."""
    if not frames or PYTHON_FRAME.match(frames[-1]):
        return False
    python = [frame for frame in frames if PYTHON_FRAME.match(frame)]
    return bool(python) and python[-1].startswith(WAITS)


def bucket_of(frames: Sequence[str]) -> str:
    """The bucket of one sample, its frames from the root to the leaf (py-spy's raw order)."""
    python = [frame for frame in frames if PYTHON_FRAME.match(frame)]
    leaf_native = bool(frames) and not PYTHON_FRAME.match(frames[-1])
    if any("gc_collect" in frame for frame in frames[-3:]):
        return GC
    if leaf_native and python and any(caller in python[-1] for caller in SOCKET_CALLERS):
        return SOCKET
    for frame in reversed(frames):
        if "tokenizer" in frame:
            return TOKENIZE if any("prepare" in f for f in python) else ASSEMBLER
        for bucket, patterns in RULES:
            if any(pattern in frame for pattern in patterns):
                return bucket
    return OTHER


def python_leaf(frames: Sequence[str]) -> str:
    """The deepest Python function of a sample (its file and function, no line)."""
    for frame in reversed(frames):
        found = PYTHON_FRAME.match(frame)
        if found is not None:
            return f"{found.group('function')} ({found.group('file')})"
    return "(native only)"


@dataclass(frozen=True)
class Split:
    buckets: Counter[str]
    functions: Counter[str]  # the main thread's deepest Python function, by samples
    main_samples: int
    other_samples: int  # every other thread's
    waits: int = 0  # samples of a blocked thread, left out of the others


def split(raw: str) -> Split:
    """py-spy's raw output (`thread (tid): name;frame;...;frame count` per line) bucketed."""
    buckets: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    main = other = waits = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        thread, *frames = stack.split(";")
        if waiting(frames):
            waits += count
            continue
        if not thread.endswith(MAIN_THREAD):
            other += count
            continue
        main += count
        buckets[bucket_of(frames)] += count
        functions[python_leaf(frames)] += count
    return Split(buckets, functions, main, other, waits)


def report(profile: Split, run: BarRun, top: int = 12) -> list[str]:
    total = profile.main_samples + profile.other_samples
    us_per_token = run.cpu_ms_per_1k  # ms per 1,000 tokens = µs per token
    lines = [
        f"Gateway CPU under the profiler: {us_per_token:.1f} µs per output token "
        f"({run.output_tok_s:,.0f} tok/s, {run.completed} completed); "
        f"{total:,} samples running ({profile.waits:,} more of threads blocked in a wait, left "
        f"out), the event-loop thread's {100 * profile.main_samples / max(total, 1):.1f} %.",
        "",
        "| bucket (event-loop thread) | samples | share | µs per output token |",
        "|---|---:|---:|---:|",
    ]
    main = max(profile.main_samples, 1)
    main_share = profile.main_samples / max(total, 1)
    for bucket, count in profile.buckets.most_common():
        share = count / main
        lines.append(
            f"| {bucket} | {count:,} | {100 * share:.1f} % | "
            f"{share * main_share * us_per_token:.1f} |"
        )
    lines += [
        "",
        "| deepest Python function (event-loop thread) | share |",
        "|---|---:|",
    ]
    lines += [
        f"| `{function}` | {100 * count / main:.1f} % |"
        for function, count in profile.functions.most_common(top)
    ]
    return lines


def _py_spy() -> Path:
    beside = Path(sys.executable).parent / "py-spy"  # the venv's own
    found = shutil.which("py-spy")
    return beside if beside.is_file() else Path(found or "py-spy")


@asynccontextmanager
async def py_spy(output: Path, rate: int, pid: int) -> AsyncIterator[None]:
    """py-spy sampling `pid` while the block runs; its raw samples in `output`."""
    argv = [str(_py_spy()), "record", "--pid", str(pid), "--native", "--threads"]
    argv += ["--format", "raw", "--rate", str(rate), "--output", str(output)]
    process = await trio.lowlevel.open_process(argv)
    try:
        await trio.sleep(SPY_START_S)
        yield
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                os.kill(process.pid, signal.SIGINT)  # py-spy writes its samples on SIGINT
            with trio.move_on_after(SPY_STOP_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


async def run(
    engine: EngineLaunch, load: BarLoad, rate: int, keep: Path | None
) -> tuple[Split, BarRun]:
    model = load_model_dir(load.model_path)
    words = prompt_words(model.tokenizer, model.tokenizer.vocab_size)
    with tempfile.TemporaryDirectory(prefix="stream-profile-") as logs:
        log_dir = Path(logs)
        output = log_dir / "py-spy.txt"

        def during(pid: int) -> AbstractAsyncContextManager[None]:
            return py_spy(output, rate, pid)

        async with smg_trio_target(load.model_path, engine, log_dir) as target:
            result = await load.run("smg-trio", target, words, during)
        if not output.is_file():
            raise RuntimeError("py-spy wrote no samples (is ptrace of a child allowed?)")
        if keep is not None:
            shutil.copyfile(output, keep)
        return split(output.read_text()), result


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("stream_profile", __doc__)
    parser.add_argument("--engine", choices=("reference", "vllm"), default="reference")
    parser.add_argument("--step-ms", type=float, default=0.0, help="the reference engine's step")
    parser.add_argument("--vllm-venv", type=Path, help="--engine vllm: vLLM's venv")
    parser.add_argument("--real-model", type=Path, default=demo_model_path())
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rate", type=int, default=200, help="py-spy's samples per second")
    parser.add_argument("--keep-raw", type=Path, help="copy py-spy's raw samples here")
    args = parser.parse_args(argv)
    if not 1 <= args.num_prompts <= MAX_PROMPTS or not 1 <= args.concurrency <= MAX_PROMPTS:
        parser.error(f"--num-prompts and --concurrency must be in 1..{MAX_PROMPTS}")
    if not 10 <= args.rate <= 1000:
        parser.error("--rate must be in 10..1000")
    if not 0 <= args.step_ms <= 1000:
        parser.error("--step-ms must be in 0..1000")
    if not _py_spy().is_file() and shutil.which("py-spy") is None:
        parser.error("no py-spy: pip install py-spy")
    model_path = args.real_model.resolve()
    if args.engine == "vllm":
        if args.vllm_venv is None or not (args.vllm_venv / "bin" / "vllm").is_file():
            parser.error("--engine vllm needs --vllm-venv with bin/vllm")
        engine = vllm_headless(args.vllm_venv, model_path)
        what = "Real vLLM CPU, `vllm bench serve`"
    else:
        engine = reference_engine(model_path, args.step_ms)
        what = f"Reference vLLM EngineCore at step {args.step_ms:g} ms, our HTTP/1.1 client"
    recording = Recording(
        f"stream_profile-{args.engine}", f"Where a token's CPU goes ({args.engine})"
    )
    venv = args.vllm_venv if args.engine == "vllm" else None
    load = BarLoad(model_path, args.num_prompts, args.concurrency, venv)
    profile, result = trio.run(run, engine, load, args.rate, args.keep_raw)
    body = (
        f"{what}, {args.num_prompts} prompts of {OUTPUT_TOKENS} output tokens at concurrency "
        f"{args.concurrency}, smg-trio alone; py-spy --native at {args.rate} Hz on the gateway "
        "over the measured load. Each sample in the bucket of its deepest frame a rule knows "
        "(bench/load/stream_profile.py).\n\n" + "\n".join(report(profile, result))
    )
    recording.publish(body, write=not args.no_write)
    return 0
