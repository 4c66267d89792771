"""Every structured-output form through the openai SDK, the gateway and the reference vLLM
EngineCore over ZMQ (docs/request-fields.md §2). The reference engine refuses what the real one
refuses (a raw `choice`, a map without `_backend`: a terminal ERROR, so a 500 here), follows
vLLM's grammar for a choice, and reports the `structured_outputs` map it decoded: each form must
arrive as vLLM 0.32's own front end sends it."""

from __future__ import annotations

import json
import uuid
from typing import Any, Final

import httpx
import pytest
import trio
from openai import OpenAI

from tests.e2e.live_server import MODEL, LiveServer, openai_client

TEST_TIMEOUT_S: Final = 30.0
SCHEMA: Final = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
SCHEMA_TEXT: Final = json.dumps(SCHEMA, separators=(",", ":"))
GRAMMAR: Final = 'root ::= "a" | "b"'
AUTO: Final = {"_backend": "xgrammar", "_backend_was_auto": True}
TOOL: Final = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}

# (name, extra request fields, the `structured_outputs` map the engine must receive)
FORMS: Final[list[tuple[str, dict[str, Any], dict[str, Any]]]] = [
    ("so_choice", {"structured_outputs": {"choice": ["yes", "no"]}}, {}),
    ("guided_choice", {"guided_choice": ["yes", "no"]}, {}),
    ("so_regex", {"structured_outputs": {"regex": "[0-9]+"}}, {"regex": "[0-9]+"}),
    ("guided_regex", {"guided_regex": "[0-9]+"}, {"regex": "[0-9]+"}),
    ("so_grammar", {"structured_outputs": {"grammar": GRAMMAR}}, {"grammar": GRAMMAR}),
    ("guided_grammar", {"guided_grammar": GRAMMAR}, {"grammar": GRAMMAR}),
    ("so_json", {"structured_outputs": {"json": SCHEMA}}, {"json": SCHEMA_TEXT}),
    ("so_json_string", {"structured_outputs": {"json": SCHEMA_TEXT}}, {"json": SCHEMA_TEXT}),
    ("guided_json", {"guided_json": SCHEMA}, {"json": SCHEMA_TEXT}),
    ("so_json_object", {"structured_outputs": {"json_object": True}}, {"json_object": True}),
    (
        "response_format_json_schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": SCHEMA},
            }
        },
        {"json": SCHEMA_TEXT},
    ),
    (
        "response_format_json_object",
        {"response_format": {"type": "json_object"}},
        {"json_object": True},
    ),
]
CHOICE_GRAMMAR: Final = 'root ::= "yes" | "no"'


def ask(client: OpenAI, endpoint: str, request_id: str, extra: dict[str, Any]) -> tuple[str, str]:
    """(text, finish_reason) of one greedy request carrying `extra` in its body."""
    headers = {"x-request-id": request_id}
    if endpoint == "chat":
        answer = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Yes or no?"}],
            max_tokens=8,
            temperature=0,
            extra_body=extra,
            extra_headers=headers,
        )
        return answer.choices[0].message.content or "", answer.choices[0].finish_reason
    completion = client.completions.create(
        model=MODEL,
        prompt="Yes or no?",
        max_tokens=8,
        temperature=0,
        extra_body=extra,
        extra_headers=headers,
    )
    return completion.choices[0].text, completion.choices[0].finish_reason


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_every_form_reaches_enginecore_as_vllms_front_end_sends_it(
    server: LiveServer, endpoint: str
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        for name, extra, received in FORMS:
            request_id = f"{name}-{uuid.uuid4().hex}"
            text, finish = await trio.to_thread.run_sync(ask, client, endpoint, request_id, extra)
            fields = await server.backend.call_utility("smg_trio_received", request_id)
            assert fields is not None, name
            structured = dict(fields)["structured_outputs"]
            if "choice" in name:  # vLLM's grammar for the choice, which the engine follows
                assert structured == {"grammar": CHOICE_GRAMMAR, **AUTO}, name
                assert (text, finish) == ("yes", "stop"), name
            else:
                assert structured == {**received, **AUTO}, name


def forced_call(client: OpenAI, request_id: str) -> None:
    """tool_choice "required" without a tool parser: generated under vLLM's schema for it."""
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Call f."}],
        max_tokens=8,
        temperature=0,
        tools=[TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        extra_headers={"x-request-id": request_id},
    )


async def test_a_forced_tool_choice_is_vllms_schema_for_it(server: LiveServer) -> None:
    request_id = f"required-{uuid.uuid4().hex}"
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        await trio.to_thread.run_sync(forced_call, client, request_id)
        fields = await server.backend.call_utility("smg_trio_received", request_id)
    assert fields is not None
    structured = dict(fields)["structured_outputs"]
    assert json.loads(structured["json"]) == {
        "type": "array",
        "minItems": 1,
        "maxItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {"name": {"type": "string", "enum": ["f"]}, "parameters": SCHEMA},
                    "required": ["name", "parameters"],
                }
            ],
        },
    }
    assert {key: structured[key] for key in AUTO} == AUTO


async def test_generates_sglang_constraints_reach_enginecore_the_same_way(
    server: LiveServer,
) -> None:
    """/generate (no SDK speaks it: httpx): SGLang's `regex` and `ebnf` arrive as vLLM's keys."""
    async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as client:
        with trio.fail_after(TEST_TIMEOUT_S):
            for sampling, received in (
                ({"regex": "[0-9]+"}, {"regex": "[0-9]+"}),
                ({"ebnf": GRAMMAR}, {"grammar": GRAMMAR}),
                ({"json_schema": SCHEMA_TEXT}, {"json": SCHEMA_TEXT}),
            ):
                request_id = f"generate-{uuid.uuid4().hex}"
                body = {"text": "hi", "sampling_params": {"max_new_tokens": 4, **sampling}}
                response = await client.post(
                    "/generate", json=body, headers={"x-request-id": request_id}
                )
                assert response.status_code == 200, response.text
                fields = await server.backend.call_utility("smg_trio_received", request_id)
                assert fields is not None
                assert dict(fields)["structured_outputs"] == {**received, **AUTO}
