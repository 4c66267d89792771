"""Opt-in acceptance of one gateway, three models (docs/fleet.md §4): the tiny llama on a real
vLLM engine (headless EngineCore over ZMQ) beside the demo model and the harmony test folder
on reference engines (random mode: each token drawn from the whole context, as a greedy model
chooses), three tokenizers and templates. Every model answers greedily what its own server
answers (vLLM's own OpenAI server for the llama, a one-model gateway for the others),
/v1/models lists all three with their own lengths, and when every engine of one model is
SIGKILLed its requests get 503 while the other two answer on (0 errors).

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest -m real_engine tests/e2e/test_models_real_vllm.py

One vLLM at a time: vLLM's own server answers first and is stopped before the gateway's
headless engine starts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import httpx

from smg_trio.engines.generation import Mode
from smg_trio.engines.launch import EngineCommand
from smg_trio.model.folder import demo_model_path
from tests.e2e import real_vllm
from tests.e2e.models_server import HARMONY_MODEL
from tests.e2e.real_vllm import MODEL, SERVED_NAME, free_port, launch, running, wait_healthy

pytestmark = list(real_vllm.MARKS)

PROMPTS: Final = ("The capital of France is", "Once upon a time, a gateway", "1, 2, 3,")
CHAT_MESSAGES: Final = [{"role": "user", "content": "Say hello to the gateway."}]
REFERENCE: Final = {"demo": demo_model_path(), "harmony": HARMONY_MODEL}


def greedy_answers(base_url: str, model: str, *, chat: bool = True) -> list[str]:
    """The greedy texts of every prompt (and of one chat turn) from `model` at `base_url`,
    without a final U+FFFD: incomplete UTF-8 at the end is flushed as U+FFFD by us and dropped
    by vLLM, a deliberate divergence of any one-model gateway (docs/stops-and-finalize.md §3,
    §5 case 38)."""
    texts = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for prompt in PROMPTS:
            body: dict[str, Any] = {
                "model": model,
                "prompt": prompt,
                "max_tokens": 16,
                "temperature": 0,
            }
            reply = client.post("/v1/completions", json=body)
            assert reply.status_code == 200, reply.text
            texts.append(reply.json()["choices"][0]["text"])
        if chat:
            body = {"model": model, "messages": CHAT_MESSAGES, "max_tokens": 16, "temperature": 0}
            reply = client.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            texts.append(reply.json()["choices"][0]["message"]["content"])
    return [text.removesuffix("\ufffd") for text in texts]


def reference_engine(handshake_port: int, folder: Path) -> list[str]:
    return EngineCommand(
        "vllm-zmq",
        handshake=f"tcp://127.0.0.1:{handshake_port}",
        model_path=folder,
        mode=Mode.RANDOM,
    ).argv()


def gateway(port: int, models: Sequence[tuple[str, Path]], workers: Sequence[str]) -> list[str]:
    return [
        *real_vllm.gateway_command(port)[:3],  # python -m smg_trio
        "serve",
        *(f for name, folder in models for f in ("--model", f"{name}={folder}")),
        *(f for worker in workers for f in ("--worker", worker)),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]


def wait_workers_ready(base_url: str, count: int) -> None:
    with httpx.Client(base_url=base_url, timeout=5.0) as client:
        deadline = time.monotonic() + real_vllm.STARTUP_S
        while time.monotonic() < deadline:
            lines = [
                line
                for line in client.get("/metrics").text.splitlines()
                if line.startswith("smg_trio_worker_ready{")
            ]
            if len(lines) == count and all(line.endswith(" 1.0") for line in lines):
                return
            time.sleep(real_vllm.POLL_S)
    raise AssertionError(f"{base_url}: not every worker ready after {real_vllm.STARTUP_S} s")


def own_servers(log_dir: Path) -> dict[str, list[str]]:
    """Each model's answers from its own server, one at a time."""
    own = {}
    with real_vllm.vllm_http_server(log_dir) as url:
        own[SERVED_NAME] = greedy_answers(url, SERVED_NAME)
    for name, folder in REFERENCE.items():
        port, engine_port = free_port(), free_port()
        launched: list[real_vllm.Launched] = []
        with running(launched):
            worker = f"vllm+zmq://127.0.0.1:{engine_port}"
            launched.append(
                launch(f"gateway-{name}", gateway(port, [(name, folder)], [worker]), log_dir)
            )
            launched.append(
                launch(f"engine-{name}", reference_engine(engine_port, folder), log_dir)
            )
            wait_healthy(launched, f"http://127.0.0.1:{port}")
            own[name] = greedy_answers(f"http://127.0.0.1:{port}", name, chat=name == "demo")
    return own


def test_three_models_answer_as_their_own_servers_and_one_dying_leaves_the_others(
    tmp_path: Path,
) -> None:
    own = own_servers(tmp_path)
    port = free_port()
    ports = {name: free_port() for name in (SERVED_NAME, *REFERENCE)}
    workers = [
        f"vllm+zmq://127.0.0.1:{ports[SERVED_NAME]}",
        *(f"vllm+zmq://127.0.0.1:{ports[name]}?model={name}" for name in REFERENCE),
    ]
    models = [(SERVED_NAME, Path(MODEL)), *REFERENCE.items()]
    launched: list[real_vllm.Launched] = []
    base_url = f"http://127.0.0.1:{port}"
    with running(launched):
        launched.append(launch("gateway-three", gateway(port, models, workers), tmp_path))
        launched.append(
            launch("vllm-headless", real_vllm.headless_engine(ports[SERVED_NAME]), tmp_path)
        )
        engines = {
            name: launch(f"engine-three-{name}", reference_engine(ports[name], folder), tmp_path)
            for name, folder in REFERENCE.items()
        }
        launched.extend(engines.values())
        wait_healthy(launched, base_url)
        wait_workers_ready(base_url, 3)
        with httpx.Client(base_url=base_url, timeout=30) as client:
            cards = client.get("/v1/models").json()["data"]
        assert [(c["id"], c["max_model_len"]) for c in cards] == [
            (SERVED_NAME, 2048),
            ("demo", 4096),
            ("harmony", 4096),
        ]
        for name in own:
            assert greedy_answers(base_url, name, chat=name != "harmony") == own[name], name
        engines["demo"].process.kill()  # SIGKILL every engine of one model
        engines["demo"].process.wait()
        statuses: dict[str, list[int]] = {name: [] for name in own}
        with httpx.Client(base_url=base_url, timeout=60) as client:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the death is noticed within 2 s (resilience.md)
                probe = {"model": "demo", "prompt": "hi", "max_tokens": 2}
                if client.post("/v1/completions", json=probe).status_code == 503:
                    break
                time.sleep(0.1)
            for _ in range(5):
                for name in own:
                    body = {"model": name, "prompt": "hi", "max_tokens": 4}
                    statuses[name].append(client.post("/v1/completions", json=body).status_code)
        assert statuses == {SERVED_NAME: [200] * 5, "demo": [503] * 5, "harmony": [200] * 5}
