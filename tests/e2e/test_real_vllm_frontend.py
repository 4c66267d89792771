"""Opt-in: the real `vllm serve` with smg-trio as its front end (docs/vllm-frontend.md §6):

    VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=<smg-trio> vllm serve MODEL ...

the openai SDK's chat, completions and streams give plain `vllm serve`'s greedy text, and so
does the Responses API; an unsupported flag stops `vllm serve` with one line naming it; SIGTERM
stops everything; an engine killed stops `vllm serve` with no process of its group left; with
`--data-parallel-size 2` both engines serve. Needs SMG_TRIO_VLLM_VENV and SMG_TRIO_VLLM_MODEL
(docs/real-engines.md); each case starts its own `vllm serve` (30-60 s each, one at a time).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from openai import OpenAI

from tests.e2e.real_vllm import (
    MARKS,
    Launched,
    free_port,
    launch,
    running,
    vllm_command,
    wait_healthy,
)

pytestmark = list(MARKS)

SERVED: Final = "tiny"
STOPPED_WITHIN_S: Final = 30.0
PROMPT: Final = "Hello my name is"
MESSAGES: Final = [{"role": "user", "content": "Tell me a story"}]


def frontend_wrapper(folder: Path) -> Path:
    """An executable running this checkout's smg-trio with this interpreter (vLLM runs it)."""
    wrapper = folder / "smg-trio-frontend"
    root = Path(__file__).parents[2]
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} -m smg_trio "$@"\n', encoding="utf-8"
    )
    wrapper.chmod(0o755)
    return wrapper


def hook_env(folder: Path) -> dict[str, str]:
    return {"VLLM_USE_RUST_FRONTEND": "1", "VLLM_RUST_FRONTEND_PATH": str(frontend_wrapper(folder))}


@contextlib.contextmanager
def vllm_with_smg_trio(log_dir: Path, *flags: str) -> Iterator[tuple[str, Launched]]:
    port = free_port()
    command = vllm_command("--host", "127.0.0.1", "--port", str(port), *flags)
    server = launch("vllm-smg-trio", command, log_dir, hook_env(log_dir))
    with running([server]):
        url = f"http://127.0.0.1:{port}"
        print(f"vllm serve + smg-trio frontend ready after {wait_healthy([server], url):.1f} s")
        yield url, server


def greedy_answers(url: str) -> dict[str, Any]:
    with OpenAI(base_url=f"{url}/v1", api_key="unused") as client:
        return _greedy_answers(client)


def _greedy_answers(client: OpenAI) -> dict[str, Any]:
    common: dict[str, Any] = {"model": SERVED, "max_tokens": 24, "temperature": 0}
    chat_stream = client.chat.completions.create(messages=MESSAGES, stream=True, **common)
    text_stream = client.completions.create(prompt=PROMPT, stream=True, **common)
    return {
        "completion": client.completions.create(prompt=PROMPT, **common).choices[0].text,
        "chat": client.chat.completions.create(messages=MESSAGES, **common)
        .choices[0]
        .message.content,
        "chat_stream": "".join(c.choices[0].delta.content or "" for c in chat_stream if c.choices),
        "completion_stream": "".join(c.choices[0].text for c in text_stream if c.choices),
    }


def group_members(pgid: int) -> list[str]:
    """The command lines of the processes still in process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    return members


def group_pids(pgid: int, marker: bytes) -> list[int]:
    """The processes of group `pgid` whose command line holds `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
                if int(fields[2]) == pgid and fields[0] != "Z" and marker in cmdline:
                    pids.append(int(entry.name))
    return sorted(pids)


def engine_pids(pgid: int) -> list[int]:
    return group_pids(pgid, b"EngineCore")


def wait_exit(server: Launched, within_s: float) -> tuple[int, float]:
    started = time.monotonic()
    while server.process.poll() is None and time.monotonic() - started < within_s:
        time.sleep(0.1)
    code = server.process.poll()
    assert code is not None, f"vllm serve still running after {within_s} s"
    return code, time.monotonic() - started


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Plain `vllm serve`'s answers; `--enable-scale-out` serves its /inference/v1/generate
    (ours serves it without the flag: docs/vllm-frontend.md §7)."""
    port = free_port()
    flags = ("--served-model-name", SERVED, "--enable-scale-out")
    command = vllm_command("--host", "127.0.0.1", "--port", str(port), *flags)
    plain = launch("vllm-plain", command, tmp_path_factory.mktemp("vllm-plain"))
    with running([plain]):
        url = f"http://127.0.0.1:{port}"
        print(f"plain vllm serve ready after {wait_healthy([plain], url):.1f} s")
        return {**greedy_answers(url), "tokens": tokens_answer(url), "abort": abort_answer(url)}


def assert_same(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Key by key, so that a failure shows both sides whole."""
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == value, f"{key}:\n ours  {got[key]}\n vLLM's {value}"


TOKEN_PROMPT: Final = [1, 1504, 590, 1024, 338]


def tokens_answer(url: str) -> dict[str, Any]:
    """A greedy /inference/v1/generate: the fields that do not vary between runs."""
    request = {
        "model": SERVED,
        "token_ids": TOKEN_PROMPT,
        "sampling_params": {"max_tokens": 24, "temperature": 0},
        "return_token_ids": True,
    }
    answer = httpx.post(f"{url}/inference/v1/generate", json=request, timeout=60.0)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    for varying in ("request_id", "created"):
        body.pop(varying)
    # Each choice names the engine's weights over its ids, as vLLM's: [{"version": "default",
    # "start": 0, "end": N}] (docs/vllm-frontend.md §7).
    return dict(body)


def abort_answer(url: str) -> dict[str, Any]:
    """`--enable-scale-out`'s abort (docs/vllm-frontend.md §9): a long stream aborted by its id
    after its first ids ends with `abort` before its max_tokens; what the abort path answers."""
    request = {
        "model": SERVED,
        "token_ids": TOKEN_PROMPT,
        "sampling_params": {"max_tokens": 1500, "temperature": 0, "ignore_eos": True},
        "stream": True,
        "request_id": "to-abort",
    }
    abort_url = f"{url}/inference/v1/abort_requests"
    finishes: list[str | None] = []
    answers: list[tuple[object, ...]] = []
    generated = 0
    with (
        httpx.Client(timeout=60.0) as client,
        client.stream("POST", f"{url}/inference/v1/generate", json=request) as stream,
    ):
        for line in stream.iter_lines():
            if not line.startswith("data: {"):
                continue
            (choice,) = json.loads(line[6:])["choices"]
            generated += len(choice["token_ids"] or [])
            finishes.append(choice["finish_reason"])
            if not answers:
                abort = client.post(abort_url, json={"request_ids": ["generate-tokens-to-abort"]})
                answers.append((abort.status_code, abort.content))
        unknown = client.post(abort_url, json={"request_ids": ["generate-tokens-unknown"]})
        bad = client.post(abort_url, json={})
    return {
        "finish": finishes[-1],
        "cut_short": 0 < generated < 1500,
        "answers": [*answers, (unknown.status_code, unknown.content), (bad.status_code,)],
    }


def test_greedy_text_equals_plain_vllm_serve(reference: dict[str, Any], tmp_path: Path) -> None:
    flags = ("--served-model-name", SERVED, "--enable-scale-out")
    with vllm_with_smg_trio(tmp_path, *flags) as (url, server):
        ours = {**greedy_answers(url), "tokens": tokens_answer(url), "abort": abort_answer(url)}
        assert reference["abort"]["finish"] == "abort"
        (choice,) = reference["tokens"]["choices"]
        assert choice["weight_versions"] == [
            {"version": "default", "start": 0, "end": len(choice["token_ids"])}
        ]
        assert_same(ours, reference)
        with OpenAI(base_url=f"{url}/v1", api_key="unused") as client:
            answer = client.responses.create(
                model=SERVED, input="Tell me a story", max_output_tokens=24, temperature=0
            )
        assert answer.output_text == reference["chat"]
        server.process.send_signal(signal.SIGTERM)
        code, took = wait_exit(server, STOPPED_WITHIN_S)
        print(f"vllm serve exited {code} {took:.1f} s after SIGTERM")
        assert not group_members(server.process.pid)


def test_an_unsupported_flag_stops_vllm_serve_naming_it(tmp_path: Path) -> None:
    """Within 10 s of vLLM running its front end (vLLM's own start-up before that, importing
    torch and building its config, takes ~25 s here and is not ours)."""
    command = vllm_command(
        "--host", "127.0.0.1", "--port", str(free_port()), "--enable-server-load-tracking"
    )
    server = launch("vllm-bad-flag", command, tmp_path, hook_env(tmp_path))
    with running([server]):
        started = time.monotonic()
        while "Launching Rust frontend" not in server.log_path.read_text(errors="replace"):
            assert server.process.poll() is None, server.log_tail()
            assert time.monotonic() - started < 300.0, "vLLM never ran its front end"
            time.sleep(0.1)
        code, took = wait_exit(server, 10.0)
        log = server.log_path.read_text(errors="replace")
        print(f"vllm serve exited {code} {took:.1f} s after running its front end")
        assert code != 0
        launched = log.index("Launching Rust frontend")
        assert (
            "smg-trio: vLLM flag --enable-server-load-tracking is not supported" in log[launched:]
        )


def test_a_killed_engine_stops_vllm_serve(tmp_path: Path) -> None:
    """Within 5 s of the last engine's SIGKILL the API is gone and our front end has exited.
    `vllm serve` itself exits later: its main process then spends seconds in its interpreter's
    final garbage collection (docs/vllm-frontend.md §4), which no front end can shorten; the
    time is measured and printed, and bounded by STOPPED_WITHIN_S."""
    with vllm_with_smg_trio(tmp_path) as (url, server):
        (engine,) = engine_pids(server.process.pid)
        (frontend,) = group_pids(server.process.pid, b"smg_trio")
        os.kill(engine, signal.SIGKILL)
        started = time.monotonic()
        api_gone = frontend_gone = None
        while time.monotonic() - started < 5.0 and frontend_gone is None:
            if api_gone is None:
                try:
                    httpx.get(f"{url}/health", timeout=1.0)
                except httpx.TransportError:
                    api_gone = time.monotonic() - started  # nobody listens any more
            if frontend not in group_pids(server.process.pid, b"smg_trio"):
                frontend_gone = time.monotonic() - started
            time.sleep(0.05)
        assert api_gone is not None, "the API still answers 5 s after the last engine was killed"
        assert frontend_gone is not None, "the front end still runs 5 s after the kill"
        code, _ = wait_exit(server, STOPPED_WITHIN_S)
        print(
            f"API gone {api_gone:.2f} s, front end exited {frontend_gone:.2f} s, "
            f"vllm serve exited {code} {time.monotonic() - started:.1f} s after the kill"
        )
        assert code != 0
        # vLLM's own orphans (the killed EngineCore's worker, its resource tracker) notice
        # their parent's death on their own, a few seconds later.
        while group_members(server.process.pid) and time.monotonic() - started < 30.0:
            time.sleep(0.2)
        assert not group_members(server.process.pid)
        print(f"no process of the group left {time.monotonic() - started:.1f} s after the kill")


def test_two_data_parallel_engines(reference: dict[str, Any], tmp_path: Path) -> None:
    flags = ("--served-model-name", SERVED, "--data-parallel-size", "2")
    with vllm_with_smg_trio(tmp_path, *flags) as (url, server):
        assert len(engine_pids(server.process.pid)) == 2
        for _ in range(2):  # spread over both engines: each answers vLLM's greedy text
            ours = {**greedy_answers(url), "tokens": tokens_answer(url)}
            assert_same(ours, {k: v for k, v in reference.items() if k != "abort"})


EMBED_FLAGS: Final = ("--served-model-name", SERVED, "--runner", "pooling", "--convert", "embed")
EMBED_INPUTS: Final = ["hello world", "Pooling through the hook.", "a", "emoji 🙂 and 漢字"]
TOLERANCE: Final = 1e-6


def pooling_answers(url: str) -> dict[str, Any]:
    """Embeddings (one batch, one token-id input), their usage, the scores of /score and
    /rerank, and the status a generation path gets on this embedding model."""
    with httpx.Client(base_url=url, timeout=60.0) as client:
        batch = client.post("/v1/embeddings", json={"model": SERVED, "input": EMBED_INPUTS})
        ids = client.post("/v1/embeddings", json={"model": SERVED, "input": [1, 2, 3, 4, 5]})
        pooling = client.post("/pooling", json={"model": SERVED, "input": "hello world"})
        score = client.post(
            "/score", json={"model": SERVED, "queries": "a fox", "documents": EMBED_INPUTS}
        )
        rerank = client.post(
            "/rerank", json={"model": SERVED, "query": "a fox", "documents": EMBED_INPUTS}
        )
        chat = client.post(
            "/v1/chat/completions", json={"model": SERVED, "messages": MESSAGES, "max_tokens": 4}
        )
    for answer in (batch, ids, pooling, score, rerank):
        assert answer.status_code == 200, answer.text
    return {
        "vectors": [d["embedding"] for d in batch.json()["data"]]
        + [ids.json()["data"][0]["embedding"], pooling.json()["data"][0]["data"]],
        "usage": [batch.json()["usage"], ids.json()["usage"], pooling.json()["usage"]],
        "scores": [d["score"] for d in score.json()["data"]]
        + [
            r["relevance_score"] for r in sorted(rerank.json()["results"], key=lambda r: r["index"])
        ],
        "chat_status": chat.status_code,
    }


def test_runner_pooling_convert_embed_equals_plain_vllm_serve(tmp_path: Path) -> None:
    """`vllm serve --runner pooling --convert embed` through our front end: /v1/embeddings,
    /pooling, /score and /rerank answer plain `vllm serve`'s vectors (within 1e-6) and usage,
    and chat on the embedding model is a 404 on both (docs/pooling.md §4)."""
    port = free_port()
    plain_command = vllm_command("--host", "127.0.0.1", "--port", str(port), *EMBED_FLAGS)
    plain = launch("vllm-embed-plain", plain_command, tmp_path)
    with running([plain]):
        url = f"http://127.0.0.1:{port}"
        print(f"plain vllm serve (embed) ready after {wait_healthy([plain], url):.1f} s")
        expected = pooling_answers(url)
    with vllm_with_smg_trio(tmp_path, *EMBED_FLAGS) as (url, _):
        got = pooling_answers(url)
    assert got["usage"] == expected["usage"]
    assert got["chat_status"] == expected["chat_status"] == 404
    assert len(got["vectors"]) == len(expected["vectors"]) == len(EMBED_INPUTS) + 2
    worst = max(
        abs(a - b)
        for ours, theirs in zip(got["vectors"], expected["vectors"], strict=True)
        for a, b in zip(ours, theirs, strict=True)
    )
    worst_score = max(abs(a - b) for a, b in zip(got["scores"], expected["scores"], strict=True))
    print(f"max abs difference: vectors {worst:.3g}, scores {worst_score:.3g}")
    assert worst <= TOLERANCE
    assert worst_score <= TOLERANCE
