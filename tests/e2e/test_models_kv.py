"""kv_events routing with two models (docs/fleet.md §4, docs/routing.md §9): the demo model's
two engines publish KV events and the gateway's policy is kv_events; the harmony model has
its own policy (round_robin) and one engine. Each shared prefix of the demo model stays on the
engine that cached it, the harmony model's requests all reach its own worker, and the KV index
holds only the demo workers' blocks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Final

import httpx
import trio

from harness.served_gateway import served_gateway
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.routing.kv_events import KvEventsPolicy
from smg_trio.serving.config import GatewayConfig
from smg_trio.serving.model_specs import ModelSpec
from smg_trio.serving.worker_specs import WorkerSpec
from tests.e2e.live_server import engine_log
from tests.e2e.models_server import HARMONY_MODEL

TEST_TIMEOUT_S: Final = 40.0
PREFIXES: Final = 4


async def test_kv_routing_and_its_index_are_per_model(tmp_path: Path) -> None:
    workers: list[WorkerSpec] = []
    flags: list[tuple[str, ...]] = []
    for number in range(2):
        events, replay = f"ipc://{tmp_path}/kv{number}.sock", f"ipc://{tmp_path}/kv{number}r.sock"
        workers.append(WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0", events, replay))
        flags.append(("--kv-events-endpoint", events, "--kv-events-replay-endpoint", replay))
    workers.append(WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0", model="harmony"))
    flags.append(("--model-path", str(HARMONY_MODEL)))
    config = GatewayConfig(
        model_path=demo_model_path(),
        served_model_names=("demo",),
        workers=tuple(workers),
        port=0,
        policy="kv_events",
        request_timeout_s=20.0,
        response_store=f"sqlite:///{tmp_path / 'responses.sqlite3'}",
        models=(
            ModelSpec(
                model_path=HARMONY_MODEL, served_model_names=("harmony",), policy="round_robin"
            ),
        ),
    )
    prefixes = [f"System {d}: " + f"rules of house {d} apply " * 40 for d in range(PREFIXES)]
    with trio.fail_after(TEST_TIMEOUT_S), engine_log(tmp_path / "engines.log") as log:
        async with served_gateway(config, log) as served:
            for address, extra in zip(served.serving.worker_addresses, flags, strict=True):
                argv = EngineCommand("vllm-zmq", handshake=address, step_ms=1.0, extra=extra)
                await served.start_engine(argv.argv())
            pool = served.serving.gateway.pool
            await served.wait_ready(pool.workers)
            policy = pool._policy
            assert isinstance(policy, KvEventsPolicy)
            landed: dict[int, Counter[str]] = {d: Counter() for d in range(PREFIXES)}
            url = f"http://127.0.0.1:{served.serving.port}"
            async with httpx.AsyncClient(base_url=url, timeout=20) as client:
                with trio.fail_after(10):  # until both subscribers hear their engines
                    for warm in range(1000):
                        if all(policy.index.blocks_of(w) for w in ("w1", "w2")):
                            break
                        body = {"model": "demo", "prompt": f"Warm-up {warm} " * 20, "max_tokens": 1}
                        assert (await client.post("/v1/completions", json=body)).status_code == 200
                        await trio.sleep(0.05)
                first_round: list[tuple[str, tuple[int, ...]]] = []
                for round_ in range(3):
                    for d, prefix in enumerate(prefixes):
                        for model in ("demo", "harmony"):
                            before = {row.id: row.requests for row in pool.snapshot()}
                            body = {"model": model, "prompt": f"{prefix} {round_}", "max_tokens": 1}
                            response = await client.post("/v1/completions", json=body)
                            assert response.status_code == 200, response.text
                            (worker,) = [r.id for r in pool.snapshot() if r.requests > before[r.id]]
                            if model == "harmony":
                                assert worker == "w3"
                            else:
                                landed[d][worker] += 1
                            if model == "demo" and round_ == 0:
                                tokens = await client.post(
                                    "/tokenize", json={"model": "demo", "prompt": body["prompt"]}
                                )
                                first_round.append((worker, tuple(tokens.json()["tokens"])))
                    if round_ == 0:  # the first round's blocks reach the index before long
                        for _ in range(1000):
                            if all(w in policy.index.match(ids) for w, ids in first_round):
                                break
                            await trio.sleep(0.01)
            assert all(len(workers) == 1 for workers in landed.values()), landed
            assert set().union(*landed.values()) <= {"w1", "w2"}
            assert not policy.index.blocks_of("w3")
