"""One gateway, several models (docs/fleet.md §4), with reference engines on loopback: the
demo model and the harmony test folder (another tokenizer, its template from a file, a lower
context bound), each behind engines started with its own folder and replaying its own text.
Each request is prepared with its model's tokenizer and template and reaches only its
model's workers, on every API; /v1/models lists every model with its own limit; a model whose
engines all died answers 503 while the other serves on."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
import trio_websocket
from prometheus_client.parser import text_string_to_metric_families

from harness.ports import free_port
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.observability.request_log import REQUEST_MESSAGE
from tests.e2e.live_server import engine_command, live_server
from tests.e2e.models_server import HARMONY_MODEL, ServedFolder, models_server, two_models

TEST_TIMEOUT_S: Final = 40.0
DEMO_TEXT: Final = "Demo engine says hi."
HARMONY_TEXT: Final = "Harmony engine answers."


def chat(model: str | None, content: str = "Hi", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], **extra}
    if model is not None:
        body["model"] = model
    return {"max_tokens": 4, **body}


async def test_each_model_is_prepared_by_its_folder_and_served_by_its_workers(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path, demo_workers=2)) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            cards = (await client.get("/v1/models")).json()["data"]
            assert [(c["id"], c["max_model_len"]) for c in cards] == [
                ("demo", 4096),
                ("demo-alias", 4096),
                ("harmony", 1024),
            ]
            assert cards[2]["root"] == str(HARMONY_MODEL)
            answers: dict[str, list[str]] = {}
            for model in ("demo", "harmony", "demo-alias", None, "harmony", "harmony"):
                reply = await client.post("/v1/chat/completions", json=chat(model))
                assert reply.status_code == 200, reply.text
                answers.setdefault(str(model), []).append(
                    reply.json()["choices"][0]["message"]["content"]
                )
            # 4 max tokens of each engine's own text, whichever name the request used.
            assert {answer[:4] for answer in answers["harmony"]} == {HARMONY_TEXT[:4]}
            for name in ("demo", "demo-alias", "None"):
                assert answers[name][0] == answers["demo"][0]
                assert DEMO_TEXT.startswith(answers[name][0])
            assert HARMONY_TEXT.startswith(answers["harmony"][0])
            assert server.requests_by_model() == {"demo": 3, "harmony": 3}
            missing = await client.post("/v1/chat/completions", json=chat("gpt-4o"))
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "model_not_found"


async def test_tokenizer_template_and_context_length_are_each_models_own(tmp_path: Path) -> None:
    demo, harmony = load_model_dir(demo_model_path()), load_model_dir(HARMONY_MODEL)
    # The harmony folder's vocabulary is the demo's plus Harmony's special tokens.
    text = "Routing by model<|message|> keeps tokenizers apart."
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path)) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            for name, folder in (("demo", demo), ("harmony", harmony)):
                ids = (
                    await client.post("/v1/tokenize", json={"model": name, "prompt": text})
                ).json()["tokens"]
                assert ids == folder.tokenizer.encode(text, add_special_tokens=True)
                back = await client.post("/v1/detokenize", json={"model": name, "tokens": ids})
                assert text in back.json()["prompt"]
            assert demo.tokenizer.encode(text, add_special_tokens=True) != harmony.tokenizer.encode(
                text, add_special_tokens=True
            )
            # The harmony model's template is the configured file, not its folder's (none).
            rendered = "<|start|>user<|message|>Hi<|end|><|start|>assistant<|message|>"
            usage = (await client.post("/v1/chat/completions", json=chat("harmony"))).json()
            expected = len(harmony.tokenizer.encode(rendered, add_special_tokens=False))
            assert usage["usage"]["prompt_tokens"] == expected
            # max_model_len 1024 bounds the harmony model only.
            long_prompt = "word " * 1100
            for name, status in (("harmony", 400), ("demo", 200)):
                reply = await client.post(
                    "/v1/completions", json={"model": name, "prompt": long_prompt, "max_tokens": 2}
                )
                assert reply.status_code == status, reply.text


async def test_streams_responses_messages_and_the_websocket_follow_the_model(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path)) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            streamed = await client.post("/v1/chat/completions", json=chat("harmony", stream=True))
            deltas = [
                json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                for line in streamed.text.splitlines()
                if line.startswith("data: {") and '"choices":[{' in line
            ]
            assert "".join(deltas)
            assert HARMONY_TEXT.startswith("".join(deltas))
            # A Responses conversation begun on one model continues on another (OpenAI lets
            # `previous_response_id` change the model): the stored turns, templated anew.
            first = await client.post(
                "/v1/responses",
                json={"model": "demo", "input": "Hi", "max_output_tokens": 4, "store": True},
            )
            assert first.status_code == 200, first.text
            assert DEMO_TEXT.startswith(first.json()["output"][0]["content"][0]["text"])
            second = await client.post(
                "/v1/responses",
                json={
                    "model": "harmony",
                    "input": "More",
                    "max_output_tokens": 4,
                    "previous_response_id": first.json()["id"],
                },
            )
            assert second.status_code == 200, second.text
            assert second.json()["model"] == "harmony"
            assert HARMONY_TEXT.startswith(second.json()["output"][0]["content"][0]["text"])
            messages = await client.post(
                "/v1/messages",
                json={
                    "model": "harmony",
                    "max_tokens": 4,
                    "messages": [{"role": "user", "content": "Hi"}],
                },
            )
            assert HARMONY_TEXT.startswith(messages.json()["content"][0]["text"])
            async with trio_websocket.open_websocket_url(
                f"ws://127.0.0.1:{server.served.serving.port}/v1/ws"
            ) as socket:
                for number, (model, text) in enumerate(
                    (("harmony", HARMONY_TEXT), ("demo", DEMO_TEXT)), start=1
                ):
                    request = {
                        "type": "request",
                        "id": number,
                        "path": "/v1/chat/completions",
                        "body": chat(model),
                    }
                    await socket.send_message(json.dumps(request))
                    frame = json.loads(await socket.get_message())
                    body = frame.get("body", frame.get("data"))
                    assert text.startswith(body["choices"][0]["message"]["content"]), frame
            assert server.requests_by_model() == {"demo": 2, "harmony": 4}


async def test_a_model_whose_engines_all_died_answers_503_and_the_other_serves_on(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path, harmony_workers=2)) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            demo_statuses: list[int] = []

            async def demo_load(stop: trio.Event) -> None:
                while not stop.is_set():
                    reply = await client.post("/v1/chat/completions", json=chat("demo"))
                    demo_statuses.append(reply.status_code)

            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(demo_load, stop)
                await trio.sleep(0.3)
                for engine in server.engines["harmony"]:
                    engine.kill()  # SIGKILL
                for _ in range(100):  # a dead engine is noticed within 2 s (resilience.md)
                    if not any(w.backend.statistics().ready for w in server.workers_of("harmony")):
                        break
                    await trio.sleep(0.05)
                harmony = [
                    (await client.post("/v1/chat/completions", json=chat("harmony"))).status_code
                    for _ in range(5)
                ]
                await trio.sleep(0.3)
                stop.set()
            assert harmony == [503] * 5
            assert len(demo_statuses) > 10
            assert set(demo_statuses) == {200}  # 0 errors among the other model's requests
            assert (await client.get("/health")).status_code == 200


async def test_a_worker_added_at_runtime_serves_the_model_it_names(tmp_path: Path) -> None:
    admin = {"authorization": "Bearer admin-key"}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path), admin_api_key="admin-key") as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20, headers=admin) as client,
        ):
            listed = (await client.get("/workers")).json()["data"]
            assert [(row["id"], row["model"]) for row in listed] == [
                ("w1", "demo"),
                ("w2", "harmony"),
            ]
            unknown = await client.post(
                "/workers", json={"worker": f"vllm+zmq://127.0.0.1:{free_port()}?model=gpt-4o"}
            )
            assert unknown.status_code == 400
            assert "names model 'gpt-4o', which is not served" in unknown.json()["error"]["message"]
            added = await client.post(
                "/workers", json={"worker": f"vllm+zmq://127.0.0.1:{free_port()}?model=demo-alias"}
            )
            assert added.status_code == 201, added.text
            row = added.json()["worker"]
            assert (row["id"], row["model"]) == ("w3", "demo")
            assert row["spec"].endswith("?model=demo-alias")
            replay = tmp_path / "replay-demo.txt"
            await server.served.start_engine(
                [*engine_command(added.json()["address"], replay, 2.0)]
            )
            (third,) = [w for w in server.served.serving.gateway.pool.workers if w.name == "w3"]
            await third.backend.wait_ready()
            removed = await client.delete("/workers/w1")
            assert removed.status_code == 202
            for _ in range(3):
                reply = await client.post("/v1/chat/completions", json=chat("demo"))
                assert DEMO_TEXT.startswith(reply.json()["choices"][0]["message"]["content"])
            rows = {r.id: r for r in server.served.serving.gateway.pool.snapshot()}
            assert rows["w3"].requests == 3
            assert "w1" not in rows


KEYS: Final = """
[keys]
"sk-all" = "all"
"sk-demo" = "demo-only"
"sk-capped" = "capped"

[tenants.demo-only]
models = ["demo-alias"]

[tenants.capped]
max_concurrent = 1
max_queue = 0
"""


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_a_tenant_sees_and_uses_only_its_models_and_its_budget_spans_them(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS, encoding="utf-8")
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path), api_keys=keys) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            listed = await client.get("/v1/models", headers=auth("sk-demo"))
            assert [card["id"] for card in listed.json()["data"]] == ["demo", "demo-alias"]
            everything = await client.get("/v1/models", headers=auth("sk-all"))
            assert len(everything.json()["data"]) == 3
            for path, body in (
                ("/v1/chat/completions", chat("harmony")),
                ("/v1/tokenize", {"model": "harmony", "prompt": "hi"}),
                ("/v1/responses", {"model": "harmony", "input": "hi", "background": True}),
            ):
                refused = await client.post(path, json=body, headers=auth("sk-demo"))
                assert refused.status_code == 404, refused.text
                error = refused.json()["error"]
                assert error["code"] == "model_not_found"
                assert error["message"] == (
                    "The model `harmony` does not exist or you do not have access to it."
                )
            for model in ("demo", "demo-alias", None):
                reply = await client.post(
                    "/v1/chat/completions", json=chat(model), headers=auth("sk-demo")
                )
                assert reply.status_code == 200, reply.text
            reply = await client.post(
                "/v1/chat/completions", json=chat("harmony"), headers=auth("sk-all")
            )
            assert reply.status_code == 200
            # One request at a time, whichever model it asks for: while a demo stream holds
            # the tenant's one slot, a harmony request is over the budget.
            long = chat("demo", stream=True, max_tokens=100, ignore_eos=True)
            over_budget: list[httpx.Response] = []
            async with client.stream(
                "POST", "/v1/chat/completions", json=long, headers=auth("sk-capped")
            ) as held:
                assert held.status_code == 200
                async for _ in held.aiter_raw():  # read to its end, the slot held meanwhile
                    if not over_budget:
                        over_budget.append(
                            await client.post(
                                "/v1/chat/completions",
                                json=chat("harmony"),
                                headers=auth("sk-capped"),
                            )
                        )
            assert over_budget[0].status_code == 429, over_budget[0].text
            statuses = []
            for _ in range(50):  # the slot comes back once the gateway saw the client leave
                free = await client.post(
                    "/v1/chat/completions", json=chat("harmony"), headers=auth("sk-capped")
                )
                statuses.append(free.status_code)
                if free.status_code == 200:
                    break
                await trio.sleep(0.05)
            assert statuses[-1] == 200, statuses


async def test_metrics_and_log_lines_say_the_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="smg_trio.requests")
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path)) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            for model in ("demo", "harmony", "harmony", "gpt-4o"):
                await client.post("/v1/chat/completions", json=chat(model))
            text = (await client.get("/metrics")).text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }

    def total(name: str, **labels: str) -> float:
        return sum(
            value
            for (found, pairs), value in samples.items()
            if found == name and labels.items() <= dict(pairs).items()
        )

    assert total("smg_trio_model_requests_total", served_model="demo", status="200") == 1
    assert total("smg_trio_model_requests_total", served_model="harmony", status="200") == 2
    assert total("smg_trio_model_requests_total", served_model="none", status="404") == 1
    assert total("smg_trio_completion_tokens_total", served_model="harmony") == 8
    assert total("smg_trio_time_to_first_token_seconds_count", served_model="demo") == 1
    assert total("smg_trio_worker_ready", served_model="harmony") == 1
    models = [getattr(r, "model", "?") for r in caplog.records if r.getMessage() == REQUEST_MESSAGE]
    assert models == ["demo", "harmony", "harmony", None]


async def test_a_stream_migrates_only_to_a_worker_of_its_own_model(tmp_path: Path) -> None:
    """Engine 0 of the demo model is killed mid-stream: its streams go on on the other demo
    worker (docs/resilience.md §9), never on the harmony model's idle one."""
    models = two_models(tmp_path, demo_workers=2)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, models) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            body = chat("demo", stream=True, max_tokens=150, ignore_eos=True)
            ends: list[str] = []
            started = [trio.Event() for _ in range(6)]

            async def one(index: int) -> None:
                raw = bytearray()
                async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                    async for data in reply.aiter_raw():
                        raw.extend(data)
                        started[index].set()
                events = [line for line in raw.decode().splitlines() if line.startswith("data: ")]
                ends.append(events[-1] if "error" not in events[-2] else events[-2])

            async with trio.open_nursery() as nursery:
                for index in range(6):  # round robin: three on each demo worker
                    nursery.start_soon(one, index)
                for event in started:
                    await event.wait()
                server.engines["demo"][0].kill()
            assert ends == ["data: [DONE]"] * 6
            rows = {row.id: row for row in server.served.serving.gateway.pool.snapshot()}
            assert rows["w3"].model == "harmony"
            assert rows["w3"].requests == 0  # the idle worker of the other model got none
            assert rows["w2"].requests >= 6  # its own three and the three that moved


async def test_a_drain_lets_every_models_streams_finish(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path)) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            ends: dict[str, str] = {}
            started = {"demo": trio.Event(), "harmony": trio.Event()}

            async def one(model: str) -> None:
                body = chat(model, stream=True, max_tokens=60, ignore_eos=True)
                raw = bytearray()
                async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                    async for data in reply.aiter_raw():
                        raw.extend(data)
                        started[model].set()
                assert b'"error"' not in raw
                ends[model] = raw.decode().rstrip().rsplit("\n", 1)[-1]

            async with trio.open_nursery() as nursery:
                for model in started:
                    nursery.start_soon(one, model)
                for event in started.values():
                    await event.wait()
                server.served.stop.set()  # as SIGTERM: new requests 503, running ones finish
                refused = await client.post("/v1/chat/completions", json=chat("harmony"))
                assert refused.status_code == 503
            assert ends == {"demo": "data: [DONE]", "harmony": "data: [DONE]"}


async def test_greedy_text_equals_each_models_own_one_model_server(tmp_path: Path) -> None:
    """Engines in random mode (each token drawn from the whole context, as a model's greedy
    choice is): an answer depends on the prompt's ids, so a wrong tokenizer or template
    anywhere would change it."""
    models = [
        ServedFolder(("demo_model",), demo_model_path(), 1, None),
        ServedFolder(("harmony_model",), HARMONY_MODEL, 1, None),
    ]
    bodies = [
        ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 12}),
        ("/v1/completions", {"prompt": "Routing<|message|> by model", "max_tokens": 12}),
    ]

    async def answers(base_url: str, model: str) -> list[str]:
        texts = []
        async with httpx.AsyncClient(base_url=base_url, timeout=20) as client:
            for path, body in bodies:
                reply = await client.post(path, json={**body, "model": model, "temperature": 0})
                assert reply.status_code == 200, reply.text
                texts.append(reply.json()["choices"][0]["text"])
        return texts

    for folder in ("both", "demo_model", "harmony_model"):
        (tmp_path / folder).mkdir()
    with trio.fail_after(TEST_TIMEOUT_S):
        together: dict[str, list[str]] = {}
        async with models_server(tmp_path / "both", models) as server:
            for model in models:
                together[model.names[0]] = await answers(server.base_url, model.names[0])
        for model in models:
            async with live_server(
                tmp_path / model.names[0],
                model_path=model.folder,
                random_engines=True,
                api_key=None,
            ) as alone:
                own = await answers(alone.base_url, model.names[0])
            assert together[model.names[0]] == own
        assert together["demo_model"] != together["harmony_model"]


async def test_a_background_response_runs_on_the_model_it_names(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            models_server(tmp_path, two_models(tmp_path)) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20) as client,
        ):
            body = {"model": "harmony", "input": "Hi", "max_output_tokens": 4, "background": True}
            created = await client.post("/v1/responses", json=body)
            assert created.status_code == 200, created.text
            for _ in range(200):  # a 4-token run ends within a second
                got = (await client.get(f"/v1/responses/{created.json()['id']}")).json()
                if got["status"] not in ("queued", "in_progress"):
                    break
                await trio.sleep(0.05)
            assert got["status"] == "incomplete", got  # its 4 tokens, as a foreground one
            assert got["model"] == "harmony"
            assert HARMONY_TEXT.startswith(got["output"][0]["content"][0]["text"])
            assert server.requests_by_model() == {"demo": 0, "harmony": 1}
