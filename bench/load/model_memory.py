"""I/O. `python -m bench model_memory`: the resident memory each loaded model adds to a
gateway process (docs/fleet.md §4, docs/performance.md §6).

    python -m bench model_memory [--model NAME=DIR ...] [--repeats 3] [--synthetic-vocab N]

For k = 1 .. the number of models, `smg-trio serve` is started with the first k models (each
with one worker no engine dials: a model is loaded whether or not its engines are up), one
`/v1/tokenize` of a chat turn is sent to each model (its tokenizer and template used once),
and the process's resident set (VmRSS) is read from /proc; the process is then stopped. A
model's cost is the growth from k-1 to k models, the median of `--repeats` starts. Default
models: the demo model, the harmony test folder and, when present, the tiny llama of
SMG_TRIO_VLLM_MODEL; with `--synthetic-vocab N`, last, the demo model with its byte-level BPE
grown to N tokens by merges of its own tokens (no model this large is on the machine: it stands
for a Llama 3 sized vocabulary of 128,256).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import httpx

from bench.reports.results_page import Recording, recording_parser
from smg_trio.model.folder import demo_model_path, load_model_dir

CHECKOUT: Final = Path(__file__).resolve().parents[2]
HARMONY: Final = CHECKOUT / "tests" / "harmony_model"
START_S: Final = 60.0
TURN: Final = [{"role": "user", "content": "How much memory does a model take?"}]


def default_models() -> list[tuple[str, Path]]:
    models = [("demo", demo_model_path()), ("harmony", HARMONY)]
    llama = os.environ.get("SMG_TRIO_VLLM_MODEL", "")
    if llama and Path(llama).is_dir():
        models.append(("tiny-llama", Path(llama)))
    return models


def synthetic_model(folder: Path, vocab_size: int) -> Path:
    """The demo model at `folder` with its BPE grown to `vocab_size` tokens, each new one the
    merge of two tokens it had (so it is a valid byte-level BPE)."""
    shutil.copytree(demo_model_path(), folder)
    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    vocab: dict[str, int] = spec["model"]["vocab"]
    merges: list[list[str]] = spec["model"]["merges"]
    tokens = [token for token in vocab if len(token) <= 4]
    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    declared = [int(key) for key in settings.get("added_tokens_decoder", {})]
    added = [token["id"] for token in spec["added_tokens"]]
    next_id = 1 + max([*vocab.values(), *added, *declared])
    rng = random.Random(41)
    while len(vocab) < vocab_size:
        left, right = rng.choice(tokens), rng.choice(tokens)
        merged = left + right
        if merged in vocab or len(merged) > 12:
            continue
        vocab[merged] = next_id
        next_id += 1
        merges.append([left, right])
        tokens.append(merged)
    path.write_text(json.dumps(spec), encoding="utf-8")
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def resident_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None, status
    return int(match.group(1))


def serving_rss(models: Sequence[tuple[str, Path]]) -> int:
    """The RSS (KiB) of a gateway serving `models`, each used once by /v1/tokenize."""
    port = free_port()
    command = [sys.executable, "-m", "smg_trio", "serve", "--port", str(port)]
    for index, (name, folder) in enumerate(models):
        command += ["--model", f"{name}={folder}"]
        model = "" if index == 0 else f"?model={name}"
        command += ["--worker", f"vllm+zmq://127.0.0.1:{free_port()}{model}"]
    command += ["--log-level", "WARNING", "--response-store", "sqlite:///:memory:"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + START_S
            while True:
                if process.poll() is not None:
                    raise RuntimeError(process.stderr.read().decode() if process.stderr else "")
                try:
                    if client.get("/liveness").status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.1)
            for name, _ in models:
                body = {"model": name, "messages": TURN}
                if load_model_dir(dict(models)[name]).chat_template is None:
                    body = {"model": name, "prompt": TURN[0]["content"]}
                reply = client.post("/v1/tokenize", json=body)
                assert reply.status_code == 200, reply.text
        time.sleep(0.5)  # let the allocator settle
        return resident_kib(process.pid)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


def main(argv: Sequence[str]) -> int:
    parser = recording_parser("model_memory", __doc__)
    parser.add_argument("--model", action="append", metavar="NAME=DIR", dest="models")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--synthetic-vocab", type=int, metavar="N")
    args = parser.parse_args(argv)
    models = (
        [(text.partition("=")[0], Path(text.partition("=")[2])) for text in args.models]
        if args.models
        else default_models()
    )
    with tempfile.TemporaryDirectory() as scratch:
        if args.synthetic_vocab:
            name = f"synthetic-{args.synthetic_vocab // 1000}k"
            models.append((name, synthetic_model(Path(scratch) / name, args.synthetic_vocab)))
        return measure(models, args.repeats, write=not args.no_write)


def measure(models: list[tuple[str, Path]], repeats: int, *, write: bool) -> int:
    recording = Recording("model_memory", "Resident memory per loaded model (issue 41)")
    rows = []
    previous = 0.0
    for count in range(1, len(models) + 1):
        rss = statistics.median(serving_rss(models[:count]) for _ in range(repeats))
        name, folder = models[count - 1]
        tokenizer = (folder / "tokenizer.json").stat().st_size
        vocab = load_model_dir(folder).tokenizer.vocab_size
        added = "" if count == 1 else f"{(rss - previous) / 1024:+.1f} MiB"
        rows.append(
            f"| {count} | {name} | {vocab:,} | {tokenizer / 2**20:.2f} MiB | "
            f"{rss / 1024:.1f} MiB | {added or '(the process with its first model)'} |"
        )
        previous = rss
    body = (
        "| models | added | vocabulary | tokenizer.json | gateway RSS | the model's cost |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"Median of {repeats} starts each; every model with one worker (no engine), each "
        "used once by /v1/tokenize of a chat turn. The cost of a model is its tokenizer (the "
        "Rust `tokenizers` object and our id → bytes tables), its compiled chat template and "
        "its folder's configs; weights are never read. With `--processes N` every process "
        "pays it.\n"
    )
    recording.publish(body, write=write)
    return 0
