"""I/O. Writes the Harmony test model: the demo model's tokenizer plus gpt-oss's Harmony special
tokens, so tests can render Harmony prompts and replay Harmony output without gpt-oss's 200k
vocabulary (docs/tools-and-reasoning.md §10).

Reads smg_trio/model/demo_model/tokenizer.json, adds `<|start|>`, `<|end|>`, `<|message|>`,
`<|channel|>`, `<|constrain|>`, `<|return|>` and `<|call|>` as special tokens after its ids, and
writes tokenizer.json, tokenizer_config.json, config.json and generation_config.json into
tests/harmony_model/ (or `--out DIR`). No chat template: Harmony prompts are rendered by the
gateway. EOS is only `<|endoftext|>`, so the Harmony stops must come from the gateway.
The output is deterministic; tests/core/test_harmony_prompt.py rebuilds it and compares bytes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from build_demo_model import added_tokens_decoder, write_json  # this script's folder
from tokenizers import AddedToken, Tokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_TOKENIZER = REPO_ROOT / "smg_trio" / "model" / "demo_model" / "tokenizer.json"
DEFAULT_OUT = REPO_ROOT / "tests" / "harmony_model"
HARMONY_TOKENS = (
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
)
CONTEXT_LENGTH = 4096


def build(out: Path) -> None:
    tokenizer = Tokenizer.from_file(str(DEMO_TOKENIZER))
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in HARMONY_TOKENS]
    )
    end_of_text = tokenizer.token_to_id("<|endoftext|>")
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n", encoding="utf-8")
    write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "added_tokens_decoder": added_tokens_decoder(tokenizer),
            "bos_token": None,
            "eos_token": "<|endoftext|>",
            "pad_token": "<|pad|>",
            "unk_token": None,
            "clean_up_tokenization_spaces": False,
            "model_max_length": CONTEXT_LENGTH,
        },
    )
    write_json(
        out / "config.json",
        {
            "model_type": "gpt_oss",
            "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
            "max_position_embeddings": CONTEXT_LENGTH,
            "eos_token_id": end_of_text,
        },
    )
    write_json(out / "generation_config.json", {"eos_token_id": [end_of_text]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory to write into")
    args = parser.parse_args()
    build(args.out)
    print(f"wrote the Harmony test model into {args.out}")


if __name__ == "__main__":
    main()
