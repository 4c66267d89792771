"""An engine whose own reports show another model than its worker was declared for is refused
(docs/fleet.md §4, backends/declared_model.py): never routed to, one error log line naming
both, that model's requests 503 and the other models untouched. Over ZMQ the registration's
context length tells (an engine of the demo model, 4096, dialling a 256-token model's worker);
over gRPC the name GetModelInfo reports. A gateway of one model checks nothing (as before)."""

from __future__ import annotations

import json
import logging
import shutil
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.model_specs import ModelSpec
from smg_trio.serving.serve import Serving, serve
from smg_trio.serving.worker_specs import WorkerSpec
from tests.backends.grpc_reference import start_engine, stop_engine
from tests.e2e.models_server import HARMONY_MODEL, ServedFolder, models_server

TEST_TIMEOUT_S: Final = 40.0


def short_model(tmp_path: Path) -> Path:
    """The demo model with a 256-token context."""
    folder = tmp_path / "short_model"
    shutil.copytree(demo_model_path(), folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 256
    (folder / "config.json").write_text(json.dumps(config))
    return folder


async def refusal_logged(caplog: pytest.LogCaptureFixture, says: str) -> str:
    for _ in range(200):  # the engine registers within a second or two
        for record in caplog.records:
            if record.levelno == logging.ERROR and says in record.getMessage():
                return record.getMessage()
        await trio.sleep(0.05)
    raise AssertionError(f"no error line saying {says!r}")


async def test_a_zmq_engine_of_another_model_is_refused_and_its_model_answers_503(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    short = short_model(tmp_path)
    models = [
        ServedFolder(("demo",), demo_model_path(), 1, "Demo engine says hi."),
        ServedFolder(("short",), short, 1, "Short.", engine_folder=demo_model_path()),
    ]
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, models) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            line = await refusal_logged(caplog, "refused")
            assert "context length is 4096, more than model 'short' allows (256" in line
            (refused,) = server.workers_of("short")
            assert not refused.backend.statistics().ready
            body = {"model": "short", "prompt": "hi", "max_tokens": 2}
            assert (await client.post("/v1/completions", json=body)).status_code == 503
            body["model"] = "demo"
            assert (await client.post("/v1/completions", json=body)).status_code == 200


async def test_a_grpc_engine_naming_another_model_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), (tmp_path / "engine.log").open("wb") as log:
        process, port = await start_engine(Runtime.VLLM, log)  # serves the demo model
        try:
            config = GatewayConfig(  # the demo model's worker has no engine: not needed
                model_path=demo_model_path(),
                workers=(
                    WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0"),
                    WorkerSpec(Runtime.VLLM, Wire.GRPC, f"127.0.0.1:{port}", model="harmony"),
                ),
                port=0,
                response_store=f"sqlite:///{tmp_path / 'responses.sqlite3'}",
                models=(ModelSpec(model_path=HARMONY_MODEL, served_model_names=("harmony",)),),
            )
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                serving: Serving = await nursery.start(
                    partial(serve, config, shutdown_trigger=stop.wait)
                )
                line = await refusal_logged(caplog, "is refused")
                assert "serves model 'demo_model'" in line
                assert "model 'harmony'" in line
                body = {"model": "harmony", "prompt": "hi", "max_tokens": 2}
                async with httpx.AsyncClient(timeout=20) as client:
                    reply = await client.post(
                        f"http://127.0.0.1:{serving.port}/v1/completions", json=body
                    )
                assert reply.status_code == 503
                stop.set()
        finally:
            await stop_engine(process)
