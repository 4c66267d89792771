"""I/O. One gateway process among several (`serve --processes N`, docs/processes.md): what the
supervisor tells it, and its `main`.

The supervisor writes a `ProcessRole` (JSON) into its run directory and starts
`python -m smg_trio.gateway_process ROLE_FILE` with the listening sockets inherited. The process
then runs the ordinary `serve` (serve.py) with three differences, all read from the role:

- it listens on the inherited descriptors (`fd://N`), never binding the port itself;
- each ZMQ worker binds this process's own input and output (`ZmqClient`) and no handshake;
- `/metrics` shows every process's figures (observability/process_metrics.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from smg_trio.backends.zmq_clients import ZmqClient, zmq_client
from smg_trio.config import GatewayConfig, WorkerSpec
from smg_trio.errors import ConfigError
from smg_trio.neutral.runtime import Wire


class ProcessRole(msgspec.Struct, frozen=True, kw_only=True):
    """Gateway process `index` of `count`, as the supervisor starts it."""

    index: int
    count: int
    run_dir: Path  # the supervisor's owner-only directory: ZMQ sockets, registrations
    metrics_dir: Path  # PROMETHEUS_MULTIPROC_DIR, set in this process's environment
    http_fd: int  # the listening socket of the main port, inherited
    metrics_fd: int | None  # the listening socket of `--metrics-port`, inherited
    log_level: str
    log_format: str
    config: GatewayConfig

    def zmq_clients(self) -> dict[WorkerSpec, ZmqClient]:
        """This process's side of every ZMQ worker of the configuration."""
        return {
            spec: zmq_client(self.run_dir, number, self.count, self.index)
            for number, spec in enumerate(self.config.workers)
            if spec.wire is Wire.ZMQ
        }


def encode_role(role: ProcessRole) -> bytes:
    return msgspec.json.encode(msgspec.to_builtins(role, enc_hook=str))


def decode_role(payload: bytes) -> ProcessRole:
    return msgspec.json.decode(payload, type=ProcessRole, dec_hook=lambda kind, value: kind(value))


def main(argv: Sequence[str] | None = None) -> int:
    """Serve as the role in the file `argv[0]` names, until SIGTERM/SIGINT (then drain)."""
    args = sys.argv[1:] if argv is None else argv
    role = decode_role(Path(args[0]).read_bytes())
    import trio

    from smg_trio.heap import pin_mmap_threshold
    from smg_trio.observability.request_log import logging_to_stderr
    from smg_trio.serve import serve_until_signal

    pin_mmap_threshold()  # as `serve` does (heap.py)
    with logging_to_stderr(role.log_level, role.log_format, process_index=role.index):
        try:
            trio.run(serve_until_signal, role.config, role)
        except ConfigError as exc:  # the supervisor stops them all: restarting cannot help
            logging.getLogger(__name__).error("configuration: %s", exc.message)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
