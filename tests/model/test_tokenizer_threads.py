"""`smg-trio serve` keeps HF tokenizers on the calling thread (docs/performance.md §3): one prompt
at a time gains nothing from the rayon pool, and the hand-off to it and back was on every
request's way to the engine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from smg_trio import cli

# Encodes one text as the gateway does, then prints how many threads the process has.
_THREADS_AFTER_ENCODE = """
import os, sys
from smg_trio import cli
from smg_trio.model.folder import demo_model_path, load_model_dir
if sys.argv[1] == "serve":
    cli._tokenize_on_the_calling_thread()
tokenizer = load_model_dir(demo_model_path()).tokenizer
tokenizer.encode("one two three " * 64, add_special_tokens=False)
print(len(os.listdir("/proc/self/task")))
"""


def _threads_after_encode(setting: str) -> int:
    environment = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    done = subprocess.run(
        [sys.executable, "-c", _THREADS_AFTER_ENCODE, setting],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout)


def test_serving_encodes_without_a_thread_pool() -> None:
    assert _threads_after_encode("serve") == 1
    # Left to its default, the library starts its pool for the same one-text call (this is
    # what the setting removes; on a one-core machine the pool could be the caller alone).
    if (os.cpu_count() or 1) > 1:
        assert _threads_after_encode("library-default") > 1


def test_an_operators_own_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    cli._tokenize_on_the_calling_thread()
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    cli._tokenize_on_the_calling_thread()
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
