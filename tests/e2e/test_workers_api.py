"""`/workers` end to end (docs/routing.md §6): list, add a worker an engine then dials, remove
one while it streams (the stream finishes, then the worker is gone), behind the admin key."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Final

import httpx
import trio

from harness.ports import free_port
from tests.e2e.live_server import MODEL, parse_sse
from tests.e2e.routed_server import ADMIN_KEY, RoutedServer, routed_server

# A cap against hangs, not a bound: two reference engines start within it (the harness alone
# allows one 30 s to be ready); at load 25 the second was not ready by 20 s.
TEST_TIMEOUT_S: Final = 60.0
ADMIN: Final = {"authorization": f"Bearer {ADMIN_KEY}"}
STREAM: Final = {"model": MODEL, "prompt": "hi", "max_tokens": 20, "stream": True}


async def wait_port_free(address: str) -> None:
    """Bind `tcp://HOST:PORT` as soon as the worker's backend released it (within 2 s)."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    with trio.fail_after(2.0):
        for _ in range(200):
            with socket.socket() as probe:
                try:
                    probe.bind((host, int(port)))
                except OSError:
                    pass
                else:
                    return
            await trio.sleep(0.01)
    raise AssertionError(f"{address} is still bound")


async def wait_worker_ready(server: RoutedServer, worker_id: str) -> None:
    (worker,) = [w for w in server.serving.gateway.pool.workers if w.name == worker_id]
    await worker.backend.wait_ready()


async def test_workers_are_added_listed_and_removed_after_their_streams(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            routed_server(tmp_path, [2.0], admin_api_key=ADMIN_KEY) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=10) as client,
        ):
            assert (await client.get("/workers")).status_code == 401
            wrong = {"authorization": "Bearer nope"}
            assert (await client.get("/workers", headers=wrong)).status_code == 401
            listed = (await client.get("/workers", headers=ADMIN)).json()
            assert [(w["id"], w["ready"], w["breaker"]) for w in listed["data"]] == [
                ("w1", True, "closed")
            ]

            bad = await client.post("/workers", headers=ADMIN, json={"worker": "zmq://127.0.0.1:0"})
            assert bad.status_code == 400
            assert bad.json()["error"]["param"] == "worker"
            assert "names no runtime" in bad.json()["error"]["message"]

            taken = server.serving.worker_addresses[0].removeprefix("tcp://")
            busy = await client.post(
                "/workers", headers=ADMIN, json={"worker": f"vllm+zmq://{taken}"}
            )
            assert busy.status_code == 400
            assert "cannot be opened" in busy.json()["error"]["message"]
            spec = f"vllm+zmq://127.0.0.1:{free_port()}"  # as on the command line: no port 0
            added = await client.post("/workers", headers=ADMIN, json={"worker": spec})
            assert added.status_code == 201, added.text
            assert added.json()["worker"]["id"] == "w2"
            await server.start_engine(added.json()["address"], step_ms=20.0)
            await wait_worker_ready(server, "w2")

            removed = await client.delete("/workers/w1", headers=ADMIN)
            assert (removed.status_code, removed.json()["removing"]) == (202, True)
            async with client.stream("POST", "/v1/completions", json=STREAM) as streaming:
                assert streaming.status_code == 200
                chunks = streaming.aiter_bytes()
                received = [await anext(chunks)]
                # Removing w2 mid-stream: no new request goes there, this one finishes.
                assert (await client.delete("/workers/w2", headers=ADMIN)).status_code == 202
                assert server.serving.gateway.pool.snapshot()[0].removing
                received.extend([chunk async for chunk in chunks])
            events = parse_sse(b"".join(received))
            assert events[-1] == "[DONE]"
            assert all("error" not in event for event in events[:-1])
            assert (await client.get("/workers", headers=ADMIN)).json()["data"] == []
            await wait_port_free(added.json()["address"])  # its backend closed its sockets
            gone = await client.post("/v1/completions", json={**STREAM, "stream": False})
            assert gone.status_code == 503
            unknown = await client.delete("/workers/w9", headers=ADMIN)
            assert (unknown.status_code, unknown.json()["error"]["param"]) == (404, "id")
            assert (await client.put("/workers", headers=ADMIN)).status_code == 405


async def test_without_an_admin_key_the_workers_api_is_off(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            routed_server(tmp_path, [None], api_key="sk-user") as server,
            httpx.AsyncClient(base_url=server.base_url) as client,
        ):
            user = {"authorization": "Bearer sk-user"}
            response = await client.get("/workers", headers=user)
            assert response.status_code == 403
            assert "--admin-api-key" in response.json()["error"]["message"]
