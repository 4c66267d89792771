"""The model `vllm serve` names is found where vLLM's engines found it: a folder, or a hub id's
snapshot in the local Hugging Face cache (serving/vllm_frontend_model.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smg_trio.errors import ConfigError
from smg_trio.serving.vllm_frontend_args import FrontendArgsError
from smg_trio.serving.vllm_frontend_model import hub_cache_dir, pooling_convert, resolve_model


def cached(cache: Path, repo: str, commit: str, ref: str | None = "main") -> Path:
    """A snapshot laid out as huggingface_hub lays it out."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    if ref is not None:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit + "\n")
    return snapshot


def test_a_folder_is_itself(tmp_path: Path) -> None:
    assert resolve_model(str(tmp_path), environ={}) == tmp_path.resolve()


def test_a_hub_id_is_its_cached_main_snapshot(tmp_path: Path) -> None:
    snapshot = cached(tmp_path / "hub", "Org/Model-1", "abc123")
    found = resolve_model("Org/Model-1", environ={"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert found == snapshot.resolve()


def test_hf_home_and_a_revision(tmp_path: Path) -> None:
    snapshot = cached(tmp_path / "home" / "hub", "Org/M", "def456", ref="v2")
    cached(tmp_path / "home" / "hub", "Org/M", "main0")
    environ = {"HF_HOME": str(tmp_path / "home")}
    assert resolve_model("Org/M", revision="v2", environ=environ) == snapshot.resolve()
    # a revision may also be the commit itself
    assert resolve_model("Org/M", revision="def456", environ=environ) == snapshot.resolve()


def test_download_dir_wins(tmp_path: Path) -> None:
    snapshot = cached(tmp_path / "dl", "Org/M", "c1")
    environ = {"HF_HUB_CACHE": str(tmp_path / "elsewhere")}
    found = resolve_model("Org/M", download_dir=str(tmp_path / "dl"), environ=environ)
    assert found == snapshot.resolve()
    assert hub_cache_dir(environ) == tmp_path / "elsewhere"


@pytest.mark.parametrize("revision", [None, "missing"])
def test_what_is_not_cached_is_a_config_error_naming_it(
    tmp_path: Path, revision: str | None
) -> None:
    cached(tmp_path, "Org/Other", "c1")
    with pytest.raises(ConfigError, match="'Org/M'"):
        resolve_model("Org/M", revision=revision, environ={"HF_HUB_CACHE": str(tmp_path)})


def test_runner_pooling_alone_embeds_a_causal_lm_and_refuses_other_architectures(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    assert pooling_convert(tmp_path) == "embed"
    (tmp_path / "config.json").write_text('{"architectures": ["BertModel"]}')
    with pytest.raises(FrontendArgsError, match="--runner pooling without --convert"):
        pooling_convert(tmp_path)
