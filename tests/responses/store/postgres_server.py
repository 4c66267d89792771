"""A throwaway PostgreSQL server for the opt-in store test (`SMG_TRIO_POSTGRES=1`): Debian's
`postgresql` binaries, `initdb` into a fresh directory, the server on a free loopback port in
the foreground (as `nobody` when the tests run as root: initdb refuses root), stopped by its
PID (fast shutdown) and waited for."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from harness.ports import free_port

READY_S: Final = 20.0
STOP_S: Final = 10.0


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def _as_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "nobody", "--", *argv] if os.geteuid() == 0 else argv


@asynccontextmanager
async def postgres_server() -> AsyncIterator[str]:
    """A running server; yields its URL (trust auth, user `postgres`, database `postgres`)."""
    binaries = postgres_bin()
    assert binaries is not None, "no /usr/lib/postgresql/*/bin: apt-get install -y postgresql"
    # Not under pytest's tmp_path: `nobody` cannot enter root's 0700 pytest directories.
    data = Path(tempfile.mkdtemp(prefix="smg-trio-pg-"))
    try:
        os.chmod(data, 0o777)
        if os.geteuid() == 0:
            shutil.chown(data, "nobody")
        await trio.run_process(
            _as_user([str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]),
            capture_stdout=True,
            capture_stderr=True,
        )
        port = free_port()
        server = await trio.lowlevel.open_process(
            _as_user(
                [
                    str(binaries / "postgres"),
                    "-D",
                    str(data),
                    "-k",
                    str(data),
                    "-p",
                    str(port),
                    "-h",
                    "127.0.0.1",
                ]
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with trio.fail_after(READY_S):
                while True:
                    ready = await trio.run_process(
                        [str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                        capture_stdout=True,
                        check=False,
                    )
                    if ready.returncode == 0:
                        break
                    await trio.sleep(0.1)
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            with trio.CancelScope(shield=True):
                pid_file = data / "postmaster.pid"
                if pid_file.exists():  # the server's own PID (runuser is its parent)
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
                with trio.move_on_after(STOP_S):
                    await server.wait()
                if server.returncode is None:
                    server.kill()
                    await server.wait()
    finally:
        shutil.rmtree(data, ignore_errors=True)
