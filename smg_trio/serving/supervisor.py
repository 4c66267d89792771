"""I/O. `smg-trio serve --processes N` (N > 1): the supervisor of N gateway processes
(docs/processes.md).

    supervise ─┬─ check the configuration and the model folder (a problem: exit 2, nothing ran)
               ├─ bind the HTTP port: one SO_REUSEPORT listening socket per process, all held
               │   here, each inherited by its process (docs/processes.md §2); `--metrics-port`
               │   once, shared by all
               ├─ per ZMQ worker: answer the engines' handshake, INIT listing every process's
               │   input and output (backends/zmq_clients.py, docs/processes.md §3)
               └─ keep N gateway processes running (`python -m smg_trio.serving.gateway_process`):
                  one that exits is started again after a backoff (logged), unless the
                  supervisor is stopping; one that exits 2 (its configuration) stops them all

- SIGTERM/SIGINT: each process is sent SIGTERM and drains as one process does (request/live_requests.py,
  docs/resilience.md §4); a second signal is passed on too (the drain ends at once). Processes
  still running `drain_timeout_s + STOP_GRACE_S` after the first signal are killed.
- The processes run in sessions of their own, so a terminal's Ctrl-C reaches them once,
  through the supervisor, not twice (which would end their drain); each drains as on SIGTERM
  when it finds its supervisor gone (killed), so none outlives it.
- Every process is a `trio.run_process` task of the supervisor's nursery: none outlives it, and
  each is reaped. The run directory (ZMQ sockets, kept registrations, the metrics files of
  `PROMETHEUS_MULTIPROC_DIR`) is owner-only and removed when the supervisor ends; a process
  that ended has its live gauges removed from the metrics (`mark_process_dead`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Final

import trio
from prometheus_client.multiprocess import mark_process_dead

from smg_trio.backends.zmq_clients import answer_handshakes, client_addresses
from smg_trio.backends.zmq_socket import private_ipc_dir
from smg_trio.model.folder import load_model_dir
from smg_trio.neutral.runtime import Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.http_listener import check_listener, hypercorn_config
from smg_trio.serving.process_role import ProcessRole, encode_role
from smg_trio.serving.serve import ShutdownTrigger, open_shutdown_signal
from smg_trio.serving.worker_backends import check_worker_available

logger = logging.getLogger(__name__)

RESTART_BACKOFF_S: Final = (0.5, 1.0, 2.0, 5.0, 10.0)
"""Waits before restarting a process that died, growing with each death in a row."""
STABLE_S: Final = 30.0
"""A process that ran this long before dying is restarted after the shortest wait again."""
STOP_GRACE_S: Final = 10.0
"""Beyond the drain: how long processes may take to exit after SIGTERM before being killed."""
LISTEN_BACKLOG: Final = 2048
CONFIG_EXIT: Final = 2  # a process that found a configuration problem: restarting cannot help


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket on the port (as hypercorn would bind it); with `reuse_port`, one of
    a SO_REUSEPORT group, among which the kernel spreads new connections evenly."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    return sock


class Supervisor:
    """Keeps one gateway process per slot running until `stop`."""

    def __init__(self, roles: list[ProcessRole], run_dir: Path) -> None:
        self._roles = roles
        self._run_dir = run_dir
        self.processes: dict[int, trio.Process] = {}
        self.stopping = False
        self.stop_requested = trio.Event()
        self.exit_code = 0
        self.all_exited = trio.Event()
        self._running_slots = len(roles)

    async def keep_running(self, nursery: trio.Nursery, index: int) -> None:
        """Slot `index`: start its process, and again each time it dies, until stopping."""
        role = self._roles[index]
        role_file = self._run_dir / f"process-{index}.json"
        role_file.write_bytes(encode_role(role))
        environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(role.metrics_dir)}
        command = [sys.executable, "-m", "smg_trio.serving.gateway_process", str(role_file)]
        deaths = 0
        try:
            while not self._stopping():
                started = trio.current_time()
                process: trio.Process = await nursery.start(
                    partial(
                        trio.run_process,
                        command,
                        check=False,
                        stdin=subprocess.DEVNULL,
                        pass_fds=_inherited(role),
                        env=environment,
                        start_new_session=True,
                    )
                )
                self.processes[index] = process
                logger.info("gateway process %d started (pid %d)", index, process.pid)
                code = await process.wait()
                del self.processes[index]
                mark_process_dead(process.pid, str(role.metrics_dir))  # type: ignore[no-untyped-call]
                if self._stopping():
                    logger.info("gateway process %d (pid %d) exited: %d", index, process.pid, code)
                    return
                if code == CONFIG_EXIT:
                    logger.error("gateway process %d exited 2 (configuration); stopping", index)
                    self.exit_code = CONFIG_EXIT
                    self.stop_requested.set()
                    return
                deaths = 1 if trio.current_time() - started >= STABLE_S else deaths + 1
                wait_s = RESTART_BACKOFF_S[min(deaths, len(RESTART_BACKOFF_S)) - 1]
                logger.error(
                    "gateway process %d (pid %d) died (%s); restarting in %.1f s",
                    index,
                    process.pid,
                    _exit_status(code),
                    wait_s,
                    extra={"slot": index, "pid": process.pid, "exit_code": code},
                )
                with trio.move_on_after(wait_s):
                    await self.stop_requested.wait()
        finally:
            self._running_slots -= 1
            if self._running_slots == 0:
                self.all_exited.set()

    def _stopping(self) -> bool:
        return self.stopping  # a method: re-read after every wait (mypy would narrow it)

    def signal_all(self, number: int) -> None:
        for process in self.processes.values():
            if process.returncode is None:
                process.send_signal(number)

    async def stop(self, drain_timeout_s: float, next_signal: ShutdownTrigger) -> None:
        """SIGTERM to every process (each drains); a further signal is passed on; past the
        drain and `STOP_GRACE_S`, what still runs is killed."""
        self.stopping = True
        self.signal_all(signal.SIGTERM)

        async def pass_on_signals() -> None:
            while True:
                await next_signal()
                logger.info("another signal: the processes end their drain now")
                self.signal_all(signal.SIGTERM)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pass_on_signals)
            with trio.move_on_after(drain_timeout_s + STOP_GRACE_S):
                await self.all_exited.wait()
            self.signal_all(signal.SIGKILL)
            nursery.cancel_scope.cancel()


async def supervise(config: GatewayConfig, log_level: str, log_format: str) -> int:
    """Run `config.processes` gateway processes on one port until SIGTERM/SIGINT, then drain
    them all (see the module doc). Returns the exit status (2: a process's configuration)."""
    for spec in config.workers:
        check_worker_available(spec)
    load_model_dir(config.model_path)  # a missing or broken folder is one exit 2, not N
    http_config = hypercorn_config(config)
    check_listener(config, http_config)  # the port, and the TLS files
    if config.metrics_port is not None:
        check_listener(config, http_config, port=config.metrics_port)
    with ExitStack() as stack, open_shutdown_signal() as next_signal:
        run_dir = stack.enter_context(private_ipc_dir())
        metrics_dir = run_dir / "metrics"
        metrics_dir.mkdir(mode=0o700)
        # One SO_REUSEPORT socket per process, all held here (docs/processes.md §2): the kernel
        # spreads connections evenly, and a dead process's queue waits for its restart.
        first = stack.enter_context(listening_socket(config.host, config.port, reuse_port=True))
        port = first.getsockname()[1]
        https = [first] + [
            stack.enter_context(listening_socket(config.host, port, reuse_port=True))
            for _ in range(config.processes - 1)
        ]
        metrics_fd = None
        if config.metrics_port is not None:
            metrics_fd = stack.enter_context(
                listening_socket(config.host, config.metrics_port)
            ).fileno()
        roles = [
            ProcessRole(
                index=index,
                count=config.processes,
                run_dir=run_dir,
                metrics_dir=metrics_dir,
                http_fd=https[index].fileno(),
                metrics_fd=metrics_fd,
                log_level=log_level,
                log_format=log_format,
                supervisor_pid=os.getpid(),
                config=config,
            )
            for index in range(config.processes)
        ]
        supervisor = Supervisor(roles, run_dir)
        async with trio.open_nursery() as nursery:
            for number, spec in enumerate(config.workers):
                if spec.wire is Wire.ZMQ:
                    inputs, outputs = client_addresses(run_dir, number, config.processes)
                    await nursery.start(answer_handshakes, f"tcp://{spec.address}", inputs, outputs)
            scheme = "https" if http_config.ssl_enabled else "http"
            host = first.getsockname()[0]
            logger.info(
                "Running on %s://%s:%d with %d gateway processes",
                scheme,
                f"[{host}]" if ":" in host else host,
                port,
                config.processes,
                extra={"port": port, "processes": config.processes},
            )
            for index in range(config.processes):
                nursery.start_soon(supervisor.keep_running, nursery, index)

            async def stop_at_first_signal() -> None:
                await next_signal()
                supervisor.stop_requested.set()

            nursery.start_soon(stop_at_first_signal)
            await supervisor.stop_requested.wait()
            logger.info("stopping %d gateway processes", len(supervisor.processes))
            await supervisor.stop(config.drain_timeout_s, next_signal)
            nursery.cancel_scope.cancel()
    return supervisor.exit_code


def _inherited(role: ProcessRole) -> tuple[int, ...]:
    """The listening sockets a process is given, and only those."""
    return (role.http_fd,) if role.metrics_fd is None else (role.http_fd, role.metrics_fd)


def _exit_status(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"
