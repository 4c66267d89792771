"""vLLM's prompt and answer flags through `vllm serve`'s front-end hook (this test plays vLLM: tests/e2e/
vllm_hook.py; docs/vllm-frontend.md §2), read by the `openai` SDK: `--response-role`,
`--return-tokens-as-token-ids`, `--enable-prompt-tokens-details` and
`--chat-template-content-format` in `--args-json` reach the answers and the prompt (and
`--enable-log-requests` with `--max-log-len` are taken)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import httpx
import trio
from openai import OpenAI

from tests.e2e.live_server import write_replay
from tests.e2e.vllm_hook import MODEL, played_vllm, vllm_args

TEST_TIMEOUT_S: Final = 60.0  # a cap against hangs: a front end and an engine start in ~3 s
TEXT: Final = "Tokens stream from the engine through the hook. " * 40
# A template that prints a message's content as it gets it: the forced list shows.
PRINTS: Final = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"


def answers(url: str) -> None:
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=20)
    with client:
        chat = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=3,
            logprobs=True,
        )
        assert chat.choices[0].message.role == "narrator"
        content = chat.choices[0].logprobs
        assert content is not None
        assert content.content
        assert all(entry.token.startswith("token_id:") for entry in content.content)
        assert chat.usage is not None
        assert chat.usage.prompt_tokens_details is not None
        assert chat.usage.prompt_tokens_details.cached_tokens == 0


async def test_frontend_option_flags_are_honoured_through_the_hook(tmp_path: Path) -> None:
    flags = vllm_args(
        response_role="narrator",
        return_tokens_as_token_ids=True,
        enable_prompt_tokens_details=True,
        chat_template=PRINTS,
        chat_template_content_format="openai",
        enable_log_requests=True,
        max_log_len=10,
    )
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            played_vllm(tmp_path, flags, replay=write_replay(tmp_path, TEXT)) as played,
            httpx.AsyncClient(base_url=played.url) as client,
        ):
            await trio.to_thread.run_sync(answers, played.url)
            chat = {"messages": [{"role": "user", "content": "hi"}]}
            tokenized = (await client.post("/tokenize", json=chat)).json()
            plain = {"prompt": "<[{'type': 'text', 'text': 'hi'}]>", "add_special_tokens": False}
            assert (
                tokenized["tokens"] == (await client.post("/tokenize", json=plain)).json()["tokens"]
            )
