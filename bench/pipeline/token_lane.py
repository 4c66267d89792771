"""I/O. A streamed token's request-side layers, in process: the engine stream's hold and flush,
the request's step, the response assembler, the chunk hand-off and the SSE sink, down to an
`os.write` on a socketpair, per token, with the fast lane (`TokensStep`) and with the step on
the token's delta as before it (`--lane off`).

    python -m bench token_lane [--tokens 20000] [--lane on|off|both] [--rounds 5]

Each token: `deliver_tokens` (lane on) or `deliver(TokenDelta)` (off) to an `EngineEventStream`
whose consumer is parked (a trio task in `batches()`, as `request/nursery.py`'s), then the
reader's `InlineBatches.flush`, which runs the request's step in the consumer's context: the
path of docs/architecture.md §3.2 from the in-flight table's delivery to the client socket's
write, without ZMQ and the engine. Printed: ns per token, median of the rounds, the lane's
ratio. Wall-clock figures on a shared machine are noisy; under `valgrind --tool=callgrind`
(the difference between `--tokens N` and `--tokens 0`, over N) they are instructions, which
are not (bench/RESULTS.md).

Bounded: at most 1,000,000 tokens and 20 rounds; no network (a socketpair).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Sequence
from typing import Final

import trio
import trio.testing

from smg_trio.backends.event_stream import (
    EngineEventStream,
    InlineBatches,
    InlineStep,
    TokensStep,
)
from smg_trio.core.plan import GeneratePlan, StopSpec
from smg_trio.core.response_assembler import ResponseAssembler
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.frontends.http.asgi_types import Message
from smg_trio.frontends.sse import SseResponse
from smg_trio.handoff import Taken
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.events import TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams
from smg_trio.observability.request_record import RequestRecord
from smg_trio.request.nursery import ChunkWriter, _step_for, _tokens_step_for

MAX_TOKENS: Final = 1_000_000
MAX_ROUNDS: Final = 20
DRAIN_EVERY: Final = 64  # tokens between reads of the socketpair's other end
TEXT: Final = " ".join(__doc__.split()) if __doc__ else "the tokens of a stream"


class SocketChunks:
    """The HTTP/1.1 connection's direct chunk writes (`DirectChunks`), on a socketpair."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write_chunk_now(self, data: bytes) -> tuple[Taken, bytes]:
        os.write(self._fd, b"%x\r\n%b\r\n" % (len(data), data))
        return Taken.ALL, b""

    def start_now(
        self, headers: Sequence[tuple[bytes, bytes]], first: bytes
    ) -> tuple[Taken, bytes]:
        return self.write_chunk_now(first)

    async def write_rest(self, rest: bytes) -> None:
        raise AssertionError("the socketpair takes everything")

    async def end_now(self, last: bytes) -> bool:
        raise AssertionError("a token's lane never ends the stream")


async def no_send(message: Message) -> None:
    raise AssertionError("everything goes by the direct writes")


def drain(end: socket.socket) -> None:
    """Read what the socketpair's other end holds, without waiting."""
    try:
        while end.recv(1 << 20, socket.MSG_DONTWAIT):
            pass
    except BlockingIOError:
        pass


def request_side(
    tokenizer: TokenizerLike, fd: int, request_id: str
) -> tuple[ChunkWriter, InlineStep, TokensStep]:
    """A plain streamed completion's writer, step and fast lane, its chunks written to `fd`."""
    plan = GeneratePlan(
        request_id=request_id,
        endpoint=Endpoint.COMPLETION,
        model="demo",
        prompt_ids=(1,),
        sampling=SamplingParams(),
        stream=True,
        stop_spec=StopSpec(),
    )
    chunks = SocketChunks(fd)
    sink = SseResponse(no_send, direct=chunks, start_now=chunks.start_now)
    assembler = ResponseAssembler(plan, tokenizer, created=0)
    record = RequestRecord(request_id, "completion", "http1", "bench")
    writer = ChunkWriter(sink)
    return writer, _step_for(assembler, writer, record), _tokens_step_for(assembler, writer, record)


async def consume(
    stream: EngineEventStream,
    step: InlineStep,
    tokens: TokensStep | None,
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    """A request's loop over its stream, parked in `batches()` (as request/nursery.py's)."""
    stream.consume_inline(step, tokens)
    task_status.started()
    async for batch in stream.batches():
        if not step(batch):
            break


async def one_round(tokenizer: TokenizerLike, ids: Sequence[int], lane: bool) -> float:
    """ns per token over `ids` after the first (which opens the stream), one token per read."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        writer, step, tokens = request_side(tokenizer, ours.fileno(), "bench")
        inline = InlineBatches()
        stream = EngineEventStream(("bench",), inline)
        async with trio.open_nursery() as nursery:
            writer.starts_in(nursery)
            await nursery.start(consume, stream, step, tokens if lane else None)
            await trio.testing.wait_all_tasks_blocked()
            stream.deliver(TokenDelta(0, (ids[0],)))  # the first chunk opens the stream
            inline.flush()
            started = time.perf_counter_ns()
            for index, token_id in enumerate(ids[1:]):
                if lane:
                    stream.deliver_tokens(0, (token_id,))
                else:
                    stream.deliver(TokenDelta(0, (token_id,)))
                inline.flush()
                if index % DRAIN_EVERY == 0:
                    drain(theirs)
            elapsed = time.perf_counter_ns() - started
            stream.end()
            writer.close()
        return elapsed / max(len(ids) - 1, 1)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench token_lane", description=__doc__)
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--lane", choices=("on", "off", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if not 0 <= args.tokens <= MAX_TOKENS or not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--tokens in 0..{MAX_TOKENS}, --rounds in 1..{MAX_ROUNDS}")
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    text = tokenizer.encode(TEXT, add_special_tokens=False)  # English text, as a model writes
    ids = [text[i % len(text)] for i in range(args.tokens + 1)]
    lanes = {"on": [True], "off": [False], "both": [False, True]}[args.lane]
    results: dict[bool, list[float]] = {lane: [] for lane in lanes}
    for _ in range(args.rounds):
        for lane in lanes:  # interleaved
            results[lane].append(trio.run(one_round, tokenizer, ids, lane))
    for lane, rounds in results.items():
        print(
            f"lane {'on' if lane else 'off'}: {statistics.median(rounds):,.0f} ns per token "
            f"(rounds: {', '.join(f'{r:,.0f}' for r in rounds)})"
        )
    if len(results) == 2:
        ratio = statistics.median(results[True]) / statistics.median(results[False])
        print(f"lane on / off: {ratio:.3f}")
    return 0
