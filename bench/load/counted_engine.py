"""I/O. The reference vLLM EngineCore with a per-request tally written to a JSON file: how many
tokens it generated for each request and how the request ended. The stop-cost scenario reads it
because the engine may sit behind a gateway we cannot ask for the engine's counters (smg).

    python -m bench counted_engine --counts-file F --handshake tcp://127.0.0.1:PORT \
        [--model-path DIR] [--step-ms X] [--max-batch N] [--mode random|replay]
        [--replay-file PATH]

The file is `{"requests": {engine request id: {"tokens": n, "end": null | "aborted" |
"finished" | "rejected"}}}`, rewritten (atomically) at once when a request ends and at most
every `WRITE_EVERY_S` while tokens flow. A client ABORT is silent on the wire, so the tally
sees it as the command arriving; the engine generates nothing more for that request after it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from smg_trio.engines.batching import EngineConfig
from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.engine_process import run_engine
from smg_trio.engines.generation import Mode
from smg_trio.engines.vllm_zmq_engine import VllmWire
from smg_trio.engines.wire_adapter import (
    Abort,
    Aborted,
    Command,
    Emission,
    Load,
    OutputMessage,
    Rejected,
)
from smg_trio.wire.zmq_transport import EngineAddresses

WRITE_EVERY_S: Final = 0.05


class CountingWire:
    """`WireAdapter` that delegates to `VllmWire` and tallies what each request got."""

    def __init__(self, wire: VllmWire, counts_file: Path) -> None:
        self._wire = wire
        self._counts_file = counts_file
        self._requests: dict[str, dict[str, Any]] = {}
        self._written_at = 0.0
        self._write()

    @property
    def ready_before_registration(self) -> bool:
        return self._wire.ready_before_registration

    @property
    def handshake_timeout_seconds(self) -> float:
        return self._wire.handshake_timeout_seconds

    @property
    def sentinel_on_shutdown(self) -> bool:
        return self._wire.sentinel_on_shutdown

    def hello(self) -> bytes:
        return self._wire.hello()

    def ready(self) -> bytes:
        return self._wire.ready()

    def registration(self) -> bytes:
        return self._wire.registration()

    def addresses(self, addresses: EngineAddresses) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self._wire.addresses(addresses)

    def parse(self, frames: Sequence[bytes]) -> Command:
        command = self._wire.parse(frames)
        if isinstance(command, Abort):
            ended = False
            for request_id in command.request_ids:
                entry = self._requests.get(request_id)
                if entry is not None and entry["end"] is None:
                    entry["end"] = "aborted"
                    ended = True
            if ended:
                self._write()
        return command

    def encode_step(self, emissions: Sequence[Emission], load: Load) -> Sequence[OutputMessage]:
        ended = False
        for emission in emissions:
            entry = self._requests.setdefault(emission.request_id, {"tokens": 0, "end": None})
            entry["tokens"] = emission.completion_tokens
            if emission.outcome is not None:
                ended = True
                match emission.outcome:
                    case Aborted():
                        entry["end"] = "aborted"
                    case Rejected():
                        entry["end"] = "rejected"
                    case _:
                        entry["end"] = "finished"
        if ended or time.monotonic() - self._written_at >= WRITE_EVERY_S:
            self._write()
        return self._wire.encode_step(emissions, load)

    def encode_utility_reply(self, call_id: int, failure: str | None, value: Any) -> bytes:
        return self._wire.encode_utility_reply(call_id, failure, value)

    def reset_media(self) -> bool:
        return self._wire.reset_media()

    def _write(self) -> None:
        partial = self._counts_file.with_suffix(".partial")
        partial.write_text(json.dumps({"requests": self._requests}), encoding="utf-8")
        os.replace(partial, self._counts_file)
        self._written_at = time.monotonic()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench counted_engine", description=__doc__)
    parser.add_argument("--counts-file", type=Path, required=True)
    parser.add_argument("--handshake", required=True, metavar="tcp://HOST:PORT")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--step-ms", type=float, default=0.0)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.RANDOM.value)
    parser.add_argument("--replay-file", type=Path)
    args = parser.parse_args(argv)
    replay_text = None if args.replay_file is None else args.replay_file.read_text("utf-8")
    model = load_engine_model(
        args.model_path, mode=Mode(args.mode), replay_text=replay_text, max_batch=args.max_batch
    )
    config = EngineConfig(
        handshake_address=args.handshake,
        step_seconds=args.step_ms / 1000,
        max_batch=args.max_batch,
    )
    wire = CountingWire(VllmWire(model, max_batch=args.max_batch), args.counts_file)
    return run_engine(wire, model, config)
