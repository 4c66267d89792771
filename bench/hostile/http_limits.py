"""I/O. `python -m bench http_limits`: the HTTP hardening acceptance checks (docs/http.md) against
`smg-trio serve` (a subprocess) in front of the counted reference vLLM engine (`--step-ms 20`,
so streams stay open), loopback only, every phase bounded in count and time.

    python -m bench http_limits [--quick] [--no-write] [--rapid-reset-s 20]

Phases: `Connection: close` (close delay after the response), keep-alive after generation
requests (all idle connections closed by the timer), 500 body dribblers (closed by the body
timeout with 408), control requests on fresh connections while the connection cap is held,
2,000 WebSocket opens against the WebSocket cap while /health is polled, h2: 1,000
concurrent streams over 10 connections and 5,000 requests on one connection, then
rapid reset (engine ADDs counted by the engine itself). The section "HTTP limits" of
Its section of bench/RESULTS.md is rewritten unless `--no-write` or `--quick`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final

import trio

from bench.hostile import http_limit_checks as checks
from bench.load.servers import (
    reference_engine_command,
    smg_trio_command,
    started_process,
    wait_serving,
)
from bench.reports.results_page import Recording, recording_parser
from harness.ports import free_port
from smg_trio.model.folder import demo_model_path

STEP_MS: Final = 20.0
KEEP_ALIVE_S: Final = 2.0
HEADER_TIMEOUT_S: Final = 15.0  # holds the cap long enough to open 700 holders one by one
BODY_TIMEOUT_S: Final = 6.0
BODY_IDLE_S: Final = 4.0  # longer than the dribblers' 2 s gap: the whole-body deadline ends them
MAX_CONNECTIONS: Final = 700
MAX_WEBSOCKETS: Final = 350
PHASE_CAP_S: Final = 120.0
READING: Final = (
    "Reading: the close delay runs from the response's last byte to the server's FIN; the "
    "dribblers' end times count from the first connect (opening 500 takes a second or two; "
    "each body timer starts at its own request head); the WebSocket storm keeps every served "
    "socket open to its end; rapid reset reconnects after each GOAWAY, so its engine ADDs are "
    "the total over all connections (about two per connection: streams whose ADD went out "
    "before their reset was read; what a reset stream costs the engine is the request path's "
    "part of issue 18 item 4)."
)


def server_flags() -> list[str]:
    return [
        *("--idle-timeout-s", str(KEEP_ALIVE_S), "--header-timeout-s", str(HEADER_TIMEOUT_S)),
        *("--body-timeout-s", str(BODY_TIMEOUT_S), "--body-idle-s", str(BODY_IDLE_S)),
        *("--max-connections", str(MAX_CONNECTIONS), "--max-websockets", str(MAX_WEBSOCKETS)),
    ]


def engine_adds(counts_file: Path) -> int:
    try:
        return len(json.loads(counts_file.read_text(encoding="utf-8"))["requests"])
    except (OSError, ValueError, KeyError):
        return 0


async def run_phases(quick: bool, rapid_reset_s: float) -> list[tuple[str, checks.Figures]]:
    scale = 10 if quick else 1
    model_path = demo_model_path()
    logs = Path(tempfile.mkdtemp(prefix="http-limits-"))
    counts = logs / "counts.json"
    port, handshake = free_port(), free_port()
    gateway = smg_trio_command(port, f"vllm+zmq://127.0.0.1:{handshake}", model_path)
    engine = reference_engine_command(
        f"tcp://127.0.0.1:{handshake}", model_path=model_path, step_ms=STEP_MS, counts_file=counts
    )
    results: list[tuple[str, checks.Figures]] = []

    async def phase(name: str, check: Callable[[], Awaitable[checks.Figures]]) -> None:
        with trio.fail_after(PHASE_CAP_S):
            figures = await check()
        results.append((name, figures))
        print(f"{name}: {figures}", flush=True)

    async with (
        started_process([*gateway, *server_flags()], logs / "gateway.log") as server,
        started_process(engine, logs / "engine.log"),
    ):
        model = await wait_serving(server, port, timeout_s=60)
        await phase(
            "HTTP/1.1 Connection: close",
            lambda: checks.connection_close(port, model, requests=50 // scale),
        )
        await phase(
            f"HTTP/1.1 keep-alive after generation (--idle-timeout-s {KEEP_ALIVE_S:g})",
            lambda: checks.keep_alive_after_generation(
                port, model, connections=50 // scale, idle_timeout_s=KEEP_ALIVE_S
            ),
        )

        async def dribblers() -> checks.Figures:
            figures, _ = await checks.body_dribblers(
                port, count=500 // scale, gap_s=2.0, deadline_s=BODY_TIMEOUT_S + 10
            )
            return figures

        await phase(
            f"500 body dribblers, 1 byte / 2 s (--body-timeout-s {BODY_TIMEOUT_S:g})", dribblers
        )
        await phase(
            f"control requests at the connection cap (--max-connections {MAX_CONNECTIONS})",
            lambda: checks.control_at_cap(port, holders=MAX_CONNECTIONS + 20, controls=20),
        )
        await phase(
            f"2,000 WebSocket opens (--max-websockets {MAX_WEBSOCKETS}) while /health is polled",
            lambda: checks.websocket_storm(port, sockets=2_000 // scale, concurrency=64),
        )
        await trio.sleep(1.0)  # the server notices the sockets' FINs and frees their slots
        await phase(
            "h2c: 1,000 concurrent streamed chats over 10 connections",
            lambda: checks.h2_streams(
                port, model, connections=10, per_connection=100 // scale, max_tokens=16
            ),
        )
        await phase(
            "h2c: 5,000 chats on one connection (100 in flight)",
            lambda: checks.h2_many_requests(port, model, requests=5_000 // scale, in_flight=100),
        )
        adds_before = engine_adds(counts)

        async def resets() -> checks.Figures:
            figures = await checks.rapid_reset(port, model, duration_s=rapid_reset_s)
            await trio.sleep(0.5)  # the engine's tally is rewritten at most every 50 ms
            figures["engine ADDs during the phase"] = engine_adds(counts) - adds_before
            return figures

        await phase(f"h2c rapid reset for {rapid_reset_s:g} s", resets)
    return results


def section_body(results: list[tuple[str, checks.Figures]]) -> str:
    lines = [
        f"2 cores shared with other engineers' jobs. Gateway: `smg-trio serve {' '.join(server_flags())}` in "
        f"front of the counted reference vLLM engine at {STEP_MS:g} ms steps, loopback.",
        "",
        "| check | figures |",
        "|---|---|",
    ]
    for name, figures in results:
        shown = {k: v for k, v in figures.items() if not k.endswith("_s") or k == "wall_s"}
        lines.append(f"| {name} | {'; '.join(f'{k}: {v}' for k, v in shown.items())} |")
    return "\n".join([*lines, "", READING]) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("http_limits", __doc__)
    parser.add_argument("--quick", action="store_true", help="a tenth of every count")
    parser.add_argument("--rapid-reset-s", type=float, default=20.0)
    args = parser.parse_args(argv)
    recording = Recording("http_limits", "HTTP limits")
    results = trio.run(run_phases, args.quick, args.rapid_reset_s)
    recording.publish(section_body(results), write=not (args.no_write or args.quick))
    return 0
