"""I/O. A streamed token's path from a vLLM output message's bytes to the client sockets, in
process: the ZMQ output reader's batch (decode, demultiplex, heard-from, the streams' holds and
flush), then each request's step (or fast lane), the response assembler, the chunk hand-off and
the SSE sink, down to an `os.write` per stream on a socketpair.

    python -m bench engine_lane [--tokens 500] [--streams 64] [--rounds 3]

`--streams` open streams (one choice each, consumers parked as `request/nursery.py`'s, the fast
lane registered), a vLLM EngineCoreOutputs message per engine step carrying one token for every
stream (as a real engine at this concurrency sends them), one message per read, applied by the
backend's `OutputReader` (backends/zmq_outputs.py). The messages are encoded before the clock
starts. Printed: ns per token, median of the rounds. Wall-clock figures on a shared machine are
noisy; under `valgrind --tool=callgrind` (the difference between `--tokens N` and `--tokens 0`,
over N x streams) they are instructions, which are not (bench/RESULTS.md). Not in it: the
socket's receive, the engine, trio's scheduling of reads, the kernel's side of the writes.

Bounded: at most 100,000 tokens, 256 streams and 20 rounds; no network (socketpairs).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Final

import trio
import trio.testing

from bench.pipeline.token_lane import DRAIN_EVERY, TEXT, consume, drain, request_side
from smg_trio.backends.event_stream import (
    InlineBatches,
)
from smg_trio.backends.zmq_engines import RankPolicy, Route
from smg_trio.backends.zmq_input_writer import Outgoing
from smg_trio.backends.zmq_outputs import OutputReader
from smg_trio.backends.zmq_registry import EngineRegistry
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire.vllm_zmq_outputs import EngineCoreOutput, EngineCoreOutputs, encode_outputs

MAX_TOKENS: Final = 100_000
MAX_STREAMS: Final = 256
MAX_ROUNDS: Final = 20


def _messages(ids: Sequence[int], streams: int) -> list[list[bytes]]:
    """One single-frame message per token position, one output per stream."""
    return [
        [
            encode_outputs(
                EngineCoreOutputs(
                    engine_index=0,
                    outputs=tuple(EngineCoreOutput(f"r{s}", (token_id,)) for s in range(streams)),
                )
            )
        ]
        for token_id in ids
    ]


def _never_sent(item: Outgoing) -> None:
    raise AssertionError("plain tokens send nothing back")


async def one_round(tokenizer: TokenizerLike, ids: Sequence[int], streams: int) -> float:
    """ns per token over the messages after the first (which opens every stream)."""
    messages = _messages(ids, streams)
    registry = EngineRegistry(1, RankPolicy.LEAST_LOADED)
    inline = InlineBatches()
    reader = OutputReader(Runtime.VLLM, registry, inline, _never_sent)
    engine = registry.engines[0]
    with ExitStack() as sockets:
        ends = []
        async with trio.open_nursery() as nursery:
            for s in range(streams):
                ours, theirs = (sockets.enter_context(end) for end in socket.socketpair())
                ours.setblocking(False)
                ends.append(theirs)
                writer, step, tokens = request_side(tokenizer, ours.fileno(), f"bench-{s}")
                writer.starts_in(nursery)
                stream = registry.in_flight.new_stream((f"r{s}",), inline)
                registry.in_flight.add(
                    Route(
                        engine_request_id=f"r{s}",
                        choice_index=0,
                        engine=engine,
                        stream=stream,
                        prompt_tokens=1,
                    )
                )
                await nursery.start(consume, stream, step, tokens)
            await trio.testing.wait_all_tasks_blocked()
            reader.apply(messages[:1], trio.current_time())  # the first chunks open the streams
            started = time.perf_counter_ns()
            for index, message in enumerate(messages[1:]):
                reader.apply([message], trio.current_time())
                if index % DRAIN_EVERY == 0:
                    for end in ends:
                        drain(end)
            elapsed = time.perf_counter_ns() - started
            nursery.cancel_scope.cancel()
    return elapsed / max((len(ids) - 1) * streams, 1)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench engine_lane", description=__doc__)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if (
        not 0 <= args.tokens <= MAX_TOKENS
        or not 1 <= args.streams <= MAX_STREAMS
        or not 1 <= args.rounds <= MAX_ROUNDS
    ):
        parser.error(f"--tokens 0..{MAX_TOKENS}, --streams 1..{MAX_STREAMS}, --rounds 1..20")
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    text = tokenizer.encode(TEXT, add_special_tokens=False)  # English text, as a model writes
    ids = [text[i % len(text)] for i in range(args.tokens + 1)]
    rounds = [trio.run(one_round, tokenizer, ids, args.streams) for _ in range(args.rounds)]
    print(
        f"{args.streams} streams: {statistics.median(rounds):,.0f} ns per token "
        f"(rounds: {', '.join(f'{r:,.0f}' for r in rounds)})"
    )
    return 0
