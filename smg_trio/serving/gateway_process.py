"""I/O. One gateway process among several (`serve --processes N`, docs/processes.md): its `main`.

The supervisor writes a `ProcessRole` (serving/process_role.py, JSON) into its run directory and starts
`python -m smg_trio.serving.gateway_process ROLE_FILE` with the listening sockets inherited. The process
then runs the ordinary `serve` (serving/serve.py) with three differences, all read from the role:

- it listens on the inherited descriptors (`fd://N`), never binding the port itself;
- each ZMQ worker binds this process's own input and output (`ZmqClient`) and no handshake;
- `/metrics` shows every process's figures (observability/process_metrics.py).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from smg_trio.errors import ConfigError
from smg_trio.serving.process_role import ProcessRole, decode_role

logger = logging.getLogger(__name__)

SUPERVISOR_CHECK_S: Final = 0.5
"""How often a process checks that its supervisor is still its parent."""


async def serve_supervised(role: ProcessRole) -> None:
    """`serve` as `role` until SIGTERM/SIGINT or until the supervisor is gone (then drain; a
    further signal ends the drain)."""
    import trio

    from smg_trio.serving.serve import open_shutdown_signal, serve

    with open_shutdown_signal() as next_signal:

        async def first_stop() -> None:
            async with trio.open_nursery() as nursery:

                async def signalled() -> None:
                    await next_signal()
                    nursery.cancel_scope.cancel()

                async def orphaned() -> None:
                    # Killed, it could not pass a signal on: no process may outlive it, and
                    # its handshake and sockets are gone with it (docs/processes.md §1).
                    while os.getppid() == role.supervisor_pid:  # noqa: ASYNC110 (no event to wait on)
                        await trio.sleep(SUPERVISOR_CHECK_S)
                    logger.error("the supervisor (pid %d) is gone; draining", role.supervisor_pid)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(signalled)
                nursery.start_soon(orphaned)

        await serve(role.config, shutdown_trigger=first_stop, hurry_trigger=next_signal, role=role)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve as the role in the file `argv[0]` names, until SIGTERM/SIGINT (then drain)."""
    args = sys.argv[1:] if argv is None else argv
    role = decode_role(Path(args[0]).read_bytes())
    import trio

    from smg_trio.observability.request_log import logging_to_stderr
    from smg_trio.request.heap import pin_mmap_threshold

    pin_mmap_threshold()  # as `serve` does (request/heap.py)
    with logging_to_stderr(role.log_level, role.log_format, process_index=role.index):
        try:
            trio.run(serve_supervised, role)
        except ConfigError as exc:  # the supervisor stops them all: restarting cannot help
            logger.error("configuration: %s", exc.message)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
