"""An engine showing another model than its worker's is refused (backends/declared_model.py):
by the name gRPC's GetModelInfo reports, or by a context longer than the folder's."""

from __future__ import annotations

import pytest

from smg_trio.backends.declared_model import DeclaredModel

CHAT = DeclaredModel(
    key="chat", names=("chat", "chat-latest"), path="/models/Llama-3.1-8B", context_length=8192
)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "chat",
        "chat-latest",
        "/models/Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B",
        "Llama-3.1-8B/",
        "meta-llama/llama-3.1-8b",
    ],
)
def test_an_engine_naming_the_model_or_its_folder_or_nothing_is_taken(name: str) -> None:
    assert CHAT.refusal(max_model_len=8192, name=name) is None
    assert CHAT.refusal(max_model_len=2048, name=name) is None  # a shorter context is fine


@pytest.mark.parametrize(
    ("max_model_len", "name", "says"),
    [
        (8192, "Qwen/Qwen3-0.6B", "the engine serves model 'Qwen/Qwen3-0.6B'"),
        (8192, "chat-old", "declared for model 'chat'"),
        (32768, "", "context length is 32768, more than model 'chat' allows (8192"),
        (32768, "chat", "it loaded another model"),
    ],
)
def test_another_name_or_a_longer_context_is_refused_saying_why(
    max_model_len: int, name: str, says: str
) -> None:
    refusal = CHAT.refusal(max_model_len=max_model_len, name=name)
    assert refusal is not None
    assert says in refusal


def test_a_folder_without_a_context_length_is_judged_on_the_name_only() -> None:
    unknown = DeclaredModel(key="m", names=("m",), path="/m", context_length=None)
    assert unknown.refusal(max_model_len=10**6) is None
