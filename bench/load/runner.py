"""I/O. One load run: send a workload's requests over a transport, fixed concurrency or open
loop, bounded in count (the spec list) and time (`time_cap_s`: what still runs then is
cancelled and counted as such), with a progress line on stderr and the server process's CPU
seconds and peak RSS read from /proc.

Peak RSS: the kernel's high-water mark (VmHWM) is reset before the run by writing 5 to the
process's clear_refs (our own child, so allowed), then read after it; where that fails, the
largest VmRSS sampled during the run is used.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO, assert_never

import trio

from bench.load.stats import ProcessUsage, RequestRecord, RunSummary, StreamMeter, summarize
from bench.load.transports import Transport
from bench.load.workload import FixedConcurrency, PoissonArrivals, RequestSpec, Workload

PROGRESS_EVERY_S: Final = 0.25
PROBE_EVERY_S: Final = 0.1
PROGRESS_EVERY_S_NOT_A_TTY: Final = 5.0
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")

_OneRequest = Callable[[RequestSpec], Awaitable[None]]


class ProcessProbe:
    """CPU time and memory of one process we started (all its threads; with `children`, its
    child processes' CPU too: `serve --processes N`'s gateway processes, docs/processes.md)."""

    def __init__(self, pid: int, *, children: bool = False) -> None:
        self.pid = pid
        self._proc = Path(f"/proc/{pid}")
        self._children = children
        self._sampled_peak_kb = 0
        self._hwm_reset = False

    def cpu_s(self) -> float:
        fields = _stat_fields(self._proc)
        ticks = int(fields[11]) + int(fields[12])  # utime + stime
        if self._children:
            ticks += int(fields[13]) + int(fields[14])  # reaped children: cutime + cstime
            for child in _children_of(self.pid):
                try:
                    child_fields = _stat_fields(child)
                except OSError:
                    continue  # it ended between the listing and the read
                ticks += int(child_fields[11]) + int(child_fields[12])
        return ticks / _CLOCK_TICKS

    def _status_kb(self, key: str) -> int:
        for line in (self._proc / "status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return 0

    def start_peak(self) -> None:
        try:
            (self._proc / "clear_refs").write_text("5")
            self._hwm_reset = True
        except OSError:
            self._hwm_reset = False
        self._sampled_peak_kb = self._status_kb("VmRSS")

    def sample(self) -> None:
        self._sampled_peak_kb = max(self._sampled_peak_kb, self._status_kb("VmRSS"))

    def peak_rss_mb(self) -> float:
        self.sample()
        peak = self._status_kb("VmHWM") if self._hwm_reset else self._sampled_peak_kb
        return max(peak, self._sampled_peak_kb) / 1024


def _stat_fields(proc: Path) -> list[str]:
    """/proc/PID/stat after the command name; index 11 is utime (field 14 of proc(5))."""
    stat = (proc / "stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def _children_of(pid: int) -> list[Path]:
    """The /proc folders of `pid`'s living child processes."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat_fields(entry)[1]) == pid:
                    children.append(entry)
            except (OSError, IndexError, ValueError):
                continue
    return children


@dataclass
class _Tally:
    total: int
    started: int = 0
    ended: int = 0
    errors: int = 0
    tokens: int = 0


class Progress:
    """A one-line progress report on stderr (rewritten in place on a terminal)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty()

    @property
    def period_s(self) -> float:
        return PROGRESS_EVERY_S if self._tty else PROGRESS_EVERY_S_NOT_A_TTY

    def note(self, text: str) -> None:
        self._stream.write(text + "\n")
        self._stream.flush()

    def show(self, label: str, tally: _Tally, elapsed_s: float, *, final: bool = False) -> None:
        rate = tally.tokens / elapsed_s if elapsed_s > 0 else 0.0
        line = (
            f"{label}: {tally.ended}/{tally.total} requests, {tally.started - tally.ended} in "
            f"flight, {tally.errors} errors, {rate:,.0f} tok/s, {elapsed_s:.1f}s"
        )
        if self._tty:
            self._stream.write("\r\x1b[2K" + line + ("\n" if final else ""))
        else:  # a log file: a plain line every PROGRESS_EVERY_S_NOT_A_TTY
            self._stream.write(line + "\n")
        self._stream.flush()


async def run_load(
    transport: Transport,
    specs: Sequence[RequestSpec],
    workload: Workload,
    *,
    target: str,
    scenario: str,
    probe: ProcessProbe | None = None,
    progress: Progress | None = None,
) -> tuple[RunSummary, list[RequestRecord]]:
    """Run the workload; return its summary and every request's record."""
    records: list[RequestRecord] = []
    tally = _Tally(total=len(specs))
    label = f"{target} [{scenario}] {workload.arrival.label}"
    run_started = trio.current_time()
    cpu_before = probe.cpu_s() if probe is not None else 0.0
    client_cpu_before = time.process_time()
    if probe is not None:
        probe.start_peak()

    async def one(spec: RequestSpec) -> None:
        meter = StreamMeter(started_at=trio.current_time(), run_started_at=run_started)
        tally.started += 1
        error: str | None = None
        cancelled = True
        try:
            await transport.send(spec, meter)
            cancelled = False
        except Exception as exc:  # any failure of one request is that request's error
            error = f"{type(exc).__name__}: {exc}"
            cancelled = False
        finally:
            record = meter.record(trio.current_time(), error=error, cancelled=cancelled)
            records.append(record)
            tally.ended += 1
            tally.errors += record.error is not None and not record.cancelled
            tally.tokens += record.output_tokens if record.error is None else 0

    async with trio.open_nursery() as outer:
        if progress is not None or probe is not None:
            outer.start_soon(_watch, label, tally, run_started, probe, progress)
        with trio.move_on_after(workload.time_cap_s):
            async with trio.open_nursery() as nursery:
                match workload.arrival:
                    case FixedConcurrency(streams=streams, think_time_s=think_time_s):
                        queue = iter(specs)
                        for _ in range(min(streams, len(specs))):
                            nursery.start_soon(_stream_loop, queue, one, think_time_s)
                    case PoissonArrivals():
                        await _open_loop(nursery, workload.arrival, specs, one, workload.seed)
                    case _:
                        assert_never(workload.arrival)
        wall_s = trio.current_time() - run_started
        outer.cancel_scope.cancel()
    server = None
    if probe is not None:
        server = ProcessUsage(cpu_s=probe.cpu_s() - cpu_before, peak_rss_mb=probe.peak_rss_mb())
    if progress is not None:
        progress.show(label, tally, wall_s, final=True)
    summary = summarize(
        records,
        target=target,
        scenario=scenario,
        load=workload.arrival.label,
        streams=workload.arrival.streams
        if isinstance(workload.arrival, FixedConcurrency)
        else None,
        wall_s=wall_s,
        server=server,
        client_cpu_s=time.process_time() - client_cpu_before,
    )
    return summary, records


async def _stream_loop(queue: Iterator[RequestSpec], one: _OneRequest, think_s: float) -> None:
    for index, spec in enumerate(queue):  # the streams share one iterator: each takes the next
        if index and think_s:
            await trio.sleep(think_s)
        await one(spec)


async def _open_loop(
    nursery: trio.Nursery,
    arrival: PoissonArrivals,
    specs: Sequence[RequestSpec],
    one: _OneRequest,
    seed: int,
) -> None:
    rng = random.Random(seed)
    in_flight = trio.Semaphore(arrival.max_in_flight)

    async def admitted(spec: RequestSpec) -> None:
        try:
            await one(spec)
        finally:
            in_flight.release()

    for spec in specs:
        await trio.sleep(rng.expovariate(arrival.rate_per_s))
        await in_flight.acquire()  # past max_in_flight the arrivals wait (no longer open loop)
        nursery.start_soon(admitted, spec)


async def _watch(
    label: str,
    tally: _Tally,
    run_started: float,
    probe: ProcessProbe | None,
    progress: Progress | None,
) -> None:
    period = progress.period_s if progress is not None else PROGRESS_EVERY_S
    shown_at = trio.current_time()
    while True:
        await trio.sleep(PROBE_EVERY_S)
        if probe is not None:
            probe.sample()
        now = trio.current_time()
        if progress is not None and now - shown_at >= period:
            progress.show(label, tally, now - run_started)
            shown_at = now
