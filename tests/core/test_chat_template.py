"""Chat templates render byte-identically to transformers' jinja2 set-up (the oracle)."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from smg_trio.core.chat_template import ChatTemplate
from smg_trio.errors import ClientError, ConfigError

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": None, "unk_token": "<unk>"}

# Templates written for these tests in the styles real models use: ChatML with a system default,
# a tools-aware template exercising namespace/loop/tojson/raise_exception/strftime_now, and the
# chat template of the tiny-llama model the real-engine tests use (docs/real-engines.md).
CHATML = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are helpful.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = """{%- set ns = namespace(system=none) -%}
{%- for message in messages -%}
  {%- if message.role == 'system' -%}{%- set ns.system = message.content -%}{%- endif -%}
{%- endfor -%}
{{ bos_token }}[date {{ strftime_now('%d %b %Y') }}]
{%- if ns.system is not none %} SYS: {{ ns.system.strip() }}{% endif %}
{% if tools is defined and tools %}
TOOLS: {{ tools | tojson }}
{%- for tool in tools %}
  - {{ tool.function.name }} {{ tool.function.get('description', 'none') }}
{%- endfor %}
{% endif %}
{%- for message in messages if message.role != 'system' -%}
  {%- if message.role not in ['user', 'assistant', 'tool'] -%}
    {{ raise_exception('unknown role: ' + message.role) }}
  {%- endif -%}
  <{{ message.role }}>{{ message.content | default('', true) }}
  {%- if message.tool_calls is defined -%}
    {%- for call in message.tool_calls -%}{{ call | tojson(indent=2) }}{%- endfor -%}
  {%- endif -%}
  {%- if loop.last and message.role == 'user' %}{% break %}{% endif %}
</{{ message.role }}>
{% endfor -%}
{%- if add_generation_prompt %}<assistant>{% endif -%}"""
TINY_LLAMA = (
    "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + "
    "message['content'] + '<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|assistant|>\\n' }}{% endif %}"
)


class _OracleRaise(Exception):
    pass


def _oracle_raise_exception(message: str) -> None:
    raise _OracleRaise(message)


def _oracle_tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@functools.cache
def _oracle_template(source: str) -> jinja2.Template:
    """transformers' renderer, re-created: the reference our minijinja path must equal. Compiled
    once per source (compiling is not what the tests compare; hypothesis renders hundreds)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _oracle_tojson
    env.globals["raise_exception"] = _oracle_raise_exception
    env.globals["strftime_now"] = NOW.strftime
    return env.from_string(source)


def _oracle(source: str, messages: Sequence[Mapping[str, Any]], **kw: Any) -> str:
    specials = {k: v for k, v in SPECIALS.items() if v is not None}
    return _oracle_template(source).render(messages=list(messages), **specials, **kw)


@functools.cache
def _our_template(source: str) -> ChatTemplate:
    """Compiled once per source, as the gateway does once per model (ChatTemplate is immutable
    after construction)."""
    return ChatTemplate(source, special_tokens=SPECIALS)


def _ours(source: str, messages: Sequence[Mapping[str, Any]], **kw: Any) -> str:
    gen = kw.pop("add_generation_prompt")
    tools = kw.pop("tools", None)
    return _our_template(source).render(
        messages, add_generation_prompt=gen, now=NOW, tools=tools, extra=kw
    )


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "  Be terse.  "},
    {"role": "user", "content": "Héllo <b>&'\"</b> 中文 🚀"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"x": [1, "ü"]}}}],
    },
    {"role": "tool", "content": "42"},
    {"role": "user", "content": "again"},
]
TOOL_LIST: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "f", "description": "does <f>"}},
    {"type": "function", "function": {"name": "g"}},
]


@pytest.mark.parametrize("source", [CHATML, TOOLS, TINY_LLAMA])
@pytest.mark.parametrize("gen", [True, False])
def test_matches_transformers_oracle(source: str, gen: bool) -> None:
    messages = CONVERSATION if source is TOOLS else [m for m in CONVERSATION if m["content"]]
    kw: dict[str, Any] = {"add_generation_prompt": gen}
    if source is TOOLS:
        kw["tools"] = TOOL_LIST
    expected = _oracle(source, messages, **kw)
    assert _ours(source, messages, **dict(kw)) == expected


def test_shipped_templates_match_oracle() -> None:
    from smg_trio.model.folder import demo_model_path, load_model_dir

    model = load_model_dir(demo_model_path())
    assert model.chat_template is not None
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    ours = ChatTemplate(
        model.chat_template,
        special_tokens={"bos_token": model.bos_token, "eos_token": model.eos_token},
    ).render(messages, add_generation_prompt=True, now=NOW)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    specials = {"bos_token": model.bos_token, "eos_token": model.eos_token}
    assert ours == env.from_string(model.chat_template).render(
        messages=messages, add_generation_prompt=True, **specials
    )


@settings(max_examples=200, deadline=None)
@given(
    contents=st.lists(st.text(max_size=40), min_size=1, max_size=5),
    gen=st.booleans(),
)
def test_any_text_renders_identically(contents: list[str], gen: bool) -> None:
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]
    for source in (CHATML, TOOLS, TINY_LLAMA):
        assert _ours(source, messages, add_generation_prompt=gen) == _oracle(
            source, messages, add_generation_prompt=gen
        )


def test_raise_exception_is_a_client_error_with_the_template_message() -> None:
    with pytest.raises(ClientError, match="unknown role: robot") as info:
        _ours(TOOLS, [{"role": "robot", "content": "x"}], add_generation_prompt=True)
    assert info.value.status == 400
    assert info.value.param == "messages"
    with pytest.raises(_OracleRaise, match="unknown role: robot"):
        _oracle(TOOLS, [{"role": "robot", "content": "x"}], add_generation_prompt=True)


def test_generation_tag_is_stripped() -> None:
    source = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    assert _ours(source, [{"role": "user", "content": "a"}], add_generation_prompt=False) == "a"


def test_template_that_does_not_compile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="does not compile"):
        ChatTemplate("{% for %}", special_tokens={})


def test_runaway_template_runs_out_of_fuel() -> None:
    source = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
    with pytest.raises(ClientError, match="failed to render"):
        _ours(source, [], add_generation_prompt=False)


def test_client_kwargs_cannot_override_messages() -> None:
    out = ChatTemplate("{{ messages | length }}{{ flag }}", special_tokens={}).render(
        [{"role": "user", "content": "x"}],
        add_generation_prompt=False,
        now=NOW,
        extra={"messages": [], "flag": "!"},
    )
    assert out == "1!"


def test_jinja2_oracle_is_the_sandboxed_one() -> None:
    with pytest.raises(jinja2.exceptions.SecurityError):
        _oracle("{{ ''.__class__.__mro__ }}", [], add_generation_prompt=False)


def test_a_render_error_never_quotes_the_template_source() -> None:
    """The TINY_LLAMA template concatenates content: a missing one fails in jinja2 too."""
    messages = [{"role": "assistant"}]
    with pytest.raises(ClientError, match="failed to render") as info:
        _ours(TINY_LLAMA, messages, add_generation_prompt=False)
    assert "message['role']" not in info.value.message
    assert "{{" not in info.value.message
    with pytest.raises(jinja2.UndefinedError):
        _oracle(TINY_LLAMA, messages, add_generation_prompt=False)


def test_empty_content_for_a_tool_call_turn_renders_as_jinja2_does() -> None:
    """prepare passes a null content as "" (vLLM); HF templates then render it like jinja2."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]},
    ]
    for source in (TINY_LLAMA, TOOLS, CHATML):
        ours = _ours(source, messages, add_generation_prompt=True)
        assert ours == _oracle(source, messages, add_generation_prompt=True)
