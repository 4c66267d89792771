"""Opt-in oracle: on random token id sequences, our reasoning-token counts equal what vLLM
0.32's own parsers count (run in vLLM's venv as a subprocess, `vllm_reasoning_count_oracle.py`):
deepseek_r1, qwen3 (the whole output, as a chat body counts, and delta by delta, as a stream
does) and granite, on the shipped test tokenizer, whose `<think>`/`</think>` are single tokens,
and on a copy without them, whose markers are then text (docs/tools-and-reasoning.md §11).

    SMG_TRIO_VLLM_VENV=/opt/venvs/vllm SMG_TRIO_VLLM_MODEL=/work/shared/models/tiny-llama \\
        .venv/bin/pytest -m real_engine tests/e2e/test_vllm_reasoning_count_oracle.py
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest

from smg_trio.core.plan import ReasoningCount
from smg_trio.core.reasoning_tokens import reasoning_tokens
from smg_trio.model.folder import load_model_dir
from tests.e2e.real_vllm import MODEL, SKIP_REASON, VENV

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(not (VENV and MODEL), reason=SKIP_REASON),
    pytest.mark.timeout(300),
]

HERE: Final = Path(__file__).resolve().parent
TEST_MODEL: Final = HERE.parent / "harmony_model"
MARKER_IDS: Final = frozenset({3999, 4000})  # `<think>`, `</think>` in the test tokenizer
CASES: Final = 300
# Pieces an output is made of: reasoning markers (as text, so a marker may also be split
# across tokens), a tool call, words, multi-byte text, whitespace, and special tokens.
PIECES: Final = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</thi",
    "<",
    ">",
    "think",
    " plan",
    " the answer",
    "é",
    "日本",
    "\n",
    "  ",
    "<|im_end|>",
    "<|endoftext|>",
    "<|pad|>",
)


def outputs(tokenizer_dir: Path, seed: int) -> list[list[int]]:
    """Random outputs (seeded): pieces encoded, a few raw vocabulary ids mixed in."""
    tokenizer = load_model_dir(tokenizer_dir).tokenizer
    rng = random.Random(seed)
    cases: list[list[int]] = []
    for _ in range(CASES):
        ids: list[int] = []
        for _ in range(rng.randint(0, 12)):
            if rng.random() < 0.15:
                ids.append(rng.randrange(tokenizer.vocab_size))
            else:
                ids += tokenizer.encode(rng.choice(PIECES), add_special_tokens=False)
        cases.append(ids)
    return cases


def without_think_tokens(folder: Path) -> Path:
    """The test model's tokenizer with `<think>`/`</think>` as plain (unknown) text."""
    target = folder / "no-think"
    shutil.copytree(TEST_MODEL, target)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        path = target / name
        text = path.read_text(encoding="utf-8")
        path.write_text(
            text.replace('"<think>"', '"<thinking_was_here>"').replace(
                '"</think>"', '"</thinking_was_here>"'
            ),
            encoding="utf-8",
        )
    return target


def vllm_counts(tokenizer_dir: Path, cases: list[list[int]]) -> list[dict[str, Any]]:
    completed = subprocess.run(
        [str(Path(VENV) / "bin" / "python"), str(HERE / "vllm_reasoning_count_oracle.py")],
        input=json.dumps({"tokenizer": str(tokenizer_dir), "cases": cases}),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads(completed.stdout)
    return results


@pytest.mark.parametrize("think_tokens", [True, False])
def test_counts_equal_vllms_on_random_outputs(think_tokens: bool, tmp_path: Path) -> None:
    folder = TEST_MODEL if think_tokens else without_think_tokens(tmp_path)
    cases = outputs(folder, seed=46)
    model = load_model_dir(folder)
    theirs = vllm_counts(folder, cases)
    mismatches = []
    for ids, expected in zip(cases, theirs, strict=True):
        for parser in ("deepseek_r1", "qwen3", "granite"):
            rule = ReasoningCount(parser=parser, special_ids=model.named_special_ids)
            ours = reasoning_tokens(rule, ids, model.tokenizer)
            # None: vLLM refuses the model (deepseek_r1 without its markers); we count 0.
            wanted = 0 if expected[parser] is None else expected[parser]
            if ours != wanted:
                mismatches.append((parser, ids, ours, wanted))
        streamed = ReasoningCount(
            parser="qwen3", special_ids=model.named_special_ids, streamed=True
        )
        ours = reasoning_tokens(streamed, ids, model.tokenizer)
        # Special and single-token markers in a stream go through vLLM's deferral of token
        # terminals with no delta text, which is not followed here (§11): text outputs only.
        plain = not any(t in model.tokenizer.special_token_ids or t in MARKER_IDS for t in ids)
        if plain and ours != expected["qwen3_stream"]:
            mismatches.append(("qwen3 streamed", ids, ours, expected["qwen3_stream"]))
    assert mismatches == [], f"{len(mismatches)} of {CASES} cases differ: {mismatches[:5]}"
