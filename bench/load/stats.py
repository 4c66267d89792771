"""Pure. Per-request measurements and their summary: TTFT, inter-token latency and end-to-end
latency percentiles, output tokens/s, errors, and the server process's CPU and memory; and the
stop-cost tally of scenario (c).

Definitions (those of `vllm bench serve`, so the anchor rows compare):
- TTFT: from just before the request is sent to the first chunk that carries output text (or,
  for the direct engine, output tokens).
- inter-token latency (ITL): the gaps between successive output-bearing chunks of one request,
  pooled over every request of the run; a chunk that carries several tokens is one gap.
- end-to-end: from send to the end of the stream.
- output tokens: the `usage.completion_tokens` the server reports (the engine's count), else
  the number of output-bearing chunks.
- output tokens/s: all completed output tokens / the run's wall time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    started_s: float  # since the run began
    ttft_s: float | None
    itl_s: tuple[float, ...]
    e2e_s: float
    output_tokens: int
    finish: str | None = None  # the finish_reason of the (first) choice
    error: str | None = None  # None: the request completed
    cancelled: bool = False  # still running at the time cap


@dataclass
class StreamMeter:
    """Fed every chunk of one streaming response as it arrives; becomes a `RequestRecord`."""

    started_at: float  # the clock reading when the request was sent
    run_started_at: float
    first_output_at: float | None = None
    last_output_at: float | None = None
    gaps: list[float] = field(default_factory=list)
    output_chunks: int = 0
    usage_tokens: int | None = None
    finish: str | None = None
    error: str | None = None

    def on_output(self, now: float) -> None:
        """Output text (or tokens) arrived."""
        if self.first_output_at is None:
            self.first_output_at = now
        elif self.last_output_at is not None:
            self.gaps.append(now - self.last_output_at)
        self.last_output_at = now
        self.output_chunks += 1

    def on_chunk(self, chunk: Mapping[str, Any], now: float) -> None:
        """An OpenAI streaming chunk (chat or completions); error objects are recorded."""
        error = chunk.get("error")
        if error is not None:
            self.error = _error_text(error)
            return
        has_output = False
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            has_output |= bool(text)
            reason = choice.get("finish_reason")
            if reason is not None and self.finish is None:
                self.finish = str(reason)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        if has_output:
            self.on_output(now)

    def record(
        self, now: float, *, error: str | None = None, cancelled: bool = False
    ) -> RequestRecord:
        ttft = None if self.first_output_at is None else self.first_output_at - self.started_at
        tokens = self.usage_tokens if self.usage_tokens is not None else self.output_chunks
        return RequestRecord(
            started_s=self.started_at - self.run_started_at,
            ttft_s=ttft,
            itl_s=tuple(self.gaps),
            e2e_s=now - self.started_at,
            output_tokens=tokens,
            finish=self.finish,
            error=error or self.error,
            cancelled=cancelled,
        )


def _error_text(error: object) -> str:
    """An error event's `code: message` (its kind first, for `error_kinds`)."""
    if isinstance(error, dict):
        code = error.get("code") or error.get("type") or "error event"
        return f"{code}: {error.get('message') or error}"
    return str(error)


def error_kind(text: str) -> str:
    """What an error record counts as: an error event's code, or the exception's name (the
    text before its first colon)."""
    return text.split(":", 1)[0].strip() or "unknown"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Percentiles:
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Percentiles:
        def ms(q: float) -> float | None:
            value = percentile(seconds, q)
            return None if value is None else value * 1000

        return cls(ms(50), ms(90), ms(99))


@dataclass(frozen=True)
class ProcessUsage:
    """What the measured server process used during the run (None: no process to read)."""

    cpu_s: float
    peak_rss_mb: float


@dataclass(frozen=True)
class RunSummary:
    target: str  # e.g. "smg-trio h2c", "direct", "vLLM HTTP"
    scenario: str  # e.g. "ref engine, step 0 ms"
    load: str  # the arrival label, e.g. "c=64"
    streams: int | None  # the fixed concurrency, None for open loop
    sent: int
    completed: int
    errors: int
    cancelled: int
    wall_s: float
    output_tokens: int
    tokens_per_s: float
    ttft: Percentiles
    itl: Percentiles
    e2e: Percentiles
    server: ProcessUsage | None
    client_cpu_s: float  # the load generator's own process (for `direct`: the backend too)
    first_error: str | None = None
    error_kinds: dict[str, int] = field(default_factory=dict)
    """Errors by kind (`error_kind`): an error event's code, or the client's exception."""

    @property
    def tokens_per_server_cpu_s(self) -> float | None:
        if self.server is None or self.server.cpu_s <= 0:
            return None
        return self.output_tokens / self.server.cpu_s


def summarize(
    records: Sequence[RequestRecord],
    *,
    target: str,
    scenario: str,
    load: str,
    streams: int | None,
    wall_s: float,
    server: ProcessUsage | None,
    client_cpu_s: float,
) -> RunSummary:
    completed = [r for r in records if r.error is None and not r.cancelled]
    errors = [r for r in records if r.error is not None and not r.cancelled]
    tokens = sum(r.output_tokens for r in completed)
    return RunSummary(
        target=target,
        scenario=scenario,
        load=load,
        streams=streams,
        sent=len(records),
        completed=len(completed),
        errors=len(errors),
        cancelled=sum(r.cancelled for r in records),
        wall_s=wall_s,
        output_tokens=tokens,
        tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        ttft=Percentiles.of([r.ttft_s for r in completed if r.ttft_s is not None]),
        itl=Percentiles.of([gap for r in completed for gap in r.itl_s]),
        e2e=Percentiles.of([r.e2e_s for r in completed]),
        server=server,
        client_cpu_s=client_cpu_s,
        first_error=errors[0].error if errors else None,
        error_kinds=dict(Counter(error_kind(r.error) for r in errors if r.error is not None)),
    )


@dataclass(frozen=True)
class StopCost:
    target: str
    streams: int
    requests: int
    stopped: int  # requests the client saw end with finish_reason "stop"
    stop_at: int  # output tokens it takes to reach the stop string
    max_tokens: int
    step_ms: float
    engine_tokens: tuple[int, ...]  # per engine request, as the engine counted them
    ends: tuple[str, ...]  # per engine request: aborted / finished

    @property
    def after_stop(self) -> tuple[int, ...]:
        return tuple(tokens - self.stop_at for tokens in self.engine_tokens)

    @property
    def after_stop_mean(self) -> float:
        return sum(self.after_stop) / len(self.after_stop) if self.after_stop else 0.0
