"""vLLM's `--chat-template-content-format` (core/template_content_format.py): `auto` read from the
template's statements as vLLM reads its syntax tree (checked against vLLM 0.32's own detection
on 59 templates outside this repository: all agree; docs/request-fields.md §1), and each
form's content as vLLM hands it to the template."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

import msgspec
import pytest

from smg_trio.core.chat_template import ChatTemplate, message_for_template, template_messages
from smg_trio.core.frontend_options import FrontendOptions
from smg_trio.core.prepare import prepare_chat
from smg_trio.core.template_content_format import (
    ContentFormat,
    ContentFormatFlag,
    detected_content_format,
)
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import decode_chat_request

NOW: Final = dt.datetime(2026, 12, 8, tzinfo=dt.UTC)
DEMO: Final = load_model_dir(demo_model_path())
LOOP: Final = "{% for m in messages %}"


@pytest.mark.parametrize(
    ("template", "form"),
    [
        (LOOP + "{{ m['content'] }}{% endfor %}", "string"),
        (LOOP + "{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}", "openai"),
        (LOOP + '{% for p in m["content"] | reverse %}{% endfor %}{% endfor %}', "openai"),
        (LOOP + "{% for p in m.content[1:] %}{% endfor %}{% endfor %}", "openai"),
        # A name bound to the messages (sliced), its loop variable's content.
        (
            "{% set rest = messages[1:] %}{% for x in rest %}"
            "{%- for p in x.content if p.type == 'text' %}{% endfor %}{% endfor %}",
            "openai",
        ),
        # A loop over a bare `content` outside any macro.
        (
            LOOP + "{% set content = m.content %}{% for p in content %}{% endfor %}{% endfor %}",
            "openai",
        ),
        # A macro whose parameter takes a message's content, by position or keyword.
        (
            "{% macro show(c) %}{% for p in c %}{{ p.text }}{% endfor %}{% endmacro %}"
            + LOOP
            + "{{ show(m.content) }}{% endfor %}",
            "openai",
        ),
        (
            "{% macro show(x, c=none) %}{% for p in c %}{% endfor %}{% endmacro %}"
            + LOOP
            + "{{ show(1, c=m['content']) }}{% endfor %}",
            "openai",
        ),
        # A loop over something else's content, or over `content` inside an unrelated macro.
        ("{% for p in tools.content %}{% endfor %}" + LOOP + "{% endfor %}", "string"),
        ("{% macro f(content) %}{% for p in content %}{% endfor %}{% endmacro %}", "string"),
        ("{# {% for p in m.content %} #}" + LOOP + "{{ m.content }}{% endfor %}", "string"),
    ],
)
def test_auto_reads_whether_the_template_loops_over_a_messages_content(
    template: str, form: ContentFormat
) -> None:
    assert detected_content_format(template) == form


def test_the_demo_models_template_takes_strings() -> None:
    template = DEMO.prompt_model().chat_template
    assert template is not None
    assert template.content_format == "string"


def template_input(
    form: ContentFormat, message: dict[str, Any], placeholder: str | None = None
) -> Any:
    decoded = msgspec.convert(message, oa.ChatMessage)
    return message_for_template(
        decoded, 0, developer_role=False, form=form, placeholder=placeholder
    )["content"]


IMAGE: Final = {"type": "image_url", "image_url": {"url": "data:,"}}
TEXT_A: Final = {"type": "text", "text": "a"}
TEXT_B: Final = {"type": "text", "text": "b"}


def test_the_string_form_joins_texts_and_puts_the_images_placeholders_in_front() -> None:
    assert template_input("string", {"role": "user", "content": "hi"}) == "hi"
    user = {"role": "user", "content": [TEXT_A, IMAGE, TEXT_B, IMAGE]}
    assert template_input("string", user, "<image>") == "<image>\n<image>\na\nb"
    # Placeholders the text already holds are the images' own (vLLM counts them).
    placed = {"role": "user", "content": [{"type": "text", "text": "x <image> y"}, IMAGE]}
    assert template_input("string", placed, "<image>") == "x <image> y"
    assert template_input("string", {"role": "user", "content": [IMAGE]}, "<image>") == "<image>"
    assert template_input("string", {"role": "assistant", "content": None}) == ""
    too_many = {"role": "user", "content": [{"type": "text", "text": "<image><image>"}, IMAGE]}
    with pytest.raises(ClientError, match="more image placeholders"):
        template_input("string", too_many, "<image>")


def test_the_openai_form_lists_parts_and_keeps_a_tools_text_a_string() -> None:
    assert template_input("openai", {"role": "user", "content": "hi"}) == [
        {"type": "text", "text": "hi"}
    ]
    user = {"role": "user", "content": [TEXT_A, IMAGE]}
    assert template_input("openai", user, "<image>") == [TEXT_A, {"type": "image"}]
    assert template_input("openai", {"role": "assistant", "content": None}) == []
    tool = {"role": "tool", "content": [TEXT_A, TEXT_B], "tool_call_id": "c"}
    assert template_input("openai", tool) == "a\nb"


def test_a_part_other_than_text_or_image_is_refused_naming_it() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    with pytest.raises(ClientError) as refused:
        template_input("openai", {"role": "user", "content": [TEXT_A, audio]})
    assert refused.value.param == "messages[0].content[1]"


def chat_text(form: ContentFormatFlag, template: str, content: Any, **body: Any) -> str:
    model = DEMO.prompt_model()
    compiled = ChatTemplate(template, special_tokens={})
    frontend = FrontendOptions(content_format=form)
    model = msgspec.structs.replace(model, chat_template=compiled, frontend=frontend)
    messages = [{"role": "user", "content": content}]
    request = decode_chat_request(json.dumps({"messages": messages, **body}).encode())
    plan = prepare_chat(request, model, request_id="r", now=NOW)
    return DEMO.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)


SHOWS: Final = LOOP + "{{ m['content'] }}{% endfor %}"
ITERATES: Final = LOOP + "{% for p in m['content'] %}[{{ p['text'] }}]{% endfor %}{% endfor %}"


def test_the_server_flag_forces_a_form_and_auto_follows_the_template() -> None:
    assert chat_text("auto", SHOWS, "hi") == "hi"
    assert chat_text("auto", ITERATES, "hi") == "[hi]"  # vLLM's auto: the list for this one
    assert chat_text("string", ITERATES, "hi") == "[][]"  # what vLLM renders: each character
    forced = chat_text("openai", SHOWS, "hi")
    assert forced.startswith("[")  # the list as the template prints it
    assert "hi" in forced
    assert chat_text("string", SHOWS, [TEXT_A, TEXT_B]) == "a\nb"


def test_continue_final_message_takes_the_last_text_of_a_listed_message() -> None:
    template = LOOP + "{% for p in m['content'] %}{{ p['text'] }}{% endfor %}<end>{% endfor %}"
    text = chat_text(
        "openai",
        template,
        [TEXT_A, TEXT_B],
        add_generation_prompt=False,
        continue_final_message=True,
    )
    assert text == "ab"


def test_the_harmony_renderer_keeps_strings() -> None:
    request = decode_chat_request(
        json.dumps({"messages": [{"role": "user", "content": [TEXT_A]}]}).encode()
    )
    assert template_messages(request, developer_role=True)[0]["content"] == "a"
