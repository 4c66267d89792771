"""One gateway, several models (docs/fleet.md §4), with reference engines on loopback: the
demo model and the harmony test folder (another tokenizer, its template from a file, a lower
context bound), each behind engines started with its own folder and replaying its own text.
Each request is prepared with its model's tokenizer and template and reaches only its
model's workers, on every API; /v1/models lists every model with its own limit; a model whose
engines all died answers 503 while the other serves on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket

from smg_trio.model.folder import demo_model_path, load_model_dir
from tests.e2e.models_server import HARMONY_MODEL, models_server, two_models

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
