"""I/O. The model folder `vllm serve` names, found as vLLM finds it: a folder, or a Hugging Face
hub id in the local cache (docs/vllm-frontend.md §2).

`vllm serve` passes the model as typed (`model_tag`): a path, or a hub id such as
`Qwen/Qwen3-0.6B` that its engines loaded from the Hugging Face cache (downloading it first
unless `HF_HUB_OFFLINE`). The front end inherits the environment, so it reads the same cache:
`--download-dir` if given, else `HF_HUB_CACHE`, else `HF_HOME/hub`, else
`~/.cache/huggingface/hub`; the snapshot is `refs/REVISION` (`main` by default) or a snapshot
named by the revision itself. We never download: the engines already did.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from smg_trio.errors import ConfigError


def hub_cache_dir(environ: Mapping[str, str], download_dir: str | None = None) -> Path:
    """Where hub snapshots live for this environment (huggingface_hub's rule)."""
    if download_dir is not None:
        return Path(download_dir).expanduser()
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def resolve_model(
    model: str,
    *,
    revision: str | None = None,
    download_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """The local folder of `model` (a folder, or a cached hub id); ConfigError naming where it
    was looked for otherwise."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder.resolve()
    cache = hub_cache_dir(os.environ if environ is None else environ, download_dir)
    repo = cache / ("models--" + model.replace("/", "--"))
    wanted = revision or "main"
    snapshot = repo / "snapshots" / wanted
    if not snapshot.is_dir():
        ref = repo / "refs" / wanted
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except OSError:
            commit = ""
        snapshot = repo / "snapshots" / commit
    if not commit_dir_ok(snapshot, repo):
        raise ConfigError(
            f"model {model!r}: not a folder, and revision {wanted!r} is not in the Hugging Face "
            f"cache {cache} (the smg-trio front end reads the engines' local copy)"
        )
    return snapshot.resolve()


def commit_dir_ok(snapshot: Path, repo: Path) -> bool:
    return snapshot != repo / "snapshots" and snapshot.is_dir()


JINJA_CHARACTERS = "{}\n"


def chat_template_source(value: str | None) -> tuple[Path | None, str | None]:
    """vLLM's `--chat-template VALUE` as (file, None) or (None, template): a file that opens is
    a file; otherwise a value with a Jinja character (`{`, `}`, a newline) is the template
    itself, as vLLM tells them apart. Anything else (a missing file, or the name of one of
    vLLM's bundled templates) is a FrontendArgsError naming the flag."""
    from smg_trio.serving.vllm_frontend_args import FrontendArgsError

    if value is None:
        return None, None
    path = Path(value).expanduser()
    try:
        with path.open(encoding="utf-8"):
            pass
    except (OSError, ValueError) as exc:
        if any(character in value for character in JINJA_CHARACTERS):
            return None, value
        raise FrontendArgsError(
            f"vLLM flag --chat-template {value!r:.80}: not a template, and the file does not "
            f"open ({exc.__class__.__name__}); vLLM's bundled templates are not in smg-trio"
        ) from exc
    return path.resolve(), None


GENERATIVE_SUFFIX = "ForCausalLM"


def pooling_convert(model_path: Path) -> str:
    """The pooler `vllm serve --runner pooling` (no `--convert`) gives the model: vLLM converts
    a generative architecture (`...ForCausalLM`) to an embedding model. A natively pooling
    architecture keeps its own pooler, which the front end does not read: a FrontendArgsError
    asking for `--convert`."""
    import json

    from smg_trio.serving.vllm_frontend_args import FrontendArgsError

    try:
        config = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{model_path / 'config.json'}: {exc}") from exc
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if (
        isinstance(architectures, list)
        and architectures
        and all(isinstance(a, str) and a.endswith(GENERATIVE_SUFFIX) for a in architectures)
    ):
        return "embed"
    raise FrontendArgsError(
        f"vLLM flag --runner pooling without --convert: the architecture {architectures!r:.80} "
        "is not a *ForCausalLM one vLLM converts to embeddings; name --convert embed or classify"
    )
