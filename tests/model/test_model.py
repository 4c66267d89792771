"""Model folder loading: EOS merging (docs/stops-and-finalize.md §2.1, §2.2, case 14), errors, templates, tokenizer."""

from __future__ import annotations

import itertools
import json
import logging
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ConfigError
from smg_trio.model.folder import (
    ModelDir,
    demo_model_path,
    load_model_dir,
    merge_connect_eos_ids,
    merge_tokenizer_eos_ids,
)
from smg_trio.model.hf_tokenizer import BYTE_LEVEL_CHARS, ModelTokenizer
from smg_trio.neutral.sampling import EosIds

# The steering repo's shared/ folder lies beside this checkout (here and in CI).
TINY_LLAMA = Path(__file__).resolve().parents[3] / "shared" / "models" / "tiny-llama"
DEMO = load_model_dir(demo_model_path())


def tiny_llama() -> ModelDir:
    if not TINY_LLAMA.is_dir():
        pytest.skip(f"optional fixture {TINY_LLAMA} is not present on this machine")
    return load_model_dir(TINY_LLAMA)


@pytest.fixture(scope="module", params=["demo", "tiny-llama"])
def model(request: pytest.FixtureRequest) -> ModelDir:
    return DEMO if request.param == "demo" else tiny_llama()


def write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


def make_model_dir(directory: Path, **files: object) -> Path:
    """A model folder with the demo tokenizer.json plus the given JSON files (name_json=value)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(demo_model_path() / "tokenizer.json", directory / "tokenizer.json")
    for stem, value in files.items():
        write_json(directory / f"{stem}.json", value)
    return directory


# --- EOS ids ---------------------------------------------------------------------------------


def test_case_14_eos_from_model_dir(tmp_path: Path) -> None:
    directory = make_model_dir(
        tmp_path / "m", config={"eos_token_id": 5}, generation_config={"eos_token_id": [5, 7, 9]}
    )
    loaded = load_model_dir(directory)
    assert loaded.eos_ids == EosIds(primary=5, extra=(7, 9))
    assert loaded.tokenizer_eos_ids == (5, 7, 9)
    assert loaded.tokenizer.eos_token_ids == (5, 7, 9)


def test_case_14_empty_dir_has_no_eos(tmp_path: Path) -> None:
    loaded = load_model_dir(make_model_dir(tmp_path / "m"))
    assert loaded.eos_ids == EosIds()
    assert loaded.tokenizer.eos_token_ids == ()


def test_primary_falls_back_to_generation_config() -> None:
    assert merge_connect_eos_ids({}, {"eos_token_id": [7, 5, 7]}) == EosIds(7, (5,))
    assert merge_connect_eos_ids(None, {"eos_token_id": 3}) == EosIds(3, ())


def test_extra_keeps_file_order_config_first() -> None:
    merged = merge_connect_eos_ids({"eos_token_id": [9, 4]}, {"eos_token_id": [1, 4, 9, 2]})
    assert merged == EosIds(9, (4, 1, 2))
    assert merge_tokenizer_eos_ids({"eos_token_id": [9, 4]}, {"eos_token_id": [1, 4, 9, 2]}) == (
        1,
        2,
        4,
        9,
    )


def test_non_integer_and_out_of_range_eos_values_are_ignored() -> None:
    config = {"eos_token_id": ["2", 2.0, True, None, -1, 2**32, 2**32 - 1, 6]}
    assert merge_connect_eos_ids(config, {"eos_token_id": "x"}) == EosIds(2**32 - 1, (6,))
    assert merge_tokenizer_eos_ids(config, None) == (6, 2**32 - 1)
    assert merge_connect_eos_ids({"eos_token_id": {"id": 1}}, None) == EosIds()


eos_values = st.one_of(
    st.none(),
    st.integers(-3, 2**32 + 3),
    st.lists(st.one_of(st.integers(-3, 40), st.text(max_size=2), st.booleans())),
)


@given(eos_values, eos_values)
def test_tokenizer_eos_set_is_the_connect_pair_as_a_set(a: object, b: object) -> None:
    config, generation = {"eos_token_id": a}, {"eos_token_id": b}
    pair = merge_connect_eos_ids(config, generation)
    ids = merge_tokenizer_eos_ids(config, generation)
    assert ids == tuple(sorted({*([] if pair.primary is None else [pair.primary]), *pair.extra}))
    assert pair.primary not in pair.extra
    assert len(set(pair.extra)) == len(pair.extra)


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json"]
)
def test_corrupt_json_is_a_config_error_naming_the_file(tmp_path: Path, name: str) -> None:
    directory = make_model_dir(tmp_path / "m")
    (directory / name).write_text('{"eos_token_id": [1, 2', encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_model_dir(directory)
    assert str(directory / name) in raised.value.message
    assert "line 1" in raised.value.message  # the parser's own position report


def test_json_that_is_not_an_object_is_a_config_error(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m")
    (directory / "config.json").write_text("[5]", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_model_dir(directory)


def test_missing_tokenizer_json_is_a_config_error(tmp_path: Path) -> None:
    write_json(tmp_path / "config.json", {"eos_token_id": 1})
    with pytest.raises(ConfigError) as raised:
        load_model_dir(tmp_path)
    assert str(tmp_path / "tokenizer.json") in raised.value.message
    assert "missing" in raised.value.message


def test_model_path_that_is_not_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        load_model_dir(tmp_path / "absent")


# --- tokenizer_config.json -------------------------------------------------------------------


def test_chat_template_string_form(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", tokenizer_config={"chat_template": "{{ x }}"})
    loaded = load_model_dir(directory)
    assert loaded.chat_template == "{{ x }}"


def test_chat_template_list_form_picks_default(tmp_path: Path) -> None:
    templates = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    directory = make_model_dir(tmp_path / "m", tokenizer_config={"chat_template": templates})
    loaded = load_model_dir(directory)
    assert loaded.chat_template == "D"


def test_chat_template_list_without_default_has_no_default(tmp_path: Path) -> None:
    templates = [{"name": "rag", "template": "R"}]
    loaded = load_model_dir(
        make_model_dir(tmp_path / "m", tokenizer_config={"chat_template": templates})
    )
    assert loaded.chat_template is None


def test_malformed_chat_template_list_is_a_config_error(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", tokenizer_config={"chat_template": [{"name": 1}]})
    with pytest.raises(ConfigError, match="chat_template"):
        load_model_dir(directory)


def test_chat_template_jinja_file_is_the_fallback(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", tokenizer_config={})
    (directory / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    assert load_model_dir(directory).chat_template == "{{ messages }}"
    assert load_model_dir(make_model_dir(tmp_path / "bare")).chat_template is None


def test_special_tokens_as_strings_dicts_null_or_from_the_map(tmp_path: Path) -> None:
    directory = make_model_dir(
        tmp_path / "m",
        tokenizer_config={
            "bos_token": {"__type": "AddedToken", "content": "<|im_start|>", "special": True},
            "eos_token": "<|im_end|>",
            "pad_token": None,
        },
        special_tokens_map={"pad_token": "<|pad|>", "unk_token": {"content": "<|endoftext|>"}},
    )
    loaded = load_model_dir(directory)
    assert (loaded.bos_token, loaded.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert loaded.pad_token is None  # an explicit null wins over special_tokens_map.json
    assert loaded.unk_token == "<|endoftext|>"


def test_added_tokens_decoder_can_make_a_token_special(tmp_path: Path) -> None:
    think = DEMO.tokenizer.token_to_id("<think>")
    assert think is not None
    declared = {str(think): {"content": "<think>", "special": True}}
    tokenizer_config = {"added_tokens_decoder": declared}
    loaded = load_model_dir(make_model_dir(tmp_path / "m", tokenizer_config=tokenizer_config))
    assert think in loaded.tokenizer.special_token_ids
    ids = loaded.tokenizer.encode("a<think>b", add_special_tokens=False)
    assert loaded.tokenizer.decode(ids, skip_special_tokens=True) == "ab"
    assert think not in DEMO.tokenizer.special_token_ids  # the shipped model is untouched


def test_added_tokens_decoder_with_a_wrong_id_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    declared = {"7": {"content": "<think>", "special": True}}
    directory = make_model_dir(tmp_path / "m", tokenizer_config={"added_tokens_decoder": declared})
    with caplog.at_level(logging.WARNING, logger="smg_trio.model.folder"):
        loaded = load_model_dir(directory)
    assert loaded.tokenizer.special_token_ids == DEMO.tokenizer.special_token_ids
    assert "<think>" in caplog.text


@pytest.mark.parametrize(
    ("config", "tokenizer_config", "expected"),
    [
        ({"max_position_embeddings": 2048, "max_seq_len": 8}, {"model_max_length": 9}, 2048),
        ({"max_seq_len": 8192}, None, 8192),
        ({"text_config": {"max_position_embeddings": 32768}}, None, 32768),
        ({}, {"model_max_length": 1024}, 1024),
        (None, {"model_max_length": 1e30}, None),
        ({"max_position_embeddings": 10**12}, {"model_max_length": 10**30}, None),
        ({"max_position_embeddings": True}, None, None),
        (None, None, None),
    ],
)
def test_context_length(
    tmp_path: Path, config: object, tokenizer_config: object, expected: int | None
) -> None:
    files = {
        name: value
        for name, value in (("config", config), ("tokenizer_config", tokenizer_config))
        if value is not None
    }
    assert load_model_dir(make_model_dir(tmp_path / "m", **files)).context_length == expected


def test_served_name_defaults_to_the_folder_name(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "my-model")
    assert load_model_dir(directory).served_name == "my-model"
    assert load_model_dir(directory, served_name="alias").served_name == "alias"


def test_tiny_llama_fixture() -> None:
    loaded = tiny_llama()
    assert loaded.tokenizer_eos_ids == (2, 7)
    assert loaded.eos_ids == EosIds(2, (7,))
    assert loaded.context_length == 2048
    assert loaded.bos_token == "<|bos|>"
    assert loaded.chat_template is not None
    assert loaded.chat_template.startswith("{{ bos_token }}")
    assert loaded.tokenizer.special_token_ids == frozenset(range(8))


# --- the tokenizer ---------------------------------------------------------------------------


def test_model_tokenizer_is_a_tokenizer_like() -> None:
    tokenizer: TokenizerLike = DEMO.tokenizer  # mypy checks the protocol; this checks the values
    assert tokenizer.eos_token_ids == (0, 2)
    assert tokenizer.special_token_ids == frozenset({0, 1, 2, 3})


def test_special_tokens_encode_whole_and_skip_on_decode() -> None:
    tok = DEMO.tokenizer
    ids = tok.encode("<|im_start|>user\nhi<|im_end|><think>", add_special_tokens=False)
    assert ids[0] == 1
    assert 2 in ids
    assert ids[-1] == tok.token_to_id("<think>")
    assert tok.decode(ids, skip_special_tokens=True) == "user\nhi<think>"
    assert tok.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi<|im_end|><think>"
    assert tok.token_to_id("no such token") is None
    assert tok.id_to_token(1) == "<|im_start|>"
    assert tok.id_to_token(-1) is None


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_encode_decode_round_trip(model: ModelDir, text: str) -> None:
    tok = model.tokenizer
    assert tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=False) == text


@settings(max_examples=200, deadline=None)
@given(st.text(), st.booleans())
def test_encode_gives_the_ids_of_the_tokenizers_own_encode(
    model: ModelDir, text: str, add_special_tokens: bool
) -> None:
    """`encode` takes the offset-free batch path; the ids must be those of plain `encode`."""
    tok = model.tokenizer
    expected = tok.hf_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
    assert tok.encode(text, add_special_tokens=add_special_tokens) == expected


def byte_id(model: ModelDir, byte: int) -> int:
    token = next(char for char, value in BYTE_LEVEL_CHARS.items() if value == byte)
    found = model.tokenizer.token_to_id(token)
    assert found is not None
    return found


@pytest.mark.parametrize(("text", "cut"), [("é", 1), ("中", 1), ("中", 2), ("🚀", 3)])
def test_split_multibyte_char_decodes_to_one_replacement_char(
    model: ModelDir, text: str, cut: int
) -> None:
    ids = [byte_id(model, b) for b in b"a" + text.encode("utf-8")]
    assert model.tokenizer.decode(ids[: 1 + cut], skip_special_tokens=True) == "a\ufffd"
    assert model.tokenizer.decode(ids, skip_special_tokens=True) == "a" + text


def test_byte_level_alphabet_matches_the_tokenizers_pre_tokenizer() -> None:
    """Every byte that valid UTF-8 can hold is spelled as tokenizers' ByteLevel spells it."""
    assert set(BYTE_LEVEL_CHARS) == set(pre_tokenizers.ByteLevel.alphabet())
    spell = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    covered: set[int] = set()
    for code_point in itertools.chain(range(0x800), range(0x800, 0x110000, 0x800)):
        encoded = chr(code_point).encode("utf-8", "surrogatepass")
        if set(encoded) <= covered or 0xD800 <= code_point < 0xE000:
            continue
        covered |= set(encoded)
        [(spelled, _)] = spell.pre_tokenize_str(chr(code_point))
        assert bytes(BYTE_LEVEL_CHARS[char] for char in spelled) == encoded
    assert covered == set(range(256)) - {0xC0, 0xC1, *range(0xF5, 0x100)}


def test_token_bytes_is_none_exactly_for_added_tokens(model: ModelDir) -> None:
    tok = model.tokenizer
    added = set(tok.hf_tokenizer.get_added_tokens_decoder())
    assert tok.is_byte_level
    assert {i for i in range(tok.vocab_size) if tok.token_bytes(i) is None} == added
    assert tok.token_bytes(-1) is None
    assert tok.token_bytes(tok.vocab_size) is None


def test_token_bytes_of_every_single_token_decode_as_the_tokenizer_does(model: ModelDir) -> None:
    tok = model.tokenizer
    for token_id in range(tok.vocab_size):
        raw = tok.token_bytes(token_id)
        if raw is not None:
            expected = tok.decode([token_id], skip_special_tokens=False)
            assert raw.decode("utf-8", "replace") == expected, token_id


@st.composite
def id_sequences(draw: st.DrawFn, model: ModelDir, *, with_specials: bool) -> list[int]:
    tok = model.tokenizer
    ordinary = st.integers(0, tok.vocab_size - 1).filter(lambda i: tok.token_bytes(i) is not None)
    specials = st.sampled_from(sorted(tok.special_token_ids))
    choices = (ordinary | specials) if with_specials else ordinary
    return draw(st.lists(choices, max_size=24))


def joined_bytes(model: ModelDir, ids: list[int]) -> str:
    parts = [model.tokenizer.token_bytes(i) for i in ids]
    return b"".join(p for p in parts if p is not None).decode("utf-8", "replace")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_token_bytes_join_equals_decode(model: ModelDir, data: st.DataObject) -> None:
    ids = data.draw(id_sequences(model, with_specials=False))
    for skip in (True, False):
        assert joined_bytes(model, ids) == model.tokenizer.decode(ids, skip_special_tokens=skip)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_skipped_special_tokens_are_transparent_to_the_byte_join(
    model: ModelDir, data: st.DataObject
) -> None:
    ids = data.draw(id_sequences(model, with_specials=True))
    assert joined_bytes(model, ids) == model.tokenizer.decode(ids, skip_special_tokens=True)


def test_model_tokenizer_without_byte_level_decoder_has_no_token_bytes() -> None:
    plain = Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a"))
    tok = ModelTokenizer(plain, eos_token_ids=[1, 1, 0])
    assert not tok.is_byte_level
    assert tok.token_bytes(0) is None
    assert tok.eos_token_ids == (0, 1)
    assert tok.vocab_size == 2
