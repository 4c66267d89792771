"""Pure. What the supervisor tells one gateway process among several (`serve --processes N`,
docs/processes.md): its `ProcessRole`, written as JSON into the supervisor's run directory and
read by `python -m smg_trio.serving.gateway_process ROLE_FILE`; and what `vllm serve` hands its
front end (`InheritedSockets`, docs/vllm-frontend.md): sockets a process did not bind itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from smg_trio.backends.zmq_adopted import AdoptedListeners
from smg_trio.backends.zmq_clients import ZmqClient, zmq_client
from smg_trio.neutral.runtime import Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.worker_specs import WorkerSpec


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
    supervisor_pid: int
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


@dataclass(frozen=True)
class InheritedSockets:
    """What `vllm serve` hands its front end (serving/vllm_frontend.py): the HTTP socket, bound
    and not yet listening, and per ZMQ worker the engines' listening input and output."""

    http_fd: int
    engines: Mapping[WorkerSpec, AdoptedListeners]
