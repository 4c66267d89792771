"""I/O. `python -m bench drain_sigterm`: the drain rule (docs/resilience.md §4) at full size. A
`smg-trio serve` process and the reference vLLM engine on loopback; `--streams` streaming chat
requests on each of HTTP/1.1, h2c (one connection) and WebSocket (one socket), their lengths
spread so some end before `--drain-timeout-s` and some after; SIGTERM once every stream sent
its first chunk. Each stream must end with exactly one terminal: SSE `[DONE]` (after exactly
one `draining` error event if it was cut), a WebSocket id one `done` or `draining` error frame.
Also checked: new requests 503, `/health` 503, `/liveness` 200 during the drain, exit status 0.
The figures replace its section of bench/RESULTS.md (not with `--no-write`).
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket

from bench.load.servers import (
    reference_engine_command,
    smg_trio_command,
    started_process,
    wait_serving,
)
from bench.reports.results_page import Recording, recording_parser
from harness.ports import free_port
from smg_trio.model.folder import demo_model_path

CHAT: Final = "/v1/chat/completions"
GOOD: Final = frozenset({"finished", "drained"})


def body(index: int, args: argparse.Namespace) -> dict[str, Any]:
    tokens = args.min_tokens + (index * 37) % args.token_spread
    content = f"stream {index}"
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": tokens,
        "stream": True,
        "ignore_eos": True,
    }


def sse_verdict(lines: list[str]) -> str:
    events = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    codes = [json.loads(e)["error"].get("code") for e in events if e.startswith('{"error"')]
    if events[-1:] != ["[DONE]"] or events.count("[DONE]") != 1:
        return "no single [DONE] at the end"
    if not codes:
        return "finished"
    if codes == ["draining"] and events[-2].startswith('{"error"'):
        return "drained"
    return f"errors {codes}"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    port, handshake = free_port(), free_port()
    model = demo_model_path()
    verdicts: dict[str, str] = {}
    during: dict[str, int] = {}
    started = trio.Semaphore(0)
    count = args.streams
    with tempfile.TemporaryDirectory(prefix="drain-") as scratch:
        logs = Path(scratch)
        command = [
            *smg_trio_command(port, f"vllm+zmq://127.0.0.1:{handshake}", model),
            "--drain-timeout-s",
            str(args.drain_timeout_s),
        ]
        engine = reference_engine_command(
            f"tcp://127.0.0.1:{handshake}", model_path=model, step_ms=args.step_ms
        )
        async with (
            started_process(command, logs / "gateway.log") as gateway,
            started_process(engine, logs / "engine.log"),
        ):
            await wait_serving(gateway, port, timeout_s=60)
            base = f"http://127.0.0.1:{port}"

            async def sse(client: httpx.AsyncClient, name: str, index: int) -> None:
                lines: list[str] = []
                try:
                    async with client.stream("POST", CHAT, json=body(index, args)) as response:
                        async for line in response.aiter_lines():
                            if not lines:
                                started.release()
                            lines.append(line)
                    verdicts[f"{name}{index}"] = sse_verdict(lines)
                except httpx.HTTPError as exc:
                    verdicts[f"{name}{index}"] = f"{type(exc).__name__}"

            async def websocket() -> None:
                url = base.replace("http://", "ws://") + "/v1/ws"
                ends: dict[int, list[str]] = {}
                async with trio_websocket.open_websocket_url(url) as ws:
                    for index in range(count):
                        request = {"type": "request", "id": index, "path": CHAT}
                        await ws.send_message(json.dumps({**request, "body": body(index, args)}))
                    seen: set[int] = set()
                    while len(ends) < count:
                        frame = json.loads(await ws.get_message())
                        if frame["id"] is not None and frame["id"] not in seen:
                            seen.add(frame["id"])
                            started.release()
                        if frame["type"] in ("done", "error", "response"):
                            code = frame.get("error", {}).get("code")
                            ends.setdefault(frame["id"], []).append(code or "done")
                    with trio.move_on_after(0.05):  # frames queued behind the last end
                        while True:
                            frame = json.loads(await ws.get_message())
                            if frame["type"] in ("done", "error", "response"):
                                ends.setdefault(frame["id"], []).append("again")
                for index in range(count):
                    kinds = ends.get(index, [])
                    verdicts[f"ws{index}"] = (
                        {"done": "finished", "draining": "drained"}.get(kinds[0], str(kinds))
                        if len(kinds) == 1
                        else f"terminals {kinds}"
                    )

            async def probe(client: httpx.AsyncClient) -> None:
                await trio.sleep(min(0.2, args.drain_timeout_s / 2))
                during["new request"] = (await client.post(CHAT, json=body(0, args))).status_code
                during["/health"] = (await client.get("/health")).status_code
                during["/liveness"] = (await client.get("/liveness")).status_code

            limits = httpx.Limits(max_connections=count + 8)
            async with (
                httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as http1,
                httpx.AsyncClient(base_url=base, timeout=120, http1=False, http2=True) as h2c,
                trio.open_nursery() as nursery,
            ):
                await h2c.get("/v1/models")  # its one connection, before the streams
                for index in range(count):
                    nursery.start_soon(sse, http1, "http1-", index)
                    nursery.start_soon(sse, h2c, "h2c-", index)
                nursery.start_soon(websocket)
                for _ in range(3 * count):
                    await started.acquire()
                gateway.process.send_signal(signal.SIGTERM)
                nursery.start_soon(probe, http1)
            exit_status = await gateway.process.wait()
    return {"verdicts": verdicts, "during": during, "exit": exit_status}


def report(result: dict[str, Any], args: argparse.Namespace) -> str:
    verdicts: dict[str, str] = result["verdicts"]
    lines = [
        "2 shared cores, other helpers running (load average in the header). `smg-trio serve` "
        f"and the reference vLLM engine (step {args.step_ms:g} ms) as processes on loopback; "
        f"--drain-timeout-s {args.drain_timeout_s:g}; streams of {args.min_tokens} to "
        f"{args.min_tokens + args.token_spread - 1} tokens, SIGTERM once all had begun.",
        "",
        "| transport | streams | finished normally | drained (one `draining` error, then the "
        "end) | anything else |",
        "|---|---:|---:|---:|---|",
    ]
    for transport in ("http1-", "h2c-", "ws"):
        mine = [v for name, v in verdicts.items() if name.startswith(transport)]
        kinds = Counter(mine)
        other = {k: n for k, n in kinds.items() if k not in GOOD}
        lines.append(
            f"| {transport.rstrip('-')} | {len(mine)} | {kinds['finished']} | "
            f"{kinds['drained']} | {other or 'none'} |"
        )
    during = ", ".join(f"{what} {status}" for what, status in result["during"].items())
    lines += ["", f"During the drain: {during}; exit status {result['exit']}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("drain_sigterm", __doc__)
    parser.add_argument("--streams", type=int, default=30, help="per transport")
    parser.add_argument("--drain-timeout-s", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--min-tokens", type=int, default=50)
    parser.add_argument("--token-spread", type=int, default=600)
    args = parser.parse_args(argv)
    recording = Recording("drain_sigterm", "Drain on SIGTERM, every transport (issue 33)")
    result = trio.run(run, args)
    recording.publish(report(result, args), write=not args.no_write)
    bad = [v for v in result["verdicts"].values() if v not in GOOD]
    return 1 if bad or result["exit"] != 0 else 0
