"""Opt-in: vLLM's answer flags, plain `vllm serve` against `vllm serve` with smg-trio as its front
end (docs/vllm-frontend.md §2; needs SMG_TRIO_VLLM_VENV and SMG_TRIO_VLLM_MODEL,
docs/real-engines.md): with `--response-role`, `--return-tokens-as-token-ids`,
`--enable-prompt-tokens-details` and `--enable-force-include-usage`, the same greedy chat and
completions answers: roles, logprob tokens (`token_id:N`), their bytes and offsets, and usage
with its prompt_tokens_details, streamed and not."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from openai import OpenAI

from tests.e2e.real_vllm import MARKS, free_port, launch, running, vllm_command, wait_healthy
from tests.e2e.test_real_vllm_frontend import assert_same, vllm_with_smg_trio

pytestmark = list(MARKS)

SERVED: Final = "tiny"
FLAGS: Final = (
    "--served-model-name",
    SERVED,
    "--response-role",
    "narrator",
    "--return-tokens-as-token-ids",
    "--enable-prompt-tokens-details",
    "--enable-force-include-usage",
)
MESSAGES: Final = [{"role": "user", "content": "Tell me a story"}]


def rounded(value: Any) -> Any:
    """`value` with its floats to 4 decimals (the engines' logprobs of one greedy run)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def answers(url: str) -> dict[str, Any]:
    common: dict[str, Any] = {"model": SERVED, "max_tokens": 8, "temperature": 0}
    with OpenAI(base_url=f"{url}/v1", api_key="unused") as client:
        chat = client.chat.completions.create(
            messages=MESSAGES, logprobs=True, top_logprobs=2, **common
        ).model_dump()
        stream = list(
            client.chat.completions.create(messages=MESSAGES, stream=True, logprobs=True, **common)
        )
        text = client.completions.create(prompt="Hello my name is", logprobs=1, **common)
    choice = chat["choices"][0]
    first_delta = stream[0].choices[0].delta
    found: dict[str, Any] = rounded(
        {
            "chat_message": {k: choice["message"][k] for k in ("role", "content")},
            "chat_logprobs": choice["logprobs"],
            "chat_usage": chat["usage"],
            "stream_role": first_delta.role,
            "stream_every_chunk_has_usage": all(c.usage is not None for c in stream),
            "stream_tokens": [
                e.token
                for c in stream
                for ch in c.choices
                if ch.logprobs is not None
                for e in ch.logprobs.content or ()
            ],
            "stream_usage": stream[-1].usage.model_dump() if stream[-1].usage else None,
            "completion_logprobs": text.choices[0].logprobs.model_dump()
            if text.choices[0].logprobs
            else None,
            "completion_usage": text.usage.model_dump() if text.usage else None,
        }
    )
    return found


def test_frontend_option_flags_equal_plain_vllm_serve(tmp_path: Path) -> None:
    port = free_port()
    plain = launch(
        "vllm-flags-plain",
        vllm_command("--host", "127.0.0.1", "--port", str(port), *FLAGS),
        tmp_path,
    )
    with running([plain]):
        url = f"http://127.0.0.1:{port}"
        print(f"plain vllm serve ready after {wait_healthy([plain], url):.1f} s")
        expected = answers(url)
    with vllm_with_smg_trio(tmp_path, *FLAGS) as (url, _):
        got = answers(url)
    print(f"vLLM's chat usage: {expected['chat_usage']}")
    assert expected["chat_message"]["role"] == "narrator"
    assert_same(got, expected)
