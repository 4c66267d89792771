"""Pure. The command line that starts one of our reference engines as a process of its own,
`python -m smg_trio.engines KIND [flags]` (what `smg-trio engine KIND` runs, without the
gateway's imports; engines/cli.py), built from typed options: what the demo, the benches and
the tests launch, written in one place so a flag is spelled once.

    EngineCommand("vllm-zmq", handshake="tcp://127.0.0.1:5555", mode=Mode.RANDOM).argv()
    EngineCommand("sglang-grpc", host="127.0.0.1", port=0).argv()

A ZMQ engine (`*-zmq`) dials the gateway's `handshake` address; a gRPC engine (`*-grpc`)
listens on `host`/`port` (port 0: a free one, printed on its first stdout line). An option
left None is not passed, so the engine's own default applies.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from smg_trio.engines.generation import Mode


@dataclass(frozen=True)
class EngineCommand:
    kind: str
    """The engine's CLI name: "vllm-zmq", "tokenspeed-zmq", or "<runtime>-grpc"."""
    handshake: str | None = None
    """ZMQ: the gateway's handshake ROUTER to dial (this or `data_addresses`)."""
    data_addresses: tuple[str, str] | None = None
    """ZMQ: the input and output sockets to connect to with no handshake, as under `vllm
    serve`'s front-end hook (docs/vllm-frontend.md §1)."""
    engine_index: int | None = None
    """ZMQ: the engine's data-parallel rank (its 2-byte identity)."""
    host: str | None = None
    """gRPC: the address to listen on."""
    port: int | None = None
    """gRPC: the port to listen on; 0 picks a free one."""
    model_path: Path | None = None
    """The model folder; None: the shipped demo model."""
    step_ms: float | None = None
    max_batch: int | None = None
    mode: Mode | None = None
    replay_file: Path | None = None
    """The text replay mode says; it implies `mode=Mode.REPLAY`."""
    log_level: str | None = "WARNING"
    """Launched engines are quiet unless told otherwise; None: the engine's default (INFO)."""
    extra: tuple[str, ...] = ()
    """Further flags as the engine's CLI spells them, passed last (so they win)."""

    def __post_init__(self) -> None:
        zmq = self.kind.endswith("-zmq")
        targets = (self.handshake is not None) + (self.data_addresses is not None)
        if targets != (1 if zmq else 0):
            raise ValueError(
                f"{self.kind}: a handshake address or data addresses (one of them) goes with "
                "a ZMQ engine only"
            )
        if zmq and (self.host is not None or self.port is not None):
            raise ValueError(f"{self.kind}: host and port are for gRPC engines")
        if self.replay_file is not None and self.mode not in (None, Mode.REPLAY):
            raise ValueError(f"a replay file goes with mode replay, not {self.mode}")

    def argv(self) -> list[str]:
        """The whole command line, run with this interpreter."""
        return [sys.executable, "-m", "smg_trio.engines", self.kind, *self.flags()]

    def flags(self) -> list[str]:
        """The flags after the engine's name (also what bench/load/counted_engine.py takes)."""
        mode = Mode.REPLAY if self.replay_file is not None else self.mode
        options: list[tuple[str, object | None]] = [
            ("--handshake", self.handshake),
            ("--engine-index", self.engine_index),
            ("--host", self.host),
            ("--port", self.port),
            ("--model-path", self.model_path),
            ("--step-ms", self.step_ms),
            ("--max-batch", self.max_batch),
            ("--mode", None if mode is None else mode.value),
            ("--replay-file", self.replay_file),
            ("--log-level", self.log_level),
        ]
        flags = [
            part for flag, value in options if value is not None for part in (flag, str(value))
        ]
        if self.data_addresses is not None:
            flags = ["--data-addresses", *self.data_addresses, *flags]
        return [*flags, *self.extra]
