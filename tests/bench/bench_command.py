"""I/O. The bench's commands as the tests run them: `python -m bench NAME args` in a subprocess
from the checkout, as a person would; the tests reach bench/ no other way (bench/README.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import trio

CHECKOUT: Final = Path(__file__).resolve().parents[2]
REFUSED: Final = 2  # argparse's exit status for arguments out of bounds


async def command_output(*argv: str, timeout_s: float) -> str:
    """The command's stdout; its stderr in the failure if it exits other than 0."""
    done = await _run(argv, timeout_s)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    output: bytes = done.stdout
    return output.decode()


async def command_status(*argv: str, timeout_s: float) -> int:
    status: int = (await _run(argv, timeout_s)).returncode
    return status


async def _run(argv: tuple[str, ...], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(timeout_s):
        return await trio.run_process(
            [sys.executable, "-m", "bench", *argv],
            cwd=CHECKOUT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of every Markdown table row of `text` whose first cell starts `first_cell`."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().split("|")[1:-1]]
        if cells and cells[0].startswith(first_cell):
            rows.append(cells)
    return rows


def number(cell: str) -> float:
    """The first number in a table cell, thousands separators allowed."""
    found = re.search(r"[-+]?[\d,]*\.?\d+", cell)
    assert found is not None, cell
    return float(found.group().replace(",", ""))
