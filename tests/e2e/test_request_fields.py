"""docs/request-fields.md's table is the spec: every row with an example is walked through
prepare, finalize and each wire's builder for every runtime column, and over HTTP and WebSocket
against the reference vLLM EngineCore and the reference SGLang gRPC engine. A cell that says
`yes` must give a 200; `400 \\`p\\`` a 400 whose `param` is `p`. Doc and behaviour cannot drift."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import pytest
import trio
from google.protobuf import json_format

from smg_trio.client import GatewayClientError, open_gateway_client
from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import prepare_chat_completion, prepare_completion, prepare_generate
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.capabilities import (
    SUPPORTED_PAIRS,
    BadWords,
    Capabilities,
    StringStops,
    capabilities_of,
)
from smg_trio.neutral.runtime import Runtime, Wire, parse_runtime, parse_wire
from smg_trio.neutral.sampling import ConstraintKind
from smg_trio.wire import openai_decode as oad
from smg_trio.wire import tokenspeed_zmq, vllm_zmq
from smg_trio.wire.grpc_messages import build_generate
from tests.e2e.live_server import API_KEY, MODEL, live_server
from tests.e2e.test_engine_fields import Received, worker

DOC: Final = Path(__file__).resolve().parents[2] / "docs" / "request-fields.md"
DEMO: Final = load_model_dir(demo_model_path())
PROMPT_MODEL: Final = DEMO.prompt_model()
NOW: Final = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
PATHS: Final = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "generate": "/generate",
}
_CELL = re.compile(r"^(?:yes|400 `(?P<param>[^`]+)`)$")


class Row(msgspec.Struct, frozen=True):
    field: str
    endpoint: str
    example: dict[str, Any]
    cells: dict[tuple[Runtime, Wire], str | None]  # None: honoured; else the 400's param


def _table() -> list[Row]:
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    columns = [
        (parse_runtime(name.split("+")[0]), parse_wire(name.split("+")[1])) for name in header[3:]
    ]
    rows: list[Row] = []
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        field, endpoint, example = cells[:3]
        if example == "—":
            continue
        decisions: dict[tuple[Runtime, Wire], str | None] = {}
        for column, cell in zip(columns, cells[3:], strict=True):
            matched = _CELL.match(cell)
            assert matched, f"{field}: unreadable cell {cell!r}"
            decisions[column] = matched.group("param")
        rows.append(Row(field, endpoint, json.loads(example.strip("`")), decisions))
    return rows


ROWS: Final = _table()


def body(row: Row) -> dict[str, Any]:
    match row.endpoint:
        case "chat":
            base: dict[str, Any] = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
            }
        case "completions":
            base = {"model": MODEL, "prompt": "hello", "max_tokens": 4}
        case _:
            base = {"text": "hello", "sampling_params": {"max_new_tokens": 4}}
            sampling = {**base["sampling_params"], **row.example.get("sampling_params", {})}
            return {**base, **row.example, "sampling_params": sampling}
    return {**base, **row.example}


def plan_for(row: Row) -> GeneratePlan:
    raw = json.dumps(body(row)).encode()
    match row.endpoint:
        case "chat":
            chat = oad.decode_chat_request(raw)
            return prepare_chat_completion(chat, PROMPT_MODEL, request_id="r", now=NOW)
        case "completions":
            completion = oad.decode_completion_request(raw)
            return prepare_completion(completion, PROMPT_MODEL, request_id="r")
        case _:
            generate = oad.decode_generate_request(raw)
            return prepare_generate(generate, PROMPT_MODEL, request_id="r")


def build_for(row: Row, runtime: Runtime, wire: Wire) -> list[Any]:
    """prepare → finalize → the worker's wire builder, as the gateway runs them: the sampling
    parameters each engine request carries, as builtins (what the engines report receiving)."""
    target = WorkerTarget(runtime=runtime, wire=wire, eos_ids=DEMO.eos_ids)
    finalized = finalize(plan_for(row), target, DEMO.tokenizer)
    vocab = PROMPT_MODEL.vocab_size
    built: list[Any] = []
    for request in finalized.requests:
        if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ):
            vllm_request = vllm_zmq.build_request(
                request,
                engine_request_id="e",
                max_model_len=4096,
                arrival_time=0.0,
                vocab_size=vocab,
            )
            # As msgpack gives it back: lists, integer keys kept.
            built.append(
                msgspec.msgpack.decode(msgspec.msgpack.encode(vllm_request.sampling_params))
            )
        elif (runtime, wire) == (Runtime.TOKENSPEED, Wire.ZMQ):
            tokenspeed_zmq.build_request(
                request, engine_request_id="e", max_model_len=4096, vocab_size=vocab
            )
        else:
            message = build_generate(runtime, request, "e")
            as_dict = json_format.MessageToDict(message, preserving_proto_field_name=True)
            built.append(as_dict.get("sampling_params"))
    return built


CASES: Final = [
    pytest.param(row, runtime, wire, id=f"{row.field}-{runtime.value}+{wire.value}")
    for row in ROWS
    for (runtime, wire) in row.cells
]


def test_the_table_covers_every_runtime_and_the_fields_of_this_issue() -> None:
    fields = {row.field.split(" ")[0] for row in ROWS}
    for name in (
        "response_format",
        "structured_outputs.json",
        "guided_choice",
        "logit_bias",
        "allowed_token_ids",
        "bad_words",
        "min_tokens",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "truncate_prompt_tokens",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "separate_reasoning",
        "suffix",
    ):
        assert name in fields, name
    assert len(ROWS[0].cells) == 7


def _accepts(kind: ConstraintKind) -> Callable[[Capabilities], bool]:
    return lambda caps: caps.accepts(kind)


# The capability (neutral/capabilities.py) that decides each row whose columns differ: its cell
# is `yes` exactly where the capability holds. Any other row must read the same in every column.
DECIDED_BY: Final[dict[str, Callable[[Capabilities], bool]]] = {
    "n greedy": lambda caps: caps.greedy_n,
    "top_k 128": lambda caps: caps.top_k_below is None or caps.top_k_below > 128,
    "repetition_penalty 2.5": lambda caps: (
        caps.max_repetition_penalty is None or caps.max_repetition_penalty >= 2.5
    ),
    "stop": lambda caps: caps.string_stops is not StringStops.REFUSED,
    "sampling_params.stop": lambda caps: caps.string_stops is not StringStops.REFUSED,
    "min_tokens": lambda caps: caps.min_tokens,
    "logit_bias": lambda caps: caps.logit_bias,
    "allowed_token_ids": lambda caps: caps.allowed_token_ids,
    "bad_words": lambda caps: caps.bad_words is not BadWords.REFUSED,
    "response_format json_object": _accepts(ConstraintKind.JSON_OBJECT),
    "response_format json_schema": _accepts(ConstraintKind.JSON_SCHEMA),
    "structured_outputs.json": _accepts(ConstraintKind.JSON_SCHEMA),
    "structured_outputs.regex": _accepts(ConstraintKind.REGEX),
    "structured_outputs.choice": _accepts(ConstraintKind.CHOICE),
    "structured_outputs.grammar": _accepts(ConstraintKind.GRAMMAR),
    "structured_outputs.json_object": _accepts(ConstraintKind.JSON_OBJECT),
    "guided_json": _accepts(ConstraintKind.JSON_SCHEMA),
    "guided_regex": _accepts(ConstraintKind.REGEX),
    "guided_choice": _accepts(ConstraintKind.CHOICE),
    "guided_grammar": _accepts(ConstraintKind.GRAMMAR),
    "sampling_params.json_schema": _accepts(ConstraintKind.JSON_SCHEMA),
    "sampling_params.regex": _accepts(ConstraintKind.REGEX),
    "sampling_params.ebnf": _accepts(ConstraintKind.GRAMMAR),
    # A forced tool choice is a JSON schema built from the tools (docs/request-fields.md §3).
    "tool_choice required with tools": _accepts(ConstraintKind.JSON_SCHEMA),
    "tool_choice named with tools": _accepts(ConstraintKind.JSON_SCHEMA),
    "return_logprob + top_logprobs_num": lambda caps: caps.top_logprobs,
    "prompt_logprobs": lambda caps: caps.prompt_logprobs,
    "echo + logprobs": lambda caps: caps.prompt_logprobs,
    "echo + logprobs, max_tokens 0": lambda caps: caps.prompt_logprobs,
    "echo + logprobs (stream)": lambda caps: caps.prompt_logprobs,
}


def test_the_doc_table_agrees_with_the_capability_table() -> None:
    """Doc and capabilities cannot drift: the columns are the table's pairs, every row that
    differs across columns is decided by one capability, and each cell says what it says."""
    assert set(ROWS[0].cells) == SUPPORTED_PAIRS
    for row in ROWS:
        decide = DECIDED_BY.get(row.field)
        if decide is None:
            assert len(set(row.cells.values())) == 1, f"{row.field}: no capability decides it"
            continue
        for pair, param in row.cells.items():
            honoured = decide(capabilities_of(*pair))
            assert (param is None) == honoured, (row.field, pair)
    assert set(DECIDED_BY) <= {row.field for row in ROWS}


@pytest.mark.parametrize(("row", "runtime", "wire"), CASES)
def test_every_cell_holds_through_prepare_finalize_and_the_wire(
    row: Row, runtime: Runtime, wire: Wire
) -> None:
    param = row.cells[(runtime, wire)]
    if param is None:
        build_for(row, runtime, wire)
        return
    with pytest.raises(ClientError) as info:
        build_for(row, runtime, wire)
    assert (info.value.status, info.value.param) == (400, param)


async def _walk_http(
    base: str, column: tuple[Runtime, Wire], headers: dict[str, str], received: Received
) -> None:
    """Every row over HTTP; after each 200, the engine's own report of the sampling parameters
    it received must equal what the wire builder makes of the row (`build_for`): every value
    reached the engine intact (the reference engines report it: `engines.received_log`)."""
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=20) as client:
        for row in ROWS:
            tag = f"walk-{uuid.uuid4().hex}"
            response = await client.post(
                PATHS[row.endpoint], json=body(row), headers={"x-request-id": tag}
            )
            param = row.cells[column]
            if param is None:
                assert response.status_code == 200, (row.field, response.text)
                fields = await received(tag)
                assert fields is not None, row.field
                got = fields if column[1] is Wire.ZMQ else fields.get("sampling_params")
                assert got in build_for(row, *column), row.field
            else:
                assert response.status_code == 400, (row.field, response.text)
                assert response.json()["error"]["param"] == param, row.field


async def test_the_vllm_zmq_column_over_http_and_websocket(tmp_path: Path) -> None:
    column = (Runtime.VLLM, Wire.ZMQ)
    with trio.fail_after(90):
        async with live_server(tmp_path) as server:

            async def received(fragment: str) -> dict[str, Any] | None:
                value = await server.backend.call_utility("smg_trio_received", fragment)
                return value if value is None else dict(value)

            await _walk_http(server.base_url, column, server.auth, received)
            url = f"ws://127.0.0.1:{server.port}/v1/ws"
            async with open_gateway_client(url, api_key=API_KEY) as client:
                for row in ROWS:
                    if row.endpoint == "generate":
                        continue  # /generate is HTTP only
                    param = row.cells[column]
                    if param is None:
                        response = await client.request(PATHS[row.endpoint], body(row))
                        assert response["choices"], row.field
                        continue
                    with pytest.raises(GatewayClientError) as info:
                        await client.request(PATHS[row.endpoint], body(row))
                    assert info.value.error.get("param") == param, row.field


async def test_the_sglang_grpc_column_over_http(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with worker(Runtime.SGLANG, Wire.GRPC, tmp_path) as (base, received):
            await _walk_http(base, (Runtime.SGLANG, Wire.GRPC), {}, received)
