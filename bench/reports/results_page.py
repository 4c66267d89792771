"""I/O. bench/RESULTS.md, the results page, and the one writer of its sections: every command
that records figures hands a `Section` to `publish`, which prints it and (unless told not to)
replaces that command's section of the page, or appends it, leaving the others as they are.

A section is keyed by a marker line, `<!-- bench: KEY -->`, and runs to the next marker (or the
end of the page). Each starts with the command that made it, the date, the machine and the load
average, then the figures: one current table per benchmark, older figures in git history.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

RESULTS_MD: Final = Path(__file__).resolve().parent.parent / "RESULTS.md"
PAGE_HEAD: Final = (
    "# Bench results\n\n"
    "One current table per benchmark, each with its command, date and machine; older figures "
    "are in git history (`git log -p bench/RESULTS.md`). `python -m bench` lists the commands.\n"
)
MARKER: Final = re.compile(r"^<!-- bench: (\S+) -->$", re.M)


def machine_note() -> str:
    """Cores, CPU model, memory, CPython and kernel of this machine, in one phrase."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({model}), {memory_gib:.0f} GiB, CPython "
        f"{platform.python_version()}, Linux {platform.release()}"
    )


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def today() -> str:
    return dt.date.today().isoformat()


def command_line() -> str:
    """The command this process runs, as typed: `python -m bench NAME args`."""
    return " ".join(["python -m bench", *sys.argv[1:]])


@dataclass(frozen=True)
class Section:
    key: str  # the marker: the command's name (and a suffix where one command writes several)
    title: str
    command: str
    body: str  # the figures: tables, then what they mean
    load_averages: tuple[str, ...] = ()  # at the start, and at the end where both were read
    elapsed_s: float | None = None
    machine: str = field(default_factory=machine_note)
    date: str = field(default_factory=today)

    def text(self) -> str:
        took = "" if self.elapsed_s is None else f", {self.elapsed_s:.0f} s"
        loads = ""
        if len(self.load_averages) == 1:
            loads = f"; load average (1 / 5 / 15 min) {self.load_averages[0]}"
        elif self.load_averages:
            loads = (
                f"; load average (1 / 5 / 15 min) {self.load_averages[0]} at the start, "
                f"{self.load_averages[-1]} at the end"
            )
        return (
            f"<!-- bench: {self.key} -->\n## {self.title}\n\n"
            f"`{self.command}` ({self.date}{took}). Machine: {self.machine}{loads}.\n\n"
            f"{self.body.strip()}\n"
        )


def recording_parser(name: str, description: str | None) -> argparse.ArgumentParser:
    """The argument parser of a command that records figures: `--no-write` prints only."""
    parser = argparse.ArgumentParser(prog=f"python -m bench {name}", description=description)
    parser.add_argument("--no-write", action="store_true", help="leave bench/RESULTS.md alone")
    return parser


@dataclass(frozen=True)
class Recording:
    """A command's run, from its start: its command line, load average and clock are read now;
    `publish` reads them again and makes its section of what it measured."""

    key: str
    title: str
    command: str = field(default_factory=command_line)
    load_before: str = field(default_factory=load_average)
    started: float = field(default_factory=time.perf_counter)

    def section(self, body: str) -> Section:
        elapsed_s = time.perf_counter() - self.started
        loads = (self.load_before, load_average())
        return Section(self.key, self.title, self.command, body, loads, elapsed_s)

    def publish(self, body: str, *, write: bool) -> None:
        publish(self.section(body), write=write)


def replace_section(section: Section, path: Path = RESULTS_MD) -> None:
    """Put `section` in place of the page's section with its key, or append it."""
    page = path.read_text(encoding="utf-8") if path.exists() else PAGE_HEAD
    starts = {match.group(1): match.start() for match in MARKER.finditer(page)}
    text = section.text()
    if section.key not in starts:
        page = page.rstrip("\n") + "\n\n" + text
    else:
        start = starts[section.key]
        later = [at for at in starts.values() if at > start]
        tail = page[min(later) :] if later else ""
        page = page[:start] + text + ("\n" + tail if tail else "")
    path.write_text(page, encoding="utf-8")


def publish(section: Section, *, write: bool, path: Path = RESULTS_MD) -> None:
    """Print the section; with `write`, also replace it on the results page."""
    print(section.text())
    if write:
        replace_section(section, path)
        print(f"wrote {section.key!r} in {path}", file=sys.stderr)
