"""Opt-in: greedy text through `/v1/messages` equals the equivalent chat completion's, with a
real vLLM engine (headless EngineCore over ZMQ) behind smg-trio, streaming and not
(docs/client-apis.md §2, docs/real-engines.md).

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest -m real_engine tests/e2e/test_anthropic_real_vllm.py
"""

from __future__ import annotations

from typing import Any, Final

import anthropic
import httpx
import httpx2
import pytest
import trio

from tests.e2e import real_vllm
from tests.e2e.real_vllm import SERVED_NAME

REQUEST_S: Final = 120.0
SYSTEM: Final = "You are a terse assistant."
QUESTION: Final = "Name three colours of the rainbow."

pytestmark = list(real_vllm.MARKS)


def chat_answer(url: str, **fields: Any) -> tuple[str, str, int, int]:
    """The chat completion that means the same as the Messages request (thinking off, as a
    Messages request without `thinking` asks): text, finish, prompt and completion tokens."""
    body = {
        "model": SERVED_NAME,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ],
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
        **fields,
    }
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=REQUEST_S).json()
    choice = answer["choices"][0]
    usage = answer["usage"]
    text = choice["message"]["content"]
    return text, choice["finish_reason"], usage["prompt_tokens"], usage["completion_tokens"]


def messages_answers(url: str, **fields: Any) -> list[anthropic.types.Message]:
    client = anthropic.Anthropic(
        base_url=url, api_key="unused", max_retries=0, http_client=httpx2.Client(timeout=REQUEST_S)
    )
    with client:
        request: Any = {
            "model": SERVED_NAME,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": QUESTION}],
            "extra_body": {"temperature": 0},
            **fields,
        }
        whole = client.messages.create(**request)
        with client.messages.stream(**request) as stream:
            streamed = stream.get_final_message()
    return [whole, streamed]


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


@pytest.mark.parametrize(
    ("messages_fields", "chat_fields", "reasons"),
    [
        ({"max_tokens": 24}, {"max_tokens": 24}, ("max_tokens", "length")),
        (
            {"max_tokens": 64, "stop_sequences": ["."]},
            {"max_tokens": 64, "stop": ["."]},
            ("stop_sequence", "stop"),
        ),
    ],
)
async def test_greedy_text_equals_the_chat_completions(
    vllm_zmq_gateway_url: str,
    messages_fields: dict[str, Any],
    chat_fields: dict[str, Any],
    reasons: tuple[str, str],
) -> None:
    with trio.fail_after(REQUEST_S * 3):
        text, finish, prompt_tokens, completion_tokens = await trio.to_thread.run_sync(
            lambda: chat_answer(vllm_zmq_gateway_url, **chat_fields)
        )
        answers = await trio.to_thread.run_sync(
            lambda: messages_answers(vllm_zmq_gateway_url, **messages_fields)
        )
    assert text
    assert finish == reasons[1]
    for message in answers:
        assert text_of(message) == text
        assert message.stop_reason == reasons[0]
        assert (message.usage.input_tokens, message.usage.output_tokens) == (
            prompt_tokens,
            completion_tokens,
        )
