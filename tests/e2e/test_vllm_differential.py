"""Opt-in differential harness: the same greedy requests to vLLM's own OpenAI server and to
smg-trio in front of a real vLLM engine (headless EngineCore over ZMQ, then `vllm serve --grpc`),
on the same tiny model; the answers must agree field by field (`differential.py` lists what is
not compared). Streaming and non-streaming. docs/real-engines.md explains the setup.

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest -m real_engine tests/e2e/test_vllm_differential.py

Set SMG_TRIO_DIFF_DIR=DIR to also write each case's two answers and divergences as JSON.
Each server starts once per module (vLLM takes 30-45 s); a test never starts one itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from smg_trio.model.folder import ModelDir, load_model_dir
from tests.e2e import real_vllm
from tests.e2e.differential import Answer, Divergence, diff, fold_stream
from tests.e2e.real_vllm import MODEL, SERVED_NAME
from tests.e2e.vllm_cases import CASES, CHAT, COMPLETIONS, Case, Facts, learn_facts
from tests.e2e.vllm_kept import split_kept
from tests.e2e.vllm_structured_cases import STRUCTURED_CASES

REQUEST_S: Final = 120.0
CONCURRENT: Final = 8
DIFF_DIR: Final = os.environ.get("SMG_TRIO_DIFF_DIR", "")

pytestmark = list(real_vllm.MARKS)


@pytest.fixture(scope="module")
def model() -> ModelDir:
    return load_model_dir(MODEL, served_name=SERVED_NAME)


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with real_vllm.vllm_http_server(tmp_path_factory.mktemp("vllm-http")) as url:
        yield url


@pytest.fixture(scope="module", params=["zmq", "grpc"])
def ours_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    wire: str = request.param
    with real_vllm.smg_trio_in_front_of_vllm(wire, tmp_path_factory.mktemp(f"smg-{wire}")) as url:
        yield url


@pytest.fixture(scope="module")
def facts(vllm_url: str, model: ModelDir) -> Facts:
    return learn_facts(vllm_url, model)


async def exchange(base_url: str, case_path: str, body: dict[str, Any], stream: bool) -> Answer:
    sent = dict(body, stream=stream)
    if stream:
        sent["stream_options"] = {"include_usage": True, **body.get("stream_options", {})}
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_S) as client:
        with trio.fail_after(REQUEST_S):
            if not stream:
                response = await client.post(case_path, json=sent)
                return Answer(response.status_code, response.json())
            async with client.stream("POST", case_path, json=sent) as response:
                if response.status_code != 200:
                    return Answer(response.status_code, json.loads(await response.aread()))
                chunks: list[Any] = []
                done = False
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line.removeprefix("data: ")
                    if data == "[DONE]":
                        done = True
                        continue
                    chunks.append(json.loads(data))
                return Answer(200, fold_stream(chunks), chunks, done)


def compare(
    name: str,
    vllm: Answer,
    ours: Answer,
    request: dict[str, Any],
    *,
    case: str,
    wire: str,
    meaning: Callable[[Any, Any], list[Divergence]] | None = None,
) -> list[Divergence]:
    """The divergences no rule of `vllm_kept.KEPT` keeps (those are only reported); `meaning`
    replaces the field-by-field diff where the two answers differ in shape on purpose."""
    if vllm.status == ours.status:
        found = (diff if meaning is None else meaning)(vllm.body, ours.body)
    else:  # one line for the status, one for the two whole bodies: field diffs would be noise
        found = [
            Divergence("status", vllm.status, ours.status),
            Divergence("$", vllm.body, ours.body),
        ]
    if vllm.done != ours.done:
        found.append(Divergence("[DONE]", vllm.done, ours.done))
    unexplained, kept = split_kept(case, wire, found)
    if DIFF_DIR:
        record = {
            "request": request,
            "vllm": vllm.as_report(),
            "smg_trio": ours.as_report(),
            "divergences": [
                {"path": each.path, "vllm": each.vllm, "smg_trio": each.ours}
                for each in unexplained
            ],
            "kept": [
                {"path": each.path, "vllm": each.vllm, "smg_trio": each.ours, "why": why}
                for each, why in kept
            ],
        }
        Path(DIFF_DIR).mkdir(parents=True, exist_ok=True)
        file_name = name.replace("/", "_")  # a test id may hold a URL path
        (Path(DIFF_DIR) / f"{file_name}.json").write_text(json.dumps(record, indent=1))
    return unexplained


def assert_same(divergences: list[Divergence]) -> None:
    assert not divergences, "smg-trio differs from vLLM:\n" + "\n".join(map(str, divergences))


def case_id(case: Case, stream: bool) -> str:
    return f"{case.name}-{'stream' if stream else 'json'}"


CASE_MODES: Final = [
    pytest.param(case, stream, id=case_id(case, stream))
    for case in [*CASES, *STRUCTURED_CASES]
    for stream in case.modes
]


@pytest.mark.parametrize(("case", "stream"), CASE_MODES)
async def test_same_answer_as_vllm(
    case: Case, stream: bool, facts: Facts, vllm_url: str, ours_url: str, request: Any
) -> None:
    body = case.body(facts)
    vllm_body = body if case.vllm_body is None else case.vllm_body(facts)
    vllm = await exchange(vllm_url, case.path, vllm_body, stream)
    assert vllm.status == case.vllm_status, f"the harness expects vLLM to answer {vllm.body}"
    ours = await exchange(ours_url, case.path, body, stream)
    wire = request.node.callspec.params["ours_url"]
    divergences = compare(
        request.node.name, vllm, ours, body, case=case.name, wire=wire, meaning=case.compare
    )
    if case.check is not None:
        case.check(vllm.body)  # the property holds for vLLM's own answer: the case is sound
        if ours.status == 200:
            case.check(ours.body)
    assert_same(divergences)
    if case.same_message:  # `diff` leaves error wording out; these cases pin it
        assert ours.body["error"]["message"] == vllm.body["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS], ids=["chat", "completions"])
async def test_multi_token_stop_usage_under_concurrent_load(
    path: str, stream: bool, facts: Facts, vllm_url: str, ours_url: str, request: Any
) -> None:
    """CONCURRENT identical requests at once: the engine keeps generating after the stop until
    the abort lands, and those tokens must not be counted (vLLM counts up to the stop's own)."""
    body = facts.multi_token_stop_body(path, max_tokens=64)

    async def all_at_once(base_url: str) -> list[Answer]:
        answers: list[Answer] = [Answer(0, None)] * CONCURRENT

        async def one(index: int) -> None:
            answers[index] = await exchange(base_url, path, body, stream)

        async with trio.open_nursery() as nursery:
            for index in range(CONCURRENT):
                nursery.start_soon(one, index)
        return answers

    vllm_answers = await all_at_once(vllm_url)
    ours_answers = await all_at_once(ours_url)
    divergences: list[Divergence] = []
    wire = request.node.callspec.params["ours_url"]
    for index, (vllm, ours) in enumerate(zip(vllm_answers, ours_answers, strict=True)):
        name = f"{request.node.name}-{index}"
        divergences.extend(compare(name, vllm, ours, body, case="multi_token_stop", wire=wire))
    assert_same(divergences)


@pytest.mark.parametrize("prefix", ["", "/v1"], ids=["vllm-path", "v1-path"])
async def test_token_paths_answer_as_vllms(prefix: str, vllm_url: str, ours_url: str) -> None:
    """vLLM's /tokenize and /detokenize (ours also under /v1: the same handler) give vLLM's
    answers; /version has vLLM's shape (the value is ours, docs/client-apis.md §4)."""
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("/tokenize", {"model": SERVED_NAME, "prompt": "def hello(world):"}),
        ("/tokenize", {"model": SERVED_NAME, "prompt": "hi", "add_special_tokens": False}),
        ("/tokenize", {"model": SERVED_NAME, "messages": [{"role": "user", "content": "hi"}]}),
    ]
    async with httpx.AsyncClient(timeout=REQUEST_S) as client:
        for path, body in bodies:
            vllm = await client.post(f"{vllm_url}{path}", json=body)
            ours = await client.post(f"{ours_url}{prefix}{path}", json=body)
            assert vllm.status_code == ours.status_code == 200, ours.text
            assert_same(diff(vllm.json(), ours.json()))
            if path == "/tokenize":  # and back: the ids vLLM gave
                bodies.append(
                    ("/detokenize", {"model": SERVED_NAME, "tokens": vllm.json()["tokens"]})
                )
        vllm_version = (await client.get(f"{vllm_url}/version")).json()
        ours_version = (await client.get(f"{ours_url}/version")).json()
    assert set(vllm_version) == set(ours_version) == {"version"}
    assert isinstance(ours_version["version"], str)


async def test_models_list_names_the_served_model(vllm_url: str, ours_url: str) -> None:
    async with httpx.AsyncClient(timeout=REQUEST_S) as client:
        vllm = (await client.get(f"{vllm_url}/v1/models")).json()
        ours = (await client.get(f"{ours_url}/v1/models")).json()
    assert [each["id"] for each in ours["data"]] == [each["id"] for each in vllm["data"]]
    assert ours["object"] == vllm["object"] == "list"
