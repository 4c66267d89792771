"""Pure. `vllm serve`'s arguments, as its front-end hook passes them (`--args-json`), mapped onto
a `GatewayConfig` (docs/vllm-frontend.md §2 is this module as a table).

vLLM sends only the flags that differ from its defaults (plus `model_tag`, and two values from
its environment: `engine_ready_timeout_secs`, `http_timeout_keep_alive`). Every key is one of:

- a front-end flag we honour (`FRONTEND_FLAGS`: what each becomes), some only with certain
  values (a value we cannot honour is refused like an unknown flag);
- `vllm serve`'s own (`SERVE_FLAGS`: the sockets it bound for us, its parallel layout, its
  config file), already acted on before we run;
- the engine's (`ENGINE_FLAGS`): model loading, parallelism, caches, scheduling; the EngineCore
  took them, and what the front end needs of them comes in its ready message (max_model_len);
- anything else is refused: `FrontendArgsError` naming the flag as the user typed it, so the
  front end exits non-zero with that one line and `vllm serve` stops with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from smg_trio.core.template_content_format import CONTENT_FORMATS, ContentFormatFlag
from smg_trio.errors import ConfigError
from smg_trio.frontends.cors import CorsPolicy
from smg_trio.serving.config import GatewayConfig, validated
from smg_trio.serving.vllm_frontend_flags import (
    ENGINE_FLAGS,
    FRONTEND_FLAGS,
    GATEWAY_LOG_LEVELS,
    SERVE_FLAGS,
)
from smg_trio.serving.worker_specs import WorkerSpec


class FrontendArgsError(ConfigError):
    """A vLLM flag the front end does not honour: one line naming it, as typed."""


@dataclass(frozen=True)
class FrontendArgs:
    """What `--args-json` asks of the front end."""

    model: str  # a folder or a hub id (serving/vllm_frontend_model.py resolves it)
    revision: str | None = None
    download_dir: str | None = None
    served_model_names: tuple[str, ...] = ()
    api_key: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    log_requests: bool = False
    log_level: str = "info"
    http_log_level: str = "info"
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    stream_interval: int = 1
    drain_timeout_s: float = 0.0  # vLLM's --shutdown-timeout default: abort at once
    keepalive_s: float | None = None  # None: the gateway's default
    idle_timeout_s: float | None = None
    engine_ready_timeout_s: float = 600.0
    tokenizer: str | None = None  # checked against the resolved model folder
    tokenizer_info_endpoint: bool = False
    scale_out: bool = False
    max_model_len: int | None = None
    chat_template: str | None = None  # a file or the template (vllm_frontend_model.py tells)
    root_path: str = ""
    cors: CorsPolicy | None = None
    images_per_prompt: int | None = None  # None: the gateway's default
    allowed_media_domains: tuple[str, ...] = ()
    allowed_local_media_path: str | None = None
    mm_device_do_normalize: bool | None = None  # the engines' (None: vLLM's default)
    # vLLM's `--runner`/`--convert` resolved as far as the flags go: ("generate", None),
    # ("pooling", "embed"|"classify"), or ("pooling", None) when the architecture decides
    # (serving/vllm_frontend_model.py: pooling_convert).
    runner: str = "generate"
    convert: str | None = None
    # The answers and the request log (serving/frontend_option_flags.py).
    response_role: str = "assistant"
    return_tokens_as_token_ids: bool = False
    enable_prompt_tokens_details: bool = False
    max_log_len: int | None = None
    chat_template_content_format: ContentFormatFlag = "auto"
    otlp_traces_endpoint: str | None = None
    default_chat_template_kwargs: dict[str, Any] | None = None
    exclude_tools_when_tool_choice_none: bool = False
    trust_request_chat_template: bool = False
    enable_force_include_usage: bool = False


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def parse_frontend_args(args: Mapping[str, Any]) -> FrontendArgs:
    """The front end's share of vLLM's arguments; FrontendArgsError for any flag or value we do
    not honour (the first one, in sorted order)."""
    for key in sorted(args):
        if key not in FRONTEND_FLAGS and key not in SERVE_FLAGS and key not in ENGINE_FLAGS:
            raise FrontendArgsError(
                f"vLLM flag {flag_name(key)} is not supported by the smg-trio front end"
            )
    model = _text(args, "model_tag") or _text(args, "model")
    if model is None:
        raise FrontendArgsError("--args-json names no model (model_tag or model)")
    _only(args, "generation_config", ("vllm",), default="auto")
    _only(args, "tokenizer_mode", ("auto", "hf"))
    runner, convert = _runner_convert(args)
    revision = _text(args, "revision")
    tokenizer_revision = _text(args, "tokenizer_revision")
    if tokenizer_revision is not None and tokenizer_revision != revision:
        raise FrontendArgsError(
            f"vLLM flag --tokenizer-revision {tokenizer_revision} differs from --revision: "
            "the smg-trio front end reads the tokenizer from the model's own snapshot"
        )
    api_key = args.get("api_key")
    if isinstance(api_key, list):
        if len(api_key) != 1:
            raise FrontendArgsError("vLLM flag --api-key: one key only in the smg-trio front end")
        api_key = api_key[0]
    log_level = _level(args, "log_level")
    return FrontendArgs(
        model=model,
        revision=revision,
        download_dir=_text(args, "download_dir"),
        served_model_names=_names(args.get("served_model_name")),
        api_key=None if api_key is None else str(api_key),
        certfile=_text(args, "ssl_certfile"),
        keyfile=_text(args, "ssl_keyfile"),
        log_requests=bool(args.get("enable_log_requests") or args.get("enable_log_outputs")),
        log_level=log_level or "info",
        http_log_level=_level(args, "uvicorn_log_level") or "info",
        tool_call_parser=_text(args, "tool_call_parser"),
        reasoning_parser=_text(args, "reasoning_parser"),
        stream_interval=_int(args, "stream_interval", 1),
        drain_timeout_s=_number(args, "shutdown_timeout", 0.0),
        keepalive_s=_positive_or_none(args, "sse_keep_alive_interval"),
        idle_timeout_s=_positive_or_none(args, "http_timeout_keep_alive"),
        engine_ready_timeout_s=_number(args, "engine_ready_timeout_secs", 600.0),
        tokenizer=_text(args, "tokenizer"),
        tokenizer_info_endpoint=bool(args.get("enable_tokenizer_info_endpoint")),
        scale_out=bool(args.get("enable_scale_out")),
        max_model_len=_max_model_len(args),
        chat_template=_text(args, "chat_template"),
        root_path=_text(args, "root_path") or "",
        cors=_cors(args),
        images_per_prompt=_images_per_prompt(args.get("limit_mm_per_prompt")),
        allowed_media_domains=_texts(args, "allowed_media_domains"),
        allowed_local_media_path=_text(args, "allowed_local_media_path"),
        mm_device_do_normalize=_optional_bool(args, "mm_device_do_normalize"),
        runner=runner,
        convert=convert,
        response_role=_text(args, "response_role") or "assistant",
        return_tokens_as_token_ids=bool(args.get("return_tokens_as_token_ids")),
        enable_prompt_tokens_details=bool(args.get("enable_prompt_tokens_details")),
        max_log_len=_max_log_len(args),
        chat_template_content_format=_content_format(args),
        otlp_traces_endpoint=_text(args, "otlp_traces_endpoint"),
        default_chat_template_kwargs=_object(args, "default_chat_template_kwargs"),
        exclude_tools_when_tool_choice_none=bool(args.get("exclude_tools_when_tool_choice_none")),
        trust_request_chat_template=bool(args.get("trust_request_chat_template")),
        enable_force_include_usage=bool(args.get("enable_force_include_usage")),
    )


def _runner_convert(args: Mapping[str, Any]) -> tuple[str, str | None]:
    """vLLM's `--runner` and `--convert` as vLLM resolves them before looking at the weights: a
    `--convert embed|classify` makes `--runner auto` a pooling runner; `--runner pooling` alone
    leaves the pooler to the architecture (convert None here)."""
    _only(args, "runner", ("auto", "generate", "pooling"), default="auto")
    _only(args, "convert", ("auto", "none", "embed", "classify"), default="auto")
    runner = args.get("runner") or "auto"
    convert = args.get("convert") or "auto"
    if convert in ("embed", "classify"):
        if runner == "generate":
            raise FrontendArgsError(
                f"vLLM flag --convert {convert} needs --runner pooling (got --runner generate)"
            )
        return "pooling", str(convert)
    if runner == "pooling":
        if convert == "none":
            raise FrontendArgsError(
                "vLLM flag --convert none with --runner pooling is not supported by the "
                "smg-trio front end (a natively pooling architecture): name --convert "
                "embed or classify"
            )
        return "pooling", None
    return "generate", None


def _text(args: Mapping[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise FrontendArgsError(f"vLLM flag {flag_name(key)}: expected a text, got {value!r:.60}")
    return value


def _optional_bool(args: Mapping[str, Any], key: str) -> bool | None:
    value = args.get(key)
    if value is not None and not isinstance(value, bool):
        raise FrontendArgsError(
            f"vLLM flag {flag_name(key)}: expected true or false, got {value!r:.60}"
        )
    return value


def _only(args: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: str = "") -> None:
    value = args.get(key)
    if value is not None and value != default and value not in allowed:
        raise FrontendArgsError(
            f"vLLM flag {flag_name(key)} {value} is not supported by the smg-trio front end "
            f"(supported: {', '.join(allowed)})"
        )


def _texts(args: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = args.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FrontendArgsError(f"vLLM flag {flag_name(key)}: expected texts, got {value!r:.60}")
    return tuple(value)


def _cors(args: Mapping[str, Any]) -> CorsPolicy | None:
    """vLLM's CORS flags (its defaults: no origin, every method and header, no credentials)."""
    keys = ("allowed_origins", "allowed_methods", "allowed_headers", "allow_credentials")
    if all(args.get(key) is None for key in keys):
        return None
    return CorsPolicy(
        allowed_origins=_texts(args, "allowed_origins"),
        allowed_methods=_texts(args, "allowed_methods") or ("*",),
        allowed_headers=_texts(args, "allowed_headers") or ("*",),
        allow_credentials=bool(args.get("allow_credentials")),
    )


def _images_per_prompt(value: object) -> int | None:
    """vLLM's `--limit-mm-per-prompt` `{"image": N}`: N (other modalities are refused)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"image"}:
        raise FrontendArgsError(
            f"vLLM flag --limit-mm-per-prompt {value!r:.60}: the smg-trio front end takes "
            'images only, as {"image": N}'
        )
    count = value.get("image", 16)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise FrontendArgsError(f"vLLM flag --limit-mm-per-prompt: image count {count!r:.60}")
    return count


def _names(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise FrontendArgsError(f"vLLM flag --served-model-name: expected names, got {value!r:.60}")
    return tuple(names)


def _number(args: Mapping[str, Any], key: str, default: float) -> float:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise FrontendArgsError(
            f"vLLM flag {flag_name(key)}: expected a number >= 0, got {value!r}"
        )
    return float(value)


def _int(args: Mapping[str, Any], key: str, default: int) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FrontendArgsError(
            f"vLLM flag {flag_name(key)}: expected an integer >= 1, got {value!r}"
        )
    return value


def _max_model_len(args: Mapping[str, Any]) -> int | None:
    """vLLM's `--max-model-len`: an integer, or its "auto"/-1 (fit to the KV cache: then the
    engine's figure is only known from its ready message, and the model folder's is kept)."""
    value = args.get("max_model_len")
    if value is None or value in ("auto", -1):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FrontendArgsError(f"vLLM flag --max-model-len: expected an integer, got {value!r}")
    return value


def _content_format(args: Mapping[str, Any]) -> ContentFormatFlag:
    """vLLM's `--chat-template-content-format`: auto, string or openai."""
    _only(args, "chat_template_content_format", CONTENT_FORMATS, default="auto")
    value = args.get("chat_template_content_format")
    return "string" if value == "string" else "openai" if value == "openai" else "auto"


def _object(args: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise FrontendArgsError(
            f"vLLM flag {flag_name(key)}: expected a JSON object, got {value!r:.60}"
        )
    return value


def _max_log_len(args: Mapping[str, Any]) -> int | None:
    """vLLM's `--max-log-len`: characters (and ids) of a logged prompt and output; absent: all."""
    value = args.get("max_log_len")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FrontendArgsError(f"vLLM flag --max-log-len: expected an integer, got {value!r}")
    return value


def _positive_or_none(args: Mapping[str, Any], key: str) -> float | None:
    value = _number(args, key, 0.0)
    return value if value > 0 else None


def _level(args: Mapping[str, Any], key: str) -> str | None:
    value = _text(args, key)
    if value is None:
        return None
    level = value.lower()
    if level == "trace":
        level = "debug"
    if level not in GATEWAY_LOG_LEVELS:
        raise FrontendArgsError(f"vLLM flag {flag_name(key)} {value}: unknown log level")
    return level


def gateway_config(
    args: FrontendArgs,
    model_path: Path,
    worker: WorkerSpec,
    *,
    template_file: Path | None = None,
    template_text: str | None = None,
    convert: str | None = None,
    dev_mode: bool = False,
) -> GatewayConfig:
    """The GatewayConfig serving `worker` (the engines vLLM started) as `args` ask, with the
    chat template `args.chat_template` turned out to be (a file or the template itself) and,
    for a pooling runner, the pooler `convert` (`args.convert` unless the architecture chose
    it: vllm_frontend_model.py pooling_convert). The served name defaults to the model as typed, as vLLM's (`--served-model-name` absent)."""
    config = GatewayConfig(
        model_path=model_path,
        workers=(worker,),
        served_model_names=args.served_model_names or (args.model,),
        api_key=args.api_key,
        certfile=None if args.certfile is None else Path(args.certfile),
        keyfile=None if args.keyfile is None else Path(args.keyfile),
        drain_timeout_s=args.drain_timeout_s,
        stream_interval=args.stream_interval,
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=args.reasoning_parser,
        log_requests=args.log_requests,
        tokenizer_info_endpoint=args.tokenizer_info_endpoint,
        scale_out=args.scale_out,
        dev_mode=dev_mode,
        max_model_len=args.max_model_len,
        chat_template=template_file,
        chat_template_text=template_text,
        root_path=args.root_path,
        cors=args.cors,
        allowed_media_domains=args.allowed_media_domains,
        allowed_local_media_path=args.allowed_local_media_path,
        mm_device_do_normalize=args.mm_device_do_normalize,
        runner=args.runner,
        convert=(convert or args.convert) if args.runner == "pooling" else None,
        response_role=args.response_role,
        return_tokens_as_token_ids=args.return_tokens_as_token_ids,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        max_log_len=args.max_log_len,
        chat_template_content_format=args.chat_template_content_format,
        otlp_traces_endpoint=args.otlp_traces_endpoint,
        default_chat_template_kwargs=args.default_chat_template_kwargs,
        exclude_tools_when_tool_choice_none=args.exclude_tools_when_tool_choice_none,
        trust_request_chat_template=args.trust_request_chat_template,
        enable_force_include_usage=args.enable_force_include_usage,
    )
    if args.images_per_prompt is not None:
        config = msgspec.structs.replace(config, limit_mm_per_prompt=args.images_per_prompt)
    if args.keepalive_s is not None:
        config = msgspec.structs.replace(config, keepalive_s=args.keepalive_s)
    if args.idle_timeout_s is not None:
        config = msgspec.structs.replace(config, idle_timeout_s=args.idle_timeout_s)
    return validated(config)
