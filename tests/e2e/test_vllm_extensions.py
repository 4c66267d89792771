"""vLLM's own request fields and paths through a live server and the reference vLLM EngineCore
(real ZMQ wire), with real clients: the `openai` SDK (vLLM's fields in `extra_body`, its answer
fields read from `model_extra`) and httpx for the paths no SDK call reaches. `max_tokens` over
the context (vLLM's first length check), `stream_options.continuous_usage_stats`,
`return_token_ids`, and `/tokenize`, `/detokenize`, `/version` (docs/request-fields.md §4,
docs/client-apis.md §4)."""

from __future__ import annotations

from typing import Any, Final

import httpx
import openai
import pytest
import trio
from openai import OpenAI

import smg_trio
from tests.e2e.live_server import MODEL, REPLAY_HEAD, STOP, LiveServer, openai_client

TEST_TIMEOUT_S: Final = 30.0
CONTEXT: Final = 4096  # the demo model's max_position_embeddings
MESSAGES: Final[list[Any]] = [{"role": "user", "content": "How does it work?"}]
PROMPT: Final = "Once upon a time"
LONG_PROMPT: Final = "word " * (CONTEXT + 100)  # over the context on its own
SECOND: Final = "A much longer prompt than the first one"


def refusal(call: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        call()
    return caught.value


def over_context(client: OpenAI) -> None:
    want = (
        "{p}=5000 cannot be greater than max_model_len=4096. Please request fewer output "
        "tokens. (parameter={p}, value=5000)"
    )
    errors = {
        "max_tokens": refusal(
            lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=5000)
        ),
        "max_completion_tokens": refusal(
            lambda: client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_completion_tokens=5000, max_tokens=3
            )
        ),
    }
    # Checked before the prompt is tokenized, as vLLM's: it wins over a prompt too long too.
    completions = refusal(
        lambda: client.completions.create(model=MODEL, prompt=LONG_PROMPT, max_tokens=5000)
    )
    for param, error in [*errors.items(), ("max_tokens", completions)]:
        assert error.status_code == 400
        body = error.body
        assert isinstance(body, dict)
        assert body["message"] == want.format(p=param)
        assert body["param"] == param
    # The context itself is not over it: capped to the room the prompt leaves, as before.
    answer = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=CONTEXT, stop=[STOP]
    )
    assert answer.choices[0].message.content == REPLAY_HEAD
    # Without the max_tokens error, a prompt too long is the context-length error.
    long_error = refusal(
        lambda: client.completions.create(model=MODEL, prompt=LONG_PROMPT, max_tokens=16)
    )
    assert isinstance(long_error.body, dict)
    assert long_error.body["param"] == "prompt"


async def test_max_tokens_over_the_context_is_vllms_400(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(over_context, client)


def usage_of(chunk: Any) -> tuple[int, int, int] | None:
    usage = chunk.usage
    if usage is None:
        return None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    return usage.prompt_tokens, usage.completion_tokens, usage.total_tokens


def tokens_of(http: httpx.Client, body: dict[str, Any]) -> list[int]:
    ids: list[int] = http.post("/tokenize", json={"model": MODEL, **body}).json()["tokens"]
    return ids


def continuous_usage(client: OpenAI, http: httpx.Client) -> None:
    both = {"include_usage": True, "continuous_usage_stats": True}
    chat = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=6,
            stream=True,
            extra_body={"stream_options": both},
        )
    )
    completions = list(
        client.completions.create(
            model=MODEL,
            prompt=[PROMPT, SECOND],
            max_tokens=4,
            stream=True,
            extra_body={"stream_options": both},
        )
    )
    full = client.completions.create(model=MODEL, prompt=[PROMPT, SECOND], max_tokens=4)
    prompt_lengths = [len(tokens_of(http, {"prompt": p})) for p in (PROMPT, SECOND)]
    assert prompt_lengths[0] != prompt_lengths[1]
    for chunks in (chat, completions):
        assert all(usage_of(chunk) is not None for chunk in chunks), "usage on every chunk"
        *per_choice, last = chunks
        assert last.choices == []  # the final usage chunk
        running: dict[int, list[int]] = {}
        for chunk in per_choice:
            (choice,) = chunk.choices
            usage = usage_of(chunk)
            assert usage is not None
            running.setdefault(choice.index, []).append(usage[1])
            if chunks is completions:  # each choice counts its own prompt, as vLLM
                assert usage[0] == prompt_lengths[choice.index]
        for counts in running.values():
            assert counts == sorted(counts)
        final = usage_of(last)
        assert final is not None
        assert final[1] == sum(counts[-1] for counts in running.values())
    # The role chunk: no completion tokens yet.
    assert chat[0].choices[0].delta.role == "assistant"
    first = usage_of(chat[0])
    assert first is not None
    assert first[1] == 0
    assert full.usage is not None
    assert usage_of(completions[-1]) == usage_of(full)
    # Without include_usage, continuous_usage_stats adds nothing (vLLM's rule).
    for options in (
        {"continuous_usage_stats": True},
        {"include_usage": False, "continuous_usage_stats": True},
    ):
        chunks = list(
            client.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                max_tokens=3,
                stream=True,
                extra_body={"stream_options": options},
            )
        )
        assert chunks
        assert all(chunk.usage is None for chunk in chunks)


def http_client(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers=server.auth, timeout=20)


async def test_continuous_usage_stats_on_every_chunk(server: LiveServer) -> None:
    with (
        trio.fail_after(TEST_TIMEOUT_S),
        openai_client(server) as client,
        http_client(server) as http,
    ):
        await trio.to_thread.run_sync(continuous_usage, client, http)


def extra(model: Any, name: str) -> Any:
    fields = model.model_extra or {}
    return fields.get(name)


def token_ids(client: OpenAI, http: httpx.Client) -> None:
    ids = {"return_token_ids": True}
    tokenized = tokens_of(http, {"messages": MESSAGES})
    chat = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, n=2, seed=3, temperature=1.0, extra_body=ids
    )
    assert extra(chat, "prompt_token_ids") == tokenized
    assert chat.usage is not None
    generated = [extra(choice, "token_ids") for choice in chat.choices]
    assert sum(len(each) for each in generated) == chat.usage.completion_tokens
    for choice, each in zip(chat.choices, generated, strict=True):
        text = http.post("/detokenize", json={"model": MODEL, "tokens": each}).json()["prompt"]
        assert text == choice.message.content
    stream = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=6,
            n=2,
            seed=3,
            temperature=1.0,
            stream=True,
            extra_body=ids,
        )
    )
    streamed: dict[int, list[int]] = {0: [], 1: []}
    prompts = []
    for chunk in stream:
        (choice,) = chunk.choices
        if choice.delta.role is not None:  # each role chunk: the prompt's ids, no generated ones
            prompts.append(extra(chunk, "prompt_token_ids"))
            assert extra(choice, "token_ids") is None
        else:
            assert extra(chunk, "prompt_token_ids") is None
            streamed[choice.index] += extra(choice, "token_ids")
    assert prompts == [tokenized, tokenized]
    assert list(streamed.values()) == generated  # the same seeded draws
    # Without the field: none of them.
    plain = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    assert extra(plain, "prompt_token_ids") is None
    assert extra(plain.choices[0], "token_ids") is None

    # Completions: each choice has its own prompt's ids; a stream sends them on its first chunk.
    prompts_text = [PROMPT, "Another prompt"]
    completions = client.completions.create(
        model=MODEL, prompt=prompts_text, max_tokens=4, stop=["never"], extra_body=ids
    )
    expected = [tokens_of(http, {"prompt": p}) for p in prompts_text]
    assert [extra(choice, "prompt_token_ids") for choice in completions.choices] == expected
    full_ids = [extra(choice, "token_ids") for choice in completions.choices]
    assert all(len(each) == 4 for each in full_ids)
    stream_completions = list(
        client.completions.create(
            model=MODEL, prompt=prompts_text, max_tokens=4, stream=True, extra_body=ids
        )
    )
    seen_prompt: dict[int, list[int]] = {}
    seen_ids: dict[int, list[int]] = {0: [], 1: []}
    for chunk in stream_completions:
        (choice,) = chunk.choices
        prompt_ids = extra(choice, "prompt_token_ids")
        if prompt_ids is not None:
            assert choice.index not in seen_prompt, "only on a choice's first chunk"
            seen_prompt[choice.index] = prompt_ids
        else:
            assert choice.index in seen_prompt
        seen_ids[choice.index] += extra(choice, "token_ids")
    assert [seen_prompt[0], seen_prompt[1]] == expected
    assert list(seen_ids.values()) == full_ids
    # vLLM's server puts the prompt's ids on a streamed echo even unasked (no generated ids).
    echoed = list(
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, echo=True, stream=True)
    )
    assert echoed[0].choices[0].text == PROMPT
    assert extra(echoed[0].choices[0], "prompt_token_ids") == expected[0]
    assert all(extra(chunk.choices[0], "token_ids") is None for chunk in echoed)
    assert all(extra(chunk.choices[0], "prompt_token_ids") is None for chunk in echoed[1:])


async def test_return_token_ids_streaming_and_not(server: LiveServer) -> None:
    with (
        trio.fail_after(TEST_TIMEOUT_S),
        openai_client(server) as client,
        http_client(server) as http,
    ):
        await trio.to_thread.run_sync(token_ids, client, http)


async def test_vllms_token_paths_and_version(server: LiveServer) -> None:
    tokenize = {"model": MODEL, "prompt": PROMPT, "return_token_strs": True}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
            ours = (await http.post("/v1/tokenize", json=tokenize)).json()
            assert (await http.post("/tokenize", json=tokenize)).json() == ours
            detokenize = {"model": MODEL, "tokens": ours["tokens"]}
            text = (await http.post("/v1/detokenize", json=detokenize)).json()
            assert (
                (await http.post("/detokenize", json=detokenize)).json()
                == text
                == {"prompt": PROMPT}
            )
            bad = await http.post("/tokenize", json={"model": "nope", "prompt": "x"})
            assert bad.status_code == 404  # the same handler: the same refusals
            version = await http.get("/version")
            assert version.status_code == 200
            assert version.json() == {"version": smg_trio.__version__}
            assert (await http.post("/version")).status_code == 405
            assert (await http.get("/tokenize")).status_code == 405
        async with httpx.AsyncClient(base_url=server.base_url) as anonymous:
            for path in ("/version", "/tokenize"):  # behind the API key like every API path
                assert (
                    await anonymous.request("GET" if path == "/version" else "POST", path, json={})
                ).status_code == 401
