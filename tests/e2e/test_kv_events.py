"""kv_events end to end (docs/routing.md §9): two reference vLLM engines keep a prefix cache and
publish vLLM's KV events; the gateway subscribes to both, routes each shared prefix to the
engine that reported it, and that engine reports the prefix as cached; an engine's
`reset_prefix_cache` (AllBlocksCleared) empties its part of the index."""

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
from smg_trio.serving.worker_specs import WorkerSpec
from tests.e2e.live_server import MODEL, engine_log

TEST_TIMEOUT_S: Final = 30.0
PREFIXES: Final = 6


def kv_config(tmp_path: Path, **settings: object) -> tuple[GatewayConfig, list[list[str]]]:
    """Two ZMQ workers with KV-event endpoints in `tmp_path`, and each engine's extra flags."""
    workers = []
    flags = []
    for number in range(2):
        events, replay = f"ipc://{tmp_path}/kv{number}.sock", f"ipc://{tmp_path}/kv{number}r.sock"
        workers.append(WorkerSpec(Runtime.VLLM, Wire.ZMQ, "127.0.0.1:0", events, replay))
        flags.append(["--kv-events-endpoint", events, "--kv-events-replay-endpoint", replay])
    config = GatewayConfig(
        model_path=demo_model_path(),
        workers=tuple(workers),
        port=0,
        policy="kv_events",
        request_timeout_s=20.0,
        **settings,  # type: ignore[arg-type]
    )
    return config, flags


async def test_each_shared_prefix_stays_on_the_engine_that_cached_it(tmp_path: Path) -> None:
    prefixes = [f"System {d}: " + f"rules of house {d} apply " * 40 for d in range(PREFIXES)]
    config, flags = kv_config(tmp_path)
    with trio.fail_after(TEST_TIMEOUT_S), engine_log(tmp_path / "engines.log") as log:
        async with served_gateway(config, log) as served:
            for address, extra in zip(served.serving.worker_addresses, flags, strict=True):
                await served.start_engine(
                    EngineCommand(
                        "vllm-zmq", handshake=address, step_ms=1.0, extra=tuple(extra)
                    ).argv()
                )
            pool = served.serving.gateway.pool
            await served.wait_ready(pool.workers)
            policy = pool._policy
            assert isinstance(policy, KvEventsPolicy)
            landed: dict[int, Counter[str]] = {d: Counter() for d in range(PREFIXES)}
            cached: list[int] = []
            first_round: list[tuple[str, tuple[int, ...]]] = []
            url = f"http://127.0.0.1:{served.serving.port}"
            async with httpx.AsyncClient(base_url=url, timeout=20) as client:
                # Until both subscribers hear their engines (a PUB drops what it sends before
                # its SUB connected, and only a later batch brings it back by replay).
                with trio.fail_after(10):
                    for warm in range(1000):
                        if all(policy.index.blocks_of(w.name) for w in pool.workers):
                            break
                        body = {"model": MODEL, "prompt": f"Warm-up {warm} " * 20, "max_tokens": 1}
                        assert (await client.post("/v1/completions", json=body)).status_code == 200
                        await trio.sleep(0.05)
                for round_ in range(3):
                    for d, prefix in enumerate(prefixes):
                        before = {row.id: row.requests for row in pool.snapshot()}
                        body = {
                            "model": MODEL,
                            "prompt": f"{prefix} user {round_}",
                            "max_tokens": 1,
                        }
                        response = await client.post("/v1/completions", json=body)
                        assert response.status_code == 200, response.text
                        (worker,) = [r.id for r in pool.snapshot() if r.requests > before[r.id]]
                        landed[d][worker] += 1
                        details = response.json()["usage"].get("prompt_tokens_details") or {}
                        if round_:
                            cached.append(details.get("cached_tokens", 0))
                        if round_ == 0:
                            tokens = await client.post(
                                "/tokenize", json={"model": MODEL, "prompt": body["prompt"]}
                            )
                            first_round.append((worker, tuple(tokens.json()["tokens"])))
                    if round_ == 0:
                        # The engines' events reach the index before long (a batch sent before
                        # the subscriber connected comes back by replay with the next one).
                        with trio.fail_after(10):
                            while not all(  # noqa: ASYNC110 (the subscriber task fills it)
                                worker in policy.index.match(ids) for worker, ids in first_round
                            ):
                                await trio.sleep(0.01)
                scraped = (await client.get("/metrics")).text
            assert 'smg_trio_kv_index_blocks{worker="w1"}' in scraped
            assert 'smg_trio_kv_index_blocks{worker="w2"}' in scraped
            assert all(len(workers) == 1 for workers in landed.values()), landed
            used = Counter(next(iter(workers)) for workers in landed.values())
            assert len(used) == 2, landed  # new prefixes spread over both engines
            assert all(tokens >= 16 for tokens in cached), cached  # every repeat hit its cache
            assert policy.index.statistics().blocks > 0
