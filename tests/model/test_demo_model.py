"""The shipped demo model: reproducible from the committed corpus, small, and what it claims."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import minijinja
import pytest

from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.sampling import EosIds

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "scripts"
SHIPPED_FILES = {
    "README.md",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def run_script(name: str, *args: str) -> None:
    # Both scripts take about a second; the bound keeps a hung build from stalling the suite.
    subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args], check=True, capture_output=True, timeout=60
    )


def files_of(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


def test_build_reproduces_the_shipped_files_byte_for_byte(tmp_path: Path) -> None:
    run_script("build_demo_model.py", "--out", str(tmp_path))
    rebuilt, shipped = files_of(tmp_path), files_of(demo_model_path())
    assert set(rebuilt) == SHIPPED_FILES
    assert set(shipped) == SHIPPED_FILES
    for name in SHIPPED_FILES:
        assert rebuilt[name] == shipped[name], f"{name} differs; run `make demo-model`"


def test_corpus_script_reproduces_the_committed_corpus(tmp_path: Path) -> None:
    run_script("make_demo_corpus.py", "--out", str(tmp_path))
    assert files_of(tmp_path) == files_of(SCRIPTS / "demo_corpus")


def test_demo_model_is_small_and_has_no_weights() -> None:
    sizes = {path.name: path.stat().st_size for path in demo_model_path().iterdir()}
    assert sum(sizes.values()) < 1_000_000
    assert not [name for name in sizes if name.endswith((".safetensors", ".bin", ".pt"))]


def test_demo_model_tokens_and_eos() -> None:
    demo = load_model_dir(demo_model_path())
    tok = demo.tokenizer
    ids = {
        t: tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>")
    }
    assert list(ids.values()) == [0, 1, 2, 3]
    assert tok.special_token_ids == frozenset({0, 1, 2, 3})
    assert 3500 <= tok.vocab_size <= 4500
    # config.json names <|endoftext|>, generation_config.json adds <|im_end|> first.
    assert demo.tokenizer_eos_ids == (0, 2)
    assert demo.eos_ids == EosIds(primary=0, extra=(2,))
    assert (demo.bos_token, demo.eos_token, demo.pad_token) == (None, "<|im_end|>", "<|pad|>")
    assert demo.context_length == 4096


def test_demo_model_has_plain_think_tokens() -> None:
    tok = load_model_dir(demo_model_path()).tokenizer
    ids = tok.encode("<think>plan</think>done", add_special_tokens=False)
    think, end_think = tok.token_to_id("<think>"), tok.token_to_id("</think>")
    assert ids[0] == think
    assert end_think in ids
    assert think not in tok.special_token_ids
    assert tok.decode(ids, skip_special_tokens=True) == "<think>plan</think>done"


def test_demo_tokenizer_learned_multibyte_merges() -> None:
    tok = load_model_dir(demo_model_path()).tokenizer
    for text in ("你好", "こんにちは", "🚀"):
        assert len(tok.encode(text, add_special_tokens=False)) < len(text.encode("utf-8"))


def render(template: str, **context: object) -> str:
    environment = minijinja.Environment()

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    environment.add_global("raise_exception", raise_exception)
    return environment.render_str(template, **context)


def test_demo_chat_template() -> None:
    template = load_model_dir(demo_model_path()).chat_template
    assert template is not None
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🚀"}]
    assert render(template, messages=messages, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi 🚀<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render(template, messages=messages[1:], add_generation_prompt=False) == (
        "<|im_start|>user\nHi 🚀<|im_end|>\n"
    )
    with pytest.raises(ValueError, match="not tool"):
        render(template, messages=[{"role": "tool", "content": "x"}], add_generation_prompt=True)
