"""I/O. Text streams' inter-chunk gaps with and without a steady image load (image_cost's
rounds; docs/performance.md §8).

What is compared is the gateway's share: with `--engines separate` (the default) the gateway
serves the same folder as two models, `text` and `vision`, each in front of its own reference
engine, so the text streams' engine steps at its own pace whatever the image requests cost an
engine (a real engine runs its vision encoder on its accelerator; our reference engine decodes
every tensor on the loop that steps its streams), and only the gateway is shared. With
`--engines shared` both kinds go to one engine (the earlier set-up, for comparison). With
`--image-client process` (the default) the image requests come from a process of their own
(`python -m bench image_load`), so this process, which times the text chunks, sends none of
their bodies; `inline` sends them from this process (the earlier set-up). The image side's
stand-ins, the vision engine and the image client (in a deployment, another machine and other
users), run at `--stand-ins-nice` (default 10; 0: as everything else), so on a machine of two
cores their CPU (the reference engine decodes 65 MiB of tensors per image request) comes from
what the gateway and the text engine leave, and what is left to see is the gateway's share.

Bounded: every loop has a count, every wait a deadline; loopback only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import openai
import trio
from openai import AsyncOpenAI

from bench.images.image_load import image_request
from bench.load.runner import ProcessProbe
from bench.load.servers import (
    gateway_log_flags,
    python_module,
    started_process,
    wait_serving,
)
from bench.load.targets import reference_engine, smg_trio_target
from harness.ports import LOOPBACK, free_port

MAX_IMAGE_REQUESTS: Final = 200  # per loop, inline
MAX_PROBES: Final = 5000
PROBE_GAP_S: Final = 0.02
READY_S: Final = 120.0
MODEL_READY_TRIES: Final = 200


@dataclass(frozen=True)
class Served:
    """Where the rounds send their requests: the gateway's port and the two models' names
    (the same name when one engine serves both)."""

    port: int
    text_model: str
    vision_model: str
    probe: ProcessProbe


def niced(command: Sequence[str], nice: int) -> list[str]:
    return ["nice", "-n", str(nice), *command] if nice else list(command)


@asynccontextmanager
async def served(
    folder: Path, step_ms: float, log_dir: Path, engines: str, nice: int = 0
) -> AsyncIterator[Served]:
    if engines == "shared":
        async with smg_trio_target(folder, reference_engine(folder, step_ms), log_dir) as target:
            assert target.port is not None
            assert target.probe is not None
            yield Served(target.port, target.model, target.model, target.probe)
        return
    port, text_port, vision_port = free_port(), free_port(), free_port()
    engine = reference_engine(folder, step_ms)
    command = python_module(
        "smg_trio",
        "serve",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--model",
        f"text={folder}",
        "--model",
        f"vision={folder}",
        "--worker",
        f"vllm+zmq://{LOOPBACK}:{text_port}?model=text",
        "--worker",
        f"vllm+zmq://{LOOPBACK}:{vision_port}?model=vision",
        *gateway_log_flags,
    )
    async with (
        started_process(command, log_dir / "smg-trio-two-models.log") as gateway,
        started_process(engine.command(text_port), log_dir / "engine-text.log"),
        started_process(niced(engine.command(vision_port), nice), log_dir / "engine-vision.log"),
    ):
        await wait_serving(gateway, port, timeout_s=READY_S)
        async with AsyncOpenAI(
            base_url=f"http://{LOOPBACK}:{port}/v1", api_key="unused", max_retries=0
        ) as sdk:
            for model in ("text", "vision"):
                await _answers(sdk, model)
        yield Served(port, "text", "vision", ProcessProbe(gateway.process.pid))


async def _answers(sdk: AsyncOpenAI, model: str) -> None:
    """Until `model` answers a completion (its engine registered), bounded."""
    with trio.fail_after(READY_S):
        for _ in range(MODEL_READY_TRIES):
            try:
                await sdk.completions.create(model=model, prompt="hi", max_tokens=1)
                return
            except openai.APIError:  # not registered yet: a 503 or the like
                await trio.sleep(0.5)
    raise RuntimeError(f"model {model!r} never answered")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _stream_gaps(sdk: AsyncOpenAI, model: str, tokens: int) -> list[float]:
    gaps: list[float] = []
    stream = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=tokens,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    last = None
    async for chunk in stream:
        if not chunk.choices or not chunk.choices[0].delta.content:
            continue
        now = time.perf_counter()
        if last is not None:
            gaps.append(now - last)
        last = now
    return gaps


class _ImageLoad:
    """The image requests beside the streams: `--images` loops, inline or in their process."""

    def __init__(self, args: argparse.Namespace, where: Served, uri_file: Path) -> None:
        self._args, self._where, self._uri_file = args, where, uri_file
        self.latencies_ms: list[float] = []

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        if self._args.image_client == "inline":
            async with self._inline():
                yield
        else:
            async with self._process():
                yield

    @asynccontextmanager
    async def _inline(self) -> AsyncIterator[None]:
        base = f"http://{LOOPBACK}:{self._where.port}/v1"
        uri = self._uri_file.read_text()

        async def loop(sdk: AsyncOpenAI) -> None:
            for _ in range(MAX_IMAGE_REQUESTS):
                took = await image_request(sdk, self._where.vision_model, uri)
                self.latencies_ms.append(took * 1e3)

        async with (
            AsyncOpenAI(base_url=base, api_key="unused", max_retries=0) as sdk,
            trio.open_nursery() as nursery,
        ):
            for _ in range(self._args.images):
                nursery.start_soon(loop, sdk)
            await trio.sleep(0.5)  # the image load running before the streams start
            yield
            nursery.cancel_scope.cancel()

    @asynccontextmanager
    async def _process(self) -> AsyncIterator[None]:
        command = niced(
            python_module(
                "bench",
                "image_load",
                "--base-url",
                f"http://{LOOPBACK}:{self._where.port}/v1",
                "--model",
                self._where.vision_model,
                "--uri-file",
                str(self._uri_file),
                "--concurrency",
                str(self._args.images),
            ),
            self._args.stand_ins_nice,
        )
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr
        )
        assert process.stdin is not None
        assert process.stdout is not None
        out = b""
        try:
            with trio.fail_after(READY_S):  # its first image answered: the load is running
                while b"running\n" not in out:
                    data = await process.stdout.receive_some(65536)
                    if not data:
                        raise RuntimeError(f"image_load ended early: {out!r}")
                    out += data
            yield
            await process.stdin.aclose()
            with trio.fail_after(READY_S):
                while data := await process.stdout.receive_some(65536):
                    out += data
                await process.wait()
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        result = json.loads(out.decode().strip().splitlines()[-1])
        self.latencies_ms.extend(result["latency_ms"])


async def itl_round(
    where: Served, uri_file: Path, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    return {
        "alone": await _itl_once(where, uri_file, args, loaded=False),
        "with_images": await _itl_once(where, uri_file, args, loaded=True),
    }


async def _itl_once(
    where: Served, uri_file: Path, args: argparse.Namespace, *, loaded: bool
) -> dict[str, Any]:
    gaps: list[list[float]] = []
    probes: list[float] = []
    done = trio.Event()
    load = _ImageLoad(args, where, uri_file)
    base = f"http://{LOOPBACK}:{where.port}/v1"
    cpu_before = where.probe.cpu_s()
    started = time.perf_counter()
    async with AsyncOpenAI(base_url=base, api_key="unused", max_retries=0) as sdk:

        async def stream_one() -> None:
            gaps.append(await _stream_gaps(sdk, where.text_model, args.tokens))

        async def probe_loop() -> None:
            """The gateway alone (GET /v1/models, no engine): its event loop's answer time."""
            for _ in range(MAX_PROBES):
                if done.is_set():
                    return
                begun = time.perf_counter()
                await sdk.models.list()
                probes.append(time.perf_counter() - begun)
                await trio.sleep(PROBE_GAP_S)

        async with (
            load.running() if loaded else contextlib.nullcontext(),
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(probe_loop)
            async with trio.open_nursery() as streams:
                for _ in range(args.streams):
                    streams.start_soon(stream_one)
            done.set()
    wall = time.perf_counter() - started
    flat = [gap * 1e3 for each in gaps for gap in each]
    return {
        "probe_p50_ms": statistics.median(probes) * 1e3,
        "probe_p99_ms": percentile(probes, 0.99) * 1e3,
        "p50_ms": percentile(flat, 0.5),
        "p99_ms": percentile(flat, 0.99),
        "gaps": len(flat),
        "gateway_cpu_share": (where.probe.cpu_s() - cpu_before) / wall,
        "image_requests": len(load.latencies_ms),
        "image_latency_p50_ms": statistics.median(load.latencies_ms) if load.latencies_ms else None,
    }
