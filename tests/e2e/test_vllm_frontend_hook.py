"""`smg-trio frontend ...` as `vllm serve` runs it, with this test in vLLM's part
(tests/e2e/vllm_hook.py; docs/vllm-frontend.md): the inherited sockets serve the OpenAI API in
front of reference vLLM EngineCores that connected without a handshake; an unsupported vLLM flag
is exit 2 naming it; SIGTERM drains, then exits 128 + 15 (never 0: vLLM would keep its engines);
the last engine lost is exit 1 at once; with two engines one may die and the other serves."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from tests.e2e.live_server import parse_sse, write_replay
from tests.e2e.vllm_hook import MODEL, played_vllm, vllm_args

TEST_TIMEOUT_S: Final = 60.0  # a cap against hangs: a front end and an engine start in ~3 s
TEXT: Final = "Tokens stream from the engine through the hook. " * 40


async def completion(url: str, body: dict[str, object]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url) as client:
        return await client.post("/v1/completions", json=body)


async def test_serves_the_openai_api_on_the_inherited_sockets(tmp_path: Path) -> None:
    replay = write_replay(tmp_path, TEXT)
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            played_vllm(
                tmp_path,
                vllm_args(max_model_len=1000, enable_tokenizer_info_endpoint=True),
                replay=replay,
            ) as played,
            httpx.AsyncClient(base_url=played.url) as client,
        ):
            info = (await client.get("/tokenizer_info")).json()
            assert info["tokenizer_class"]
            assert "added_tokens_decoder" not in info or all(
                isinstance(text, str) for text in info["added_tokens_decoder"].values()
            )
            tokenized = (await client.post("/tokenize", json={"prompt": "hi"})).json()
            assert tokenized["max_model_len"] == 1000  # --max-model-len, not the folder's
            models = (await client.get("/v1/models")).json()
            # vLLM's default served name: the model as typed
            assert [card["id"] for card in models["data"]] == [MODEL]
            chat = await client.post(
                "/v1/chat/completions",
                json={
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 5,
                },
            )
            assert chat.status_code == 200, chat.text
            answer = chat.json()
            assert answer["usage"]["completion_tokens"] == 5
            assert answer["choices"][0]["message"]["content"] == "Tokens stream f"  # 5 tokens
            async with client.stream(
                "POST",
                "/v1/completions",
                json={"model": MODEL, "prompt": "x", "max_tokens": 5, "stream": True},
            ) as streamed:
                body = (await streamed.aread()).decode()
            assert streamed.status_code == 200
            events = parse_sse(body.encode())
            assert events[-1] == "[DONE]"
            text = "".join(
                str(choice["text"])
                for event in events[:-1]
                if isinstance(event, dict)
                for choice in event["choices"]  # type: ignore[attr-defined]
            )
            assert text == "Tokens stream f"  # however the tokens were grouped into chunks


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"chat_template": "/no/such/x.jinja"}, "--chat-template"),
        ({"tool_server": "demo"}, "--tool-server"),
        ({"made_up_flag": 1}, "--made-up-flag"),
        ({"tokenizer_mode": "mistral"}, "--tokenizer-mode mistral"),
    ],
)
async def test_an_unsupported_flag_exits_2_naming_it(
    tmp_path: Path, extra: dict[str, object], named: str
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with played_vllm(tmp_path, vllm_args(**extra), wait_healthy=False) as played:
            assert await played.frontend.wait() == 2
            await trio.sleep(0.1)  # the last of stderr
    lines = played.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert named in lines[0]


INLINE_TEMPLATE: Final = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
ORIGIN: Final = "https://app.example"


async def test_chat_template_root_path_and_cors_flags_are_honoured(tmp_path: Path) -> None:
    """vLLM's inline `--chat-template`, `--root-path` and CORS flags, through the hook."""
    replay = write_replay(tmp_path, TEXT)
    flags = vllm_args(
        chat_template=INLINE_TEMPLATE,
        root_path="/llm",
        allowed_origins=[ORIGIN],
        allowed_methods=["GET", "POST"],
    )
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            played_vllm(tmp_path, flags, replay=replay) as played,
            httpx.AsyncClient(base_url=played.url) as client,
        ):
            chat = {"messages": [{"role": "user", "content": "hi"}]}
            by_template = (await client.post("/tokenize", json=chat)).json()
            plain = {"prompt": "[hi]", "add_special_tokens": False}
            assert (
                by_template["tokens"]
                == (await client.post("/tokenize", json=plain)).json()["tokens"]
            )
            for path in ("/llm/v1/models", "/v1/models"):  # as vLLM: with or without it
                assert (await client.get(path)).status_code == 200, path
            assert (await client.get("/llm")).status_code == 404
            preflight = {"origin": ORIGIN, "access-control-request-method": "POST"}
            allowed = await client.options("/v1/completions", headers=preflight)
            assert allowed.status_code == 200
            assert allowed.headers["access-control-allow-origin"] == ORIGIN
            assert allowed.headers["access-control-allow-methods"] == "GET, POST"
            stranger = {**preflight, "origin": "https://evil.example"}
            refused = await client.options("/v1/completions", headers=stranger)
            assert refused.status_code == 400
            assert "origin" in refused.json()["error"]["message"]
            put = await client.options(
                "/v1/completions", headers={**preflight, "access-control-request-method": "PUT"}
            )
            assert put.status_code == 400
            body = {"model": MODEL, "prompt": "x", "max_tokens": 5, "stream": True}
            async with client.stream(
                "POST", "/llm/v1/completions", json=body, headers={"origin": ORIGIN}
            ) as streamed:
                events = parse_sse(await streamed.aread())
            assert streamed.headers["access-control-allow-origin"] == ORIGIN
            assert events[-1] == "[DONE]"
            no_origin = await client.get("/v1/models")
            assert "access-control-allow-origin" not in no_origin.headers


async def test_sigterm_drains_then_exits_nonzero(tmp_path: Path) -> None:
    replay = write_replay(tmp_path, TEXT)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 100, "ignore_eos": True, "stream": True}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            played_vllm(tmp_path, vllm_args(shutdown_timeout=30), replay=replay) as played,
            played.client() as client,
        ):
            not_enabled = await client.get("/tokenizer_info")
            assert not_enabled.status_code == 404  # without --enable-tokenizer-info-endpoint
            async with client.stream("POST", "/v1/completions", json=body) as streamed:
                chunks = streamed.aiter_text()
                received = await anext(chunks)  # running (100 tokens at 5 ms a step: ~0.5 s)
                played.frontend.send_signal(signal.SIGTERM)
                async for text in chunks:
                    received += text
            assert await played.frontend.wait() == 128 + signal.SIGTERM
    assert received.endswith("data: [DONE]\n\n")  # drained: it finished
    assert '"finish_reason":"length"' in received


async def test_the_last_engine_lost_exits_1_at_once(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with played_vllm(tmp_path, vllm_args()) as played:
            played.engines[0].kill()
            with trio.fail_after(5):
                assert await played.frontend.wait() == 1
    assert b"no engine is left" in played.stderr


async def test_two_engines_one_dies_the_other_serves(tmp_path: Path) -> None:
    replay = write_replay(tmp_path, TEXT)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 5}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with played_vllm(
            tmp_path, vllm_args(data_parallel_size=2), engine_count=2, replay=replay
        ) as played:
            played.engines[1].kill()
            await played.engines[1].wait()
            for _ in range(4):  # whichever engine the router would have picked
                answer = await completion(played.url, body)
                assert answer.status_code == 200, answer.text
            assert played.frontend.returncode is None
            played.engines[0].kill()
            with trio.fail_after(5):
                assert await played.frontend.wait() == 1


async def test_a_unix_socket_is_served_as_vllms_uds(tmp_path: Path) -> None:
    """vLLM's `--uds PATH`: the inherited HTTP socket is an AF_UNIX one."""
    replay = write_replay(tmp_path, TEXT)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 5}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            played_vllm(
                tmp_path,
                vllm_args(uds=str(tmp_path / "http.sock")),
                replay=replay,
                uds=tmp_path / "http.sock",
            ) as played,
            played.client() as client,
        ):
            answer = await client.post("/v1/completions", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["text"] == "Tokens stream f"


async def test_scale_out_and_dev_mode_reach_the_front_end(tmp_path: Path) -> None:
    """`--enable-scale-out` serves the abort path, and `VLLM_SERVER_DEV_MODE=1` in `vllm
    serve`'s environment the engines' `collective_rpc` (docs/vllm-frontend.md §9, §10): with two
    data-parallel engines, each runs it and the first one's results are the answer."""
    flags = ("--worker-extension-cls", "tests.e2e.worker_extension_echo.EchoExtension")
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            played_vllm(
                tmp_path,
                vllm_args(enable_scale_out=True),
                engine_count=2,
                engine_flags=flags,
                env={"VLLM_SERVER_DEV_MODE": "1"},
            ) as played,
            played.client() as client,
        ):
            abort = await client.post("/inference/v1/abort_requests", json={"request_ids": ["x"]})
            assert abort.status_code == 200
            rpc = await client.post("/collective_rpc", json={"method": "get_model_name"})
            assert rpc.json() == {"results": ["served-by-the-reference-engine"]}
