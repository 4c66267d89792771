"""I/O. The differential harness's cases (`test_vllm_differential.py`): each a request body built
from facts learned once from vLLM's own greedy answers (which strings are stops where), so the
cases stay meaningful for any model. Issue 11 lists the divergences these cases pin down.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import httpx

from smg_trio.model.folder import ModelDir
from tests.e2e.differential import Divergence
from tests.e2e.real_vllm import MAX_MODEL_LEN, SERVED_NAME

CHAT: Final = "/v1/chat/completions"
COMPLETIONS: Final = "/v1/completions"
PROMPT: Final = "def hello(world):"
USER: Final = [{"role": "user", "content": PROMPT}]
PROBE_TOKENS: Final = 16
MIN_TOKENS: Final = 6
LONG_PROMPT_TOKENS: Final = MAX_MODEL_LEN - 20  # leaves less room than max_tokens asks
OVER_CONTEXT: Final = MAX_MODEL_LEN + 1  # max_tokens the context alone cannot hold
ALLOWED_COLORS: Final = ["red", "green"]
# A top-level string enum: with an object schema vLLM's grammar allows unbounded whitespace, which
# a random-weight model picks until max_tokens (seen: `{ "color": "red"` + 1000 spaces).
SCHEMA: Final = {"type": "string", "enum": ALLOWED_COLORS}


@dataclass(frozen=True)
class Greedy:
    """vLLM's greedy answer on one endpoint, and the stop strings it suggests."""

    ids: list[int]
    multi_token_stop: str  # tokens 2..3 of the output: two tokens, matched mid-stream
    single_token_stop: str  # a whole token that occurs before MIN_TOKENS
    inside_first_token: str  # a substring of the first token's text, not a prefix
    first_token_prefix: str  # the first token's first two characters: the answer is ""


@dataclass(frozen=True)
class Facts:
    chat: Greedy
    completions: Greedy
    long_text: str  # about LONG_PROMPT_TOKENS tokens
    biased_token: int

    def greedy(self, path: str) -> Greedy:
        return self.chat if path == CHAT else self.completions

    def multi_token_stop_body(self, path: str, *, max_tokens: int) -> dict[str, Any]:
        return base(path, stop=[self.greedy(path).multi_token_stop], max_tokens=max_tokens)


def base(path: str, **extra: Any) -> dict[str, Any]:
    prompt: dict[str, Any] = {"messages": USER} if path == CHAT else {"prompt": PROMPT}
    return {"model": SERVED_NAME, **prompt, "temperature": 0, "max_tokens": 16, **extra}


def learn_facts(vllm_url: str, model: ModelDir) -> Facts:
    tokenizer = model.tokenizer

    def text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def greedy(path: str) -> Greedy:
        body = base(path, max_tokens=PROBE_TOKENS, ignore_eos=True, return_token_ids=True)
        with httpx.Client(base_url=vllm_url, timeout=120.0) as client:
            response = client.post(path, json=body)
        response.raise_for_status()
        ids: list[int] = response.json()["choices"][0]["token_ids"]
        assert len(ids) == PROBE_TOKENS, "the probe ran with ignore_eos"
        multi = text(ids[2:4])
        assert text(ids).find(multi) == len(text(ids[:2])), "the stop must first occur there"
        single = next(
            text([token])
            for token in ids[1:MIN_TOKENS]
            if tokenizer.encode(text([token]), add_special_tokens=False) == [token]
            and text(ids).find(text([token])) >= len(text(ids[:1]))
        )
        first = text(ids[:1])
        assert len(first) >= 2, f"the first token {first!r} is too short to stop inside"
        return Greedy(ids, multi, single, first[1:], first[:2])

    unit = "def hello(world):\n    return world\n"
    per_unit = len(tokenizer.encode(unit, add_special_tokens=False))
    long_text = unit * (LONG_PROMPT_TOKENS // per_unit)
    return Facts(
        greedy(CHAT),
        greedy(COMPLETIONS),
        long_text,
        tokenizer.encode("return", add_special_tokens=False)[0],
    )


def check_schema(body: Any) -> None:
    """Exactly SCHEMA's constraints (no jsonschema in our venv): a JSON string, an allowed one."""
    for choice in body["choices"]:
        if "message" in choice:
            content = choice["message"]["content"]
        else:  # a folded stream's chat choice, or a completion's
            content = choice["content"] if "content" in choice else choice["text"]
        assert json.loads(content) in ALLOWED_COLORS, content


@dataclass(frozen=True)
class Case:
    """One request. `vllm_body`, when set, is what vLLM's server is sent instead: the same
    request in vLLM 0.32's spelling, for a form it ignores or answers differently on purpose
    (docs/request-fields.md §2); `compare` then replaces the field-by-field diff with one of
    the two answers' meaning (vLLM's answer first)."""

    name: str
    path: str
    body: Callable[[Facts], dict[str, Any]]
    vllm_status: int = 200
    modes: tuple[bool, ...] = (False, True)  # stream
    check: Callable[[Any], None] | None = None
    vllm_body: Callable[[Facts], dict[str, Any]] | None = None
    compare: Callable[[Any, Any], list[Divergence]] | None = None
    same_message: bool = False  # an error whose message must be vLLM's word for word


def both(name: str, build: Callable[[str, Facts], dict[str, Any]], **options: Any) -> list[Case]:
    """The same case on chat and completions."""
    return [
        Case(f"{name}-{label}", path, partial(on_path, build, path), **options)
        for label, path in (("chat", CHAT), ("completions", COMPLETIONS))
    ]


def on_path(
    build: Callable[[str, Facts], dict[str, Any]], path: str, facts: Facts
) -> dict[str, Any]:
    return build(path, facts)


def chat(**extra: Any) -> Callable[[Facts], dict[str, Any]]:
    return lambda facts: base(CHAT, **extra)


def completions(**extra: Any) -> Callable[[Facts], dict[str, Any]]:
    return lambda facts: base(COMPLETIONS, **extra)


TOOL: Final = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}
TOOL_TURNS: Final = [
    {"role": "user", "content": "Look it up."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    {"role": "user", "content": PROMPT},
]

CASES: Final[list[Case]] = [
    *both("plain", lambda path, facts: base(path)),
    *both("max_tokens_float", lambda path, facts: base(path, max_tokens=16.0)),
    *both("multi_token_stop", lambda path, facts: facts.multi_token_stop_body(path, max_tokens=64)),
    *both(
        "include_stop_str_in_output",
        lambda path, facts: base(
            path, stop=[facts.greedy(path).multi_token_stop], include_stop_str_in_output=True
        ),
    ),
    *both(
        "min_tokens_single_token_stop",
        lambda path, facts: base(
            path, min_tokens=MIN_TOKENS, stop=[facts.greedy(path).single_token_stop]
        ),
    ),
    *both(
        "stop_inside_first_token",
        lambda path, facts: base(path, stop=[facts.greedy(path).inside_first_token]),
    ),
    *both(
        "stop_at_first_token_start",
        lambda path, facts: base(path, stop=[facts.greedy(path).first_token_prefix]),
    ),
    *both(
        "stop_token_ids",
        lambda path, facts: base(path, stop_token_ids=[facts.greedy(path).ids[3]]),
    ),
    *both("ignore_eos", lambda path, facts: base(path, ignore_eos=True, max_tokens=32)),
    *both("seeded_sampling", lambda path, facts: base(path, temperature=1.0, seed=7)),
    *both("n2_seed", lambda path, facts: base(path, n=2, temperature=1.0, seed=1234)),
    # vLLM 0.32: "n must be 1 when using greedy sampling, got 2."
    *both("n2_greedy", lambda path, facts: base(path, n=2), vllm_status=400),
    *both("logit_bias", lambda path, facts: base(path, logit_bias={str(facts.biased_token): 100})),
    *both("unknown_model", lambda path, facts: base(path, model="no-such-model"), vllm_status=404),
    Case(
        "over_context-completions",
        COMPLETIONS,
        lambda facts: base(COMPLETIONS, prompt=facts.long_text, max_tokens=64),
    ),
    Case(
        "long_prompt_default_max_tokens-completions",
        COMPLETIONS,
        lambda facts: {"model": SERVED_NAME, "prompt": facts.long_text, "temperature": 0},
    ),
    Case(
        "over_context-chat",
        CHAT,
        lambda facts: base(CHAT, messages=[{"role": "user", "content": facts.long_text}]),
    ),
    *[
        Case(f"logprobs_{count}-completions", COMPLETIONS, completions(logprobs=count))
        for count in (0, 1, 5, 20)
    ],
    Case("logprobs-chat", CHAT, chat(logprobs=True)),
    *[
        Case(f"top_logprobs_{count}-chat", CHAT, chat(logprobs=True, top_logprobs=count))
        for count in (0, 5, 20)
    ],
    Case(
        "logprobs_with_stop-chat",
        CHAT,
        lambda facts: base(CHAT, logprobs=True, top_logprobs=2, stop=[facts.chat.multi_token_stop]),
    ),
    Case("echo-completions", COMPLETIONS, completions(echo=True, max_tokens=8)),
    Case(
        "echo_logprobs_max_tokens_0-completions",
        COMPLETIONS,
        completions(echo=True, logprobs=1, max_tokens=0),
    ),
    Case(
        "prompt_logprobs-completions", COMPLETIONS, completions(prompt_logprobs=2), modes=(False,)
    ),
    # vLLM 0.32: "`prompt_logprobs` are not available when `stream=True`."
    Case(
        "prompt_logprobs_stream-completions",
        COMPLETIONS,
        completions(prompt_logprobs=2),
        vllm_status=400,
        modes=(True,),
    ),
    Case("echo_logprobs-completions", COMPLETIONS, completions(echo=True, logprobs=2)),
    Case("batch_prompts-completions", COMPLETIONS, completions(prompt=[PROMPT, "import os"])),
    Case("token_id_prompt-completions", COMPLETIONS, completions(prompt=[1, 200, 300, 400])),
    Case("suffix-completions", COMPLETIONS, completions(suffix="!"), vllm_status=400),
    Case(
        "developer_role-chat",
        CHAT,
        chat(messages=[{"role": "developer", "content": "Be brief."}, *USER]),
    ),
    Case("assistant_null_content_tool_calls-chat", CHAT, chat(messages=TOOL_TURNS)),
    Case("echo-chat", CHAT, chat(echo=True)),
    Case(
        "json_schema-chat",
        CHAT,
        chat(
            max_tokens=64,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "pick", "schema": SCHEMA},
            },
        ),
        check=check_schema,
    ),
    Case("json_object-chat", CHAT, chat(max_tokens=64, response_format={"type": "json_object"})),
    Case("tool_choice_auto_no_parser-chat", CHAT, chat(tools=[TOOL], tool_choice="auto"), 400),
    Case("tool_choice_none-chat", CHAT, chat(tools=[TOOL], tool_choice="none")),
    Case("tools_without_tool_choice-chat", CHAT, chat(tools=[TOOL]), 400),  # vLLM: "auto"
    *both(
        "continuous_usage_stats",
        lambda path, facts: base(
            path, stream_options={"include_usage": True, "continuous_usage_stats": True}
        ),
        modes=(True,),
    ),
    Case(
        "continuous_usage_stats_batch-completions",
        COMPLETIONS,
        completions(
            prompt=[PROMPT, "import os"],
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        ),
        modes=(True,),
    ),
    # vLLM: continuous usage only with include_usage; without it no chunk carries usage.
    Case(
        "continuous_usage_stats_without_include_usage-chat",
        CHAT,
        chat(stream_options={"include_usage": False, "continuous_usage_stats": True}),
        modes=(True,),
    ),
    # vLLM 0.32: "max_tokens=N cannot be greater than max_model_len=M. ...", before the prompt
    # is tokenized (so ahead of a prompt too long as well).
    *both(
        "max_tokens_over_context",
        lambda path, facts: base(path, max_tokens=OVER_CONTEXT),
        vllm_status=400,
        same_message=True,
    ),
    Case(
        "max_completion_tokens_over_context-chat",
        CHAT,
        chat(max_tokens=4, max_completion_tokens=OVER_CONTEXT),
        vllm_status=400,
        same_message=True,
    ),
    Case(
        "max_tokens_over_context_long_prompt-completions",
        COMPLETIONS,
        lambda facts: base(COMPLETIONS, prompt=facts.long_text * 2, max_tokens=OVER_CONTEXT),
        vllm_status=400,
        same_message=True,
    ),
    *both("return_token_ids", lambda path, facts: base(path, return_token_ids=True)),
    *both(
        "return_token_ids_stop",
        lambda path, facts: {
            **facts.multi_token_stop_body(path, max_tokens=64),
            "return_token_ids": True,
        },
    ),
    *both(
        "return_token_ids_n2_seed",
        lambda path, facts: base(path, n=2, temperature=1.0, seed=1234, return_token_ids=True),
    ),
    Case(
        "return_token_ids_batch-completions",
        COMPLETIONS,
        completions(prompt=[PROMPT, "import os"], return_token_ids=True),
    ),
    Case(
        "return_token_ids_continuous_usage-chat",
        CHAT,
        chat(
            return_token_ids=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        ),
        modes=(True,),
    ),
]
