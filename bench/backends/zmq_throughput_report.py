"""Pure. The ZMQ throughput bench's values and its report: per-run measurements, medians per
configuration, the cProfile summary, and the body of its section of bench/RESULTS.md.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

PROFILE_TOP: Final = 8
INTERPRETATION: Final = """\
Interpretation (from this run and five exploratory ones; the mechanisms held every time, the
figures moved by up to ±30 % with the machine's other load):

- 1 stream: the engine is the bottleneck. Every step carries one token (tokens/message 1.0);
  the reference engine spends ~50-75 CPU µs per one-request step (poll, generate, msgpack
  encode, send), the client ~30-40 µs per message. That client cost is per-message overhead, not
  per-token work: trio wake-ups of the reader and stream tasks, pyzmq `recv_multipart` (3.7 µs
  alone; `recv(copy=False)` + `Frame.more` is 2.1 µs), decode (2.8 µs), route and mailbox.
- 64 and 256 streams: client and engine cost about the same per token (~8-12 CPU µs each; the
  pipeline adds ~1-3 µs/token on the client, as the pure-core bench predicts), so neither
  dominates: each needs about one core per ~75-125k tokens/s, and here they split the 2 cores
  (client + engine cores reached ~1.9 when nothing else ran). The client is the slightly heavier
  side in the pipeline pass.
- Where the client's time goes at 256 streams (profiles above): the one output-reader task is
  60-75 % of the busy main thread in the backend pass. Per engine output it builds a
  `RequestStep` (`zmq_codec._vllm_message`), looks up the route and builds a `TokenDelta`
  (`zmq_outputs.OutputReader.dispatch`/`_advance`) and appends it to the stream's mailbox
  (`deliver`/`put_nowait`): ~4.5 µs per token (timed by instrumenting the reader). The stream
  tasks (one wake-up per reader batch, `coalesce`, the loop) take most of the rest; in the
  pipeline pass detokenize + stop scan is the largest single area.
- Tokens/message stays below the stream count: with zero step time the engine steps whatever has
  arrived and runs ahead of the client's resubmissions, so a message carried ~15-200 outputs,
  not 256. A real engine (10-50 ms steps) carries every active stream per message, so the
  per-message overhead amortizes further; the per-token figures are the ones that transfer.
- Hot spots in smg_trio/backends/: (1) `event_stream.coalesce` once rebuilt the merged
  `TokenDelta` for every extra delta (quadratic in a batch: 181 µs for 256 one-token deltas);
  it now gathers the ids and builds each merged delta once (26 µs), and returns a one-event
  batch as it is (the common case at real step times). An A/B run of the linear version stayed
  within the noise (64 streams 10.1 -> 9.3 µs/token, 256 streams 7.6 -> 8.3). (2) Two
  allocations per output (`RequestStep`, then `TokenDelta`); delivering straight from the
  decoded `EngineCoreOutput` would drop one per token (~15-25 % of the reader's profile; not a
  one-line change). (3) `recv_multipart` -> `recv(copy=False)` + `.more` saves ~1.6 µs per
  message; it matters only at 1 token/message."""


@dataclass(frozen=True)
class Workload:
    streams: int
    requests: int
    """Requests in the whole run; each stream sends `requests / streams` one after another."""
    max_tokens: int
    pipeline: bool
    """Also run each stream's events through a ResponseAssembler and SSE framing."""


@dataclass(frozen=True)
class Measurement:
    workload: Workload
    requests_done: int
    tokens: int
    messages: int
    """Engine output messages sent during the run (one per engine step)."""
    wall_s: float
    client_cpu_s: float
    engine_cpu_s: float
    payload_bytes: int
    capped: bool

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.wall_s

    @property
    def client_us_per_token(self) -> float:
        return 1e6 * self.client_cpu_s / max(self.tokens, 1)

    @property
    def client_us_per_message(self) -> float:
        return 1e6 * self.client_cpu_s / max(self.messages, 1)

    @property
    def engine_us_per_token(self) -> float:
        return 1e6 * self.engine_cpu_s / max(self.tokens, 1)


@dataclass(frozen=True)
class BenchReport:
    measurements: tuple[Measurement, ...]
    profiles: Mapping[str, str]
    """Pass name -> `describe_profile` of one profiled run at the largest stream count."""


@dataclass(frozen=True)
class Row:
    """The medians of one configuration's repetitions."""

    pass_name: str
    streams: int
    requests: int
    tokens_per_s: float
    client_us_per_token: float
    client_us_per_message: float
    messages_per_s: float
    tokens_per_message: float
    client_cores: float
    engine_cores: float
    engine_us_per_token: float
    capped: int


def pass_name(workload: Workload) -> str:
    return "pipeline" if workload.pipeline else "backend"


def summarize(measurements: Sequence[Measurement]) -> list[Row]:
    """One row per (pass, stream count), in first-run order, each field the median of its runs."""
    groups: dict[tuple[bool, int], list[Measurement]] = {}
    for measured in measurements:
        key = (measured.workload.pipeline, measured.workload.streams)
        groups.setdefault(key, []).append(measured)
    median = statistics.median
    return [
        Row(
            pass_name=pass_name(runs[0].workload),
            streams=runs[0].workload.streams,
            requests=runs[0].workload.requests,
            tokens_per_s=median(m.tokens_per_s for m in runs),
            client_us_per_token=median(m.client_us_per_token for m in runs),
            client_us_per_message=median(m.client_us_per_message for m in runs),
            messages_per_s=median(m.messages_per_s for m in runs),
            tokens_per_message=median(m.tokens / max(m.messages, 1) for m in runs),
            client_cores=median(m.client_cpu_s / m.wall_s for m in runs),
            engine_cores=median(m.engine_cpu_s / m.wall_s for m in runs),
            engine_us_per_token=median(m.engine_us_per_token for m in runs),
            capped=sum(m.capped for m in runs),
        )
        for runs in groups.values()
    ]


def markdown_table(rows: Sequence[Row]) -> str:
    lines = [
        "| pass | streams | requests | tokens/s | client CPU µs/token | client CPU µs/message "
        "| engine messages/s | tokens/message | client cores | engine cores "
        "| engine CPU µs/token |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        capped = f" ({row.capped} capped)" if row.capped else ""
        lines.append(
            f"| {row.pass_name}{capped} | {row.streams} | {row.requests} "
            f"| {row.tokens_per_s:,.0f} | {row.client_us_per_token:.1f} "
            f"| {row.client_us_per_message:,.1f} | {row.messages_per_s:,.0f} "
            f"| {row.tokens_per_message:.1f} | {row.client_cores:.2f} | {row.engine_cores:.2f} "
            f"| {row.engine_us_per_token:.1f} |"
        )
    return "\n".join(lines)


def bottleneck_lines(rows: Sequence[Row]) -> list[str]:
    """With a core each, the process that spends more CPU per token bounds the throughput."""
    lines = []
    for row in rows:
        heavier = "client" if row.client_us_per_token > row.engine_us_per_token else "engine"
        bound = 1e6 / max(row.client_us_per_token, row.engine_us_per_token)
        lines.append(
            f"- {row.pass_name}, {row.streams} stream(s): client {row.client_us_per_token:.1f} "
            f"vs engine {row.engine_us_per_token:.1f} CPU µs/token: the {heavier} is heavier; "
            f"a free core each would allow ~{bound:,.0f} tokens/s."
        )
    return lines


# (label, substrings of "filename function"); the first match wins, so specific ones go first.
PROFILE_AREAS: Final = (
    ("trio", ("site-packages/trio/",)),
    (
        "backend sockets (zmq_socket, zmq_backend, pyzmq)",
        ("zmq_socket.py", "zmq_backend.py", "site-packages/zmq/", "zmq.backend", "zmq.sugar"),
    ),
    (
        "backend decode (zmq_codec, wire outputs, msgspec)",
        ("zmq_codec.py", "vllm_zmq_outputs.py", "zmq_transport.py", "msgpack.Decoder"),
    ),
    ("backend demultiplex (zmq_outputs, in_flight)", ("zmq_outputs.py", "in_flight.py")),
    ("backend hand-off (event_stream, mailbox)", ("event_stream.py", "handoff.py")),
    (
        "pipeline stops + detokenize",
        ("smg_trio/core/stops.py", "smg_trio/core/detokenize.py", "smg_trio/model/folder.py"),
    ),
    (
        "pipeline render + assembler",
        ("smg_trio/core/render.py", "smg_trio/core/response_assembler.py", "json.Encoder"),
    ),
    ("request setup (finalize, ADD encoding)", ("smg_trio/core/", "smg_trio/wire/")),
    ("bench loop", ("bench/",)),
)
IDLE_FUNCTION: Final = "'poll' of 'select.epoll'"
"""trio's wait for I/O: idle time, not work."""
TASK_ENTRIES: Final = (
    ("output reader task (recv, decode, demultiplex)", "_read_outputs"),
    ("stream tasks (bench loop and what it calls)", "_run_stream"),
    ("input writer task (ADD/ABORT sends)", "write_inputs"),
)


def describe_profile(profiler: cProfile.Profile) -> str:
    """Busy main-thread time split by task, own time grouped by area, and the top functions."""
    table = dict(pstats.Stats(profiler).stats)  # type: ignore[attr-defined]
    idle = sum(entry[2] for key, entry in table.items() if IDLE_FUNCTION in key[2])
    table = {key: entry for key, entry in table.items() if IDLE_FUNCTION not in key[2]}
    total = sum(entry[2] for entry in table.values()) or 1.0
    lines = [
        f"profiled: {total:.2f} s busy in the main thread (plus {idle:.2f} s blocked in epoll)",
        "by task (cumulative):",
    ]
    accounted = 0.0
    for label, entry_point in TASK_ENTRIES:
        spent = sum(entry[3] for key, entry in table.items() if key[2] == entry_point)
        accounted += spent
        lines.append(f"  {100 * spent / total:5.1f}%  {label}")
    lines.append(f"  {100 * (total - accounted) / total:5.1f}%  trio scheduler and the rest")
    by_area: dict[str, float] = {}
    for (filename, _, function), entry in table.items():
        where = f"{filename} {function}"
        area = next(
            (name for name, marks in PROFILE_AREAS if any(mark in where for mark in marks)),
            "builtins, stdlib",
        )
        by_area[area] = by_area.get(area, 0.0) + entry[2]
    lines.append("by area (own time):")
    for area, own in sorted(by_area.items(), key=lambda item: item[1], reverse=True):
        lines.append(f"  {100 * own / total:5.1f}%  {area}")
    lines.append("top functions (own time, calls):")
    ranked = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:PROFILE_TOP]
    for (filename, line, function), (_, calls, own, _, _) in ranked:
        lines.append(
            f"  {100 * own / total:5.1f}%  {calls:>8,}  {_short(filename)}:{line}({function})"
        )
    return "\n".join(lines)


def _short(filename: str) -> str:
    for marker, keep in (("smg_trio/", True), ("bench/", True), ("site-packages/", False)):
        position = filename.find(marker)
        if position >= 0:
            return filename[position if keep else position + len(marker) :]
    return filename


def section_body(report: BenchReport, *, setup: str, interpretation: str) -> str:
    rows = summarize(report.measurements)
    parts = [
        "`make bench-zmq` runs the same. The engine subprocess and the client share these cores (and other jobs ran on the machine "
        "meanwhile), so tokens/s is noisy; the CPU-per-token columns are the steadier figures.",
        setup,
        "",
        markdown_table(rows),
        "",
        "CPU per token, client vs engine (medians):",
        "",
        *bottleneck_lines(rows),
        "",
    ]
    for name, profile in report.profiles.items():
        parts += [f"cProfile (wall clock) of one {name} run:", "", "```", profile, "```"]
        parts.append("")
    if interpretation:
        parts += [interpretation, ""]
    return "\n".join(parts)
