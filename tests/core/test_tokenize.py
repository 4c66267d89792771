"""/v1/tokenize and /v1/detokenize as pure functions over the demo model: the body codecs, and
the round trip text → ids → text (property-tested)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.prepare import chat_prompt_ids
from smg_trio.core.tokenize import detokenize_body, tokenize_body
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.wire.openai_decode import decode_chat_request
from smg_trio.wire.openai_tokenize import (
    TokenizeChatRequest,
    TokenizePromptRequest,
    decode_detokenize_request,
    decode_tokenize_request,
)

MODEL = load_model_dir(demo_model_path())
PROMPT_MODEL = MODEL.prompt_model()
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def tokenize(body: dict[str, object]) -> dict[str, object]:
    request = decode_tokenize_request(json.dumps(body).encode())
    answer: dict[str, object] = json.loads(
        tokenize_body(request, PROMPT_MODEL, MODEL.tokenizer, now=NOW)
    )
    return answer


def detokenize(tokens: list[int]) -> str:
    request = decode_detokenize_request(json.dumps({"tokens": tokens}).encode())
    prompt: str = json.loads(detokenize_body(request, PROMPT_MODEL))["prompt"]
    return prompt


def test_the_forms_are_told_apart_by_messages_with_vllms_defaults() -> None:
    prompt = decode_tokenize_request(b'{"prompt": "hi"}')
    assert isinstance(prompt, TokenizePromptRequest)
    assert prompt.add_special_tokens is True
    chat = decode_tokenize_request(b'{"messages": [{"role": "user", "content": "hi"}]}')
    assert isinstance(chat, TokenizeChatRequest)
    assert chat.add_special_tokens is False
    assert chat.chat.add_generation_prompt is True


def test_the_chat_form_is_validated_as_a_chat_request() -> None:
    body = b'{"messages": [], "add_generation_prompt": true}'
    with pytest.raises(ClientError) as caught:
        decode_tokenize_request(body)
    assert caught.value.param == "messages"
    both = b'{"messages": [{"role": "user", "content": "hi"}], "continue_final_message": true}'
    with pytest.raises(ClientError) as caught:
        decode_tokenize_request(both)
    assert caught.value.param == "continue_final_message"


def test_chat_tokens_are_the_chat_prompt_ids() -> None:
    body: dict[str, object] = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
    }
    expected = chat_prompt_ids(
        decode_chat_request(json.dumps(body).encode()), PROMPT_MODEL, now=NOW
    )
    answer = tokenize(body)
    assert answer["tokens"] == list(expected)
    assert answer["count"] == len(expected)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1))
def test_ascii_text_round_trips(text: str) -> None:
    answer = tokenize({"prompt": text, "add_special_tokens": False, "return_token_strs": True})
    tokens = answer["tokens"]
    assert isinstance(tokens, list)
    assert answer["count"] == len(tokens)
    assert isinstance(answer["token_strs"], list)
    assert len(answer["token_strs"]) == len(tokens)
    assert detokenize(tokens) == text
