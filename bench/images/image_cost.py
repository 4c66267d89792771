"""I/O. What images cost the gateway, and whether text streams notice (issue 42 item 7).

    python -m bench image_cost [--repeats 10] [--streams 4] [--tokens 96] [--images 16]
        [--step-ms 10] [--rounds 2] [--engines separate|shared] [--image-client process|inline]

1. Per image, in this process: wall time and CPU (thread time) of each stage, the median of
   `--repeats`: base64 decoding of the data: URI, fetching it from a loopback HTTP server
   (request/media_fetch.py, the address check allowing 127.0.0.1), decoding (Pillow), the
   model's processing (decode included: `ImageProcessor.process`), and encoding `mm_features`
   for the ADD. Two processor settings: the test model's (tiny-idefics3: 56 px tiles) and
   SmolVLM-256M's published ones (512 px tiles up to 2048 px, 64 tokens per tile), on a
   640x480 and a 1920x1080 JPEG of noise.
2. End to end: `smg-trio serve` (a subprocess) with SmolVLM's settings in front of reference
   vLLM engines (subprocesses, `--step-ms` per step, so a text stream's ITL floor is known).
   TTFT of a one-image chat request against the same request without its image (medians of
   `--repeats`, sequential). Then `--streams` streamed text chats of `--tokens` tokens each,
   alone, and again while `--images` concurrent one-image requests (1920x1080, SmolVLM's
   settings) are sent back to back for the streams' whole life: the inter-chunk gaps' p50 and
   p99 both ways, the gateway's own probe and CPU share, `--rounds` times. Where the text and
   image requests go (`--engines`) and who sends the images (`--image-client`):
   bench/images/text_under_images.py.

Bounded: every loop has a count, every wait a deadline; loopback only.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import io
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import numpy as np
import trio
from openai import AsyncOpenAI
from PIL import Image

from bench.images.text_under_images import itl_round, served
from smg_trio.core.media_addresses import MediaPolicy
from smg_trio.core.prepare import chat_prompt
from smg_trio.model.folder import load_model_dir
from smg_trio.model.image_decode import decoded_image
from smg_trio.model.vision import ImageProcessor, VisionRefusal, load_vision
from smg_trio.request.media_fetch import fetch_media
from smg_trio.wire.openai_decode import decode_chat_request
from smg_trio.wire.vllm_mm_features import encode_features

TEST_MODEL: Final = Path(__file__).resolve().parents[2] / "tests" / "vision_model"
# SmolVLM-256M-Instruct's published processor settings (its processor_config.json).
SMOLVLM: Final = {
    "image_seq_len": 64,
    "image_processor": {
        "do_convert_rgb": True,
        "do_image_splitting": True,
        "do_normalize": True,
        "do_pad": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "max_image_size": {"longest_edge": 512},
        "resample": 1,
        "rescale_factor": 1 / 255,
        "size": {"longest_edge": 2048},
    },
}
MAX_REPEATS: Final = 200
MAX_PROBES: Final = 5000
PROBE_GAP_S: Final = 0.02
DEADLINE_S: Final = 600.0


def jpeg(width: int, height: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def smolvlm_folder(root: Path) -> Path:
    """The test model's folder with SmolVLM-256M's processor settings."""
    folder = root / "smolvlm-settings"
    shutil.copytree(TEST_MODEL, folder)
    (folder / "processor_config.json").write_text(json.dumps(SMOLVLM))
    return folder


def _processor(folder: Path) -> ImageProcessor:
    vision = load_vision(folder, folder.name)
    assert vision is not None
    assert not isinstance(vision, VisionRefusal), vision
    return vision


def _timed(work: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and thread-CPU milliseconds of `work`."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.thread_time()
        work()
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


async def _fetch_ms(data: bytes, repeats: int) -> float:
    """Median wall ms of fetching `data` from a loopback server (Content-Length, one read)."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: "
        + str(len(data)).encode()
        + b"\r\nConnection: close\r\n\r\n"
    )

    async def serve(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(65536)
            await stream.send_all(head + data)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        policy = MediaPolicy(allowed_domains=("127.0.0.1",))
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            got = await fetch_media(
                f"http://127.0.0.1:{port}/x.jpg", policy, max_bytes=len(data), param="p"
            )
            times.append(time.perf_counter() - started)
            assert got == data
        nursery.cancel_scope.cancel()
    return statistics.median(times) * 1e3


def stage_rows(root: Path, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for settings, folder in (("tiny-idefics3", TEST_MODEL), ("SmolVLM-256M", smolvlm_folder(root))):
        processor = _processor(folder)
        model = load_model_dir(folder).prompt_model()
        for width, height in ((640, 480), (1920, 1080)):
            data = jpeg(width, height)
            uri = "data:image/jpeg;base64," + base64.b64encode(data).decode()
            payload = uri.split(",", 1)[1]
            image = processor.process(data, "p")
            chat = decode_chat_request(
                json.dumps(
                    {
                        "model": "m",
                        "messages": [
                            {
                                "role": "user",
                                "content": [{"type": "image_url", "image_url": {"url": uri}}],
                            }
                        ],
                    }
                ).encode()
            )
            now = dt.datetime.now(dt.UTC)
            ids, features = chat_prompt(chat, model, now=now, images=[image])
            row: dict[str, Any] = {
                "settings": settings,
                "image": f"{width}x{height} JPEG, {len(data) // 1024} KiB",
                "tokens": len(ids),
                "tensor_kib": features[0].nbytes // 1024,
            }
            row["base64"] = _timed(partial(base64.b64decode, payload), repeats)
            row["fetch_wall_ms"] = trio.run(_fetch_ms, data, repeats)
            row["decode"] = _timed(partial(decoded_image, data, "p"), repeats)
            row["process"] = _timed(partial(processor.process, data, "p"), repeats)
            row["encode"] = _timed(partial(encode_features, features), repeats)
            rows.append(row)
    return rows


async def _ttft(sdk: AsyncOpenAI, model: str, content: Any) -> float:
    started = time.perf_counter()
    stream = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        max_tokens=4,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    first = None
    async for chunk in stream:
        choice = chunk.choices[0] if chunk.choices else None
        if first is None and choice is not None and (choice.delta.content or choice.finish_reason):
            first = time.perf_counter() - started  # the first token's text (or the end)
    return time.perf_counter() - started if first is None else first


async def end_to_end(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    folder = smolvlm_folder(root / "e2e")
    uri = "data:image/jpeg;base64," + base64.b64encode(jpeg(1920, 1080, seed=1)).decode()
    uri_file = root / "image.uri"
    uri_file.write_text(uri)
    out: dict[str, Any] = {
        "engines": args.engines,
        "image_client": args.image_client,
        "stand_ins_nice": args.stand_ins_nice,
        "rounds": [],
    }
    with trio.fail_after(DEADLINE_S):
        async with served(folder, args.step_ms, root, args.engines, args.stand_ins_nice) as where:
            base = f"http://127.0.0.1:{where.port}/v1"
            async with AsyncOpenAI(base_url=base, api_key="unused", max_retries=0) as sdk:
                image_content = [
                    {"type": "image_url", "image_url": {"url": uri}},
                    {"type": "text", "text": "?"},
                ]
                text_only = [{"type": "text", "text": "?"}]
                await _ttft(sdk, where.vision_model, image_content)  # warm-up
                texts, images = [], []
                for _ in range(args.repeats):
                    texts.append(await _ttft(sdk, where.vision_model, text_only))
                    images.append(await _ttft(sdk, where.vision_model, image_content))
                out["ttft_text_ms"] = statistics.median(texts) * 1e3
                out["ttft_image_ms"] = statistics.median(images) * 1e3
            for _ in range(args.rounds):
                out["rounds"].append(await itl_round(where, uri_file, args))
    return out


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench image_cost")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--engines",
        choices=("separate", "shared"),
        default="separate",
        help="text and image requests on engines of their own (default) or on one",
    )
    parser.add_argument(
        "--image-client",
        choices=("process", "inline"),
        default="process",
        help="the image requests from a process of their own (default) or this one",
    )
    parser.add_argument(
        "--stand-ins-nice",
        type=int,
        default=10,
        help="nice of the vision engine and the image client (0: not niced)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.stand_ins_nice <= 19:
        parser.error("--stand-ins-nice must be in 0..19")
    args.repeats = max(1, min(args.repeats, MAX_REPEATS))
    with tempfile.TemporaryDirectory(prefix="bench-images-") as tmp:
        root = Path(tmp)
        rows = stage_rows(root, args.repeats)
        (root / "e2e").mkdir()
        e2e = trio.run(end_to_end, args, root)
    print(json.dumps({"stages": rows, "end_to_end": e2e}, indent=1))
    return 0
