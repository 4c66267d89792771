"""Pure. The bench's one command registry: every benchmark (and every helper process a
benchmark starts) is `python -m bench NAME [args]`, found here by name. Each entry names the
function that runs it, `main(argv) -> exit status`, imported only when that command runs, so
listing the commands imports none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, cast

Main = Callable[[Sequence[str]], int]


@dataclass(frozen=True)
class Command:
    name: str
    entry: str  # "package.module:function"
    summary: str  # one line, for the list
    group: str

    def load(self) -> Main:
        module_name, _, function = self.entry.partition(":")
        return cast(Main, getattr(importlib.import_module(module_name), function))


def _group(group: str, *rows: tuple[str, str, str]) -> tuple[Command, ...]:
    return tuple(Command(name, entry, summary, group) for name, entry, summary in rows)


COMMANDS: Final = (
    *_group(
        "load (bench/load/)",
        ("scenarios", "bench.load.cli:scenarios", "side-by-side scenarios (a) (b) (c): make bench"),
        ("run", "bench.load.cli:run", "load one running server; its /metrics beside our view"),
        ("render", "bench.load.cli:render", "rewrite the load sections from results JSON"),
        ("routing", "bench.load.routing:main", "routing policies against round robin, full size"),
        (
            "kv_routing",
            "bench.load.kv_routing:main",
            "prefix-cache hit rates: kv_events and others",
        ),
        ("kv_index_memory", "bench.load.kv_index_memory:main", "the KV index with 1 M blocks"),
        ("model_memory", "bench.load.model_memory:main", "resident memory per loaded model"),
        ("vllm_serve_compare", "bench.load.vllm_serve_compare:main", "vllm bench serve, both"),
        ("stream_bar", "bench.load.stream_bar:main", "issue 44's bar: tok/s, CPU per 1k, TTFT"),
        ("stream_profile", "bench.load.stream_profile:main", "the bar's CPU per token, by layer"),
        ("counted_engine", "bench.load.counted_engine:main", "(helper) engine with a tally"),
        ("embed_bench", "bench.load.embed_bench:main", "embeddings: smg-trio beside vLLM"),
    ),
    *_group(
        "first token (bench/ttft/)",
        ("ttft_trace", "bench.ttft.trace:main", "one stream's first token, step by step"),
        ("ttft_paired", "bench.ttft.paired:main", "first token, gateways and floors interleaved"),
        ("cold_prepare", "bench.ttft.cold_prepare:main", "one request's prepare, hot and cold"),
        ("request_instructions", "bench.ttft.request_instructions:main", "callgrind counts"),
    ),
    *_group(
        "images (bench/images/)",
        (
            "image_cost",
            "bench.images.image_cost:main",
            "per-image stage costs; text ITL under images",
        ),
        ("image_loop_lag", "bench.images.loop_lag:main", "event-loop lag: threads or processes"),
        ("image_load", "bench.images.image_load:main", "(helper) image requests, back to back"),
    ),
    *_group(
        "engine backends (bench/backends/)",
        (
            "zmq_throughput",
            "bench.backends.zmq_throughput:main",
            "ZMQ backend client: make bench-zmq",
        ),
        ("grpc_throughput", "bench.backends.grpc_throughput:main", "gRPC client and its bridge"),
    ),
    *_group(
        "per-token pipeline, in process (bench/pipeline/)",
        (
            "core_pipeline",
            "bench.pipeline.core_pipeline:main",
            "pure core per token: make bench-core",
        ),
        (
            "token_lane",
            "bench.pipeline.token_lane:main",
            "a token's request-side layers, lane on/off",
        ),
        (
            "engine_lane",
            "bench.pipeline.engine_lane:main",
            "a token from a vLLM output message's bytes to the client sockets",
        ),
        ("parser_cpu", "bench.pipeline.parser_cpu:main", "CPU per token with output parsers"),
        ("messages_cost", "bench.pipeline.messages_cost:main", "Anthropic Messages against chat"),
        ("responses_stream", "bench.pipeline.responses_stream:main", "Responses against chat"),
        ("observability_cost", "bench.pipeline.observability_cost:main", "metrics and logs"),
        ("keepalive_scan", "bench.pipeline.keepalive_scan:main", "what keep-alives cost"),
    ),
    *_group(
        "HTTP floors (bench/floors/)",
        ("floor_compare", "bench.floors.floor_compare:main", "CPU per token: make bench-floor"),
        ("http_floor", "bench.floors.http_floor:main", "(helper) a floor server"),
        ("ttft_floor", "bench.floors.ttft_floor:main", "(helper) a first-token floor relay"),
    ),
    *_group(
        "tenants (bench/tenancy/)",
        ("redis_client", "bench.tenancy.redis_client:main", "Redis clients under trio, per call"),
        ("tenant_fleet", "bench.tenancy.tenant_fleet:main", "a minute's burst on 2 replicas"),
    ),
    *_group(
        "resilience (bench/resilience/)",
        ("migration_gap", "bench.resilience.migration_gap:main", "a killed engine's resume gap"),
        ("response_tail", "bench.resilience.response_tail:main", "event log, across processes"),
        ("resumable_cost", "bench.resilience.resumable_cost:main", "a resumable stream's cost"),
        (
            "response_tail_writer",
            "bench.resilience.response_tail:writer_main",
            "(helper) appends a response's events",
        ),
    ),
    *_group(
        "hostile clients (bench/hostile/)",
        ("hostile_input", "bench.hostile.hostile_input:main", "big prompts, fuzzed bodies"),
        ("stream_load", "bench.hostile.stream_load:main", "1,000 streams per transport: errors"),
        (
            "drain_sigterm",
            "bench.hostile.drain_sigterm:main",
            "SIGTERM with streams on 3 transports",
        ),
        ("http_limits", "bench.hostile.http_limits:main", "the HTTP hardening checks"),
        (
            "disconnect_storm",
            "bench.hostile.disconnect_storm:main",
            "no request outlives its client",
        ),
    ),
)
BY_NAME: Final = {command.name: command for command in COMMANDS}


def command_list() -> str:
    """Every command with its one-line summary, by group."""
    lines = ["usage: python -m bench NAME [args]   (python -m bench NAME --help: its flags)"]
    group = ""
    for command in COMMANDS:
        if command.group != group:
            group = command.group
            lines += ["", f"{group}:"]
        lines.append(f"  {command.name:<22}{command.summary}")
    return "\n".join(lines)
