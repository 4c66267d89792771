"""Every `vllm serve` flag, as `--args-json` carries it, is honoured, known to be the engine's or
`vllm serve`'s own, or refused by name (serving/vllm_frontend_args.py, docs/vllm-frontend.md §2)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from smg_trio.errors import ConfigError
from smg_trio.frontends.cors import CorsPolicy
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.vllm_frontend_args import (
    FrontendArgs,
    FrontendArgsError,
    gateway_config,
    parse_frontend_args,
)
from smg_trio.serving.vllm_frontend_flags import (
    ENGINE_FLAGS,
    FRONTEND_FLAGS,
    REFUSED_FLAGS,
    REFUSED_REASONS,
    SERVE_FLAGS,
)
from smg_trio.serving.vllm_frontend_model import chat_template_source
from smg_trio.serving.worker_specs import WorkerSpec

MODEL = "/models/tiny"
WORKER = WorkerSpec(Runtime.VLLM, Wire.ZMQ, "fd:4,5")
DOCS = Path(__file__).parents[2] / "docs" / "vllm-frontend.md"


def parsed(**extra: Any) -> FrontendArgs:
    return parse_frontend_args({"model": MODEL, "model_tag": MODEL, **extra})


def test_the_four_sets_do_not_overlap() -> None:
    sets = [set(FRONTEND_FLAGS), set(SERVE_FLAGS), set(ENGINE_FLAGS), set(REFUSED_FLAGS)]
    for i, one in enumerate(sets):
        for other in sets[i + 1 :]:
            assert not one & other


@pytest.mark.parametrize("flag", sorted(REFUSED_FLAGS))
def test_every_refused_flag_is_refused_by_its_name(flag: str) -> None:
    with pytest.raises(FrontendArgsError) as refused:
        parsed(**{flag: "x"})
    assert f"--{flag.replace('_', '-')} " in refused.value.message + " "


@pytest.mark.parametrize("flag", sorted(ENGINE_FLAGS | SERVE_FLAGS))
def test_every_engine_and_serve_flag_leaves_the_front_end_as_it_was(flag: str) -> None:
    assert parsed(**{flag: "anything"}) == parsed()


def test_an_unknown_flag_is_refused_by_its_name() -> None:
    with pytest.raises(FrontendArgsError, match="vLLM flag --brand-new-flag is not supported"):
        parsed(brand_new_flag=True)


def test_the_defaults_as_vllm_sends_them() -> None:
    args = parse_frontend_args(
        {
            "dtype": "float32",
            "engine_ready_timeout_secs": 600,
            "host": "127.0.0.1",
            "http_timeout_keep_alive": 5,
            "max_model_len": 2048,
            "model": MODEL,
            "model_tag": MODEL,
            "port": 8733,
            "profiler_config": {"active_iterations": 5},
        }
    )
    assert args == FrontendArgs(
        model=MODEL, idle_timeout_s=5.0, engine_ready_timeout_s=600.0, max_model_len=2048
    )
    config = gateway_config(args, Path(MODEL), WORKER)
    assert config.served_model_names == (MODEL,)  # vLLM's default name: the model as typed
    assert config.drain_timeout_s == 0.0  # vLLM's --shutdown-timeout default
    assert config.idle_timeout_s == 5.0
    assert config.workers == (WORKER,)
    assert config.max_model_len == 2048  # what the engines were started with


@pytest.mark.parametrize("value", ["auto", -1])
def test_max_model_len_fitted_by_the_engine_keeps_the_folders(value: object) -> None:
    assert gateway_config(parsed(max_model_len=value), Path(MODEL), WORKER).max_model_len is None


def test_the_front_end_flags_map_onto_the_config() -> None:
    args = parsed(
        served_model_name=["tiny", "alias"],
        api_key=["sk-1"],
        ssl_certfile="/c.pem",
        ssl_keyfile="/k.pem",
        enable_log_requests=True,
        log_level="debug",
        uvicorn_log_level="warning",
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        stream_interval=4,
        shutdown_timeout=12,
        sse_keep_alive_interval=7,
        enable_auto_tool_choice=True,
        disable_uvicorn_access_log=True,
        disable_fastapi_docs=True,
        enable_request_id_headers=True,
        generation_config="vllm",
        tokenizer_mode="hf",
        runner="generate",
        revision="main",
        tokenizer_revision="main",
    )
    config = gateway_config(args, Path(MODEL), WORKER)
    assert config.served_model_names == ("tiny", "alias")
    assert config.api_key == "sk-1"
    assert (config.certfile, config.keyfile) == (Path("/c.pem"), Path("/k.pem"))
    assert config.log_requests
    assert (args.log_level, args.http_log_level) == ("debug", "warning")
    assert (config.tool_call_parser, config.reasoning_parser) == ("hermes", "qwen3")
    assert config.stream_interval == 4
    assert config.drain_timeout_s == 12.0
    assert config.keepalive_s == 7.0
    assert args.revision == "main"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"generation_config": "/some/folder"}, "--generation-config /some/folder"),
        ({"tokenizer_mode": "mistral"}, "--tokenizer-mode mistral"),
        ({"runner": "draft"}, "--runner draft"),
        ({"runner": "generate", "convert": "embed"}, "--convert embed"),
        ({"runner": "pooling", "convert": "none"}, "--convert none"),
        ({"convert": "reward"}, "--convert reward"),
        ({"tokenizer_revision": "v2"}, "--tokenizer-revision v2"),
        ({"api_key": ["a", "b"]}, "--api-key"),
        ({"log_level": "loud"}, "--log-level loud"),
        ({"stream_interval": 0}, "--stream-interval"),
        ({"shutdown_timeout": -1}, "--shutdown-timeout"),
        ({"served_model_name": [""]}, "--served-model-name"),
        ({"max_model_len": "big"}, "--max-model-len"),
        ({"limit_mm_per_prompt": {"video": 1}}, "--limit-mm-per-prompt"),
        ({"limit_mm_per_prompt": {"image": -1}}, "--limit-mm-per-prompt"),
        ({"allowed_origins": "*"}, "--allowed-origins"),
        ({"root_path": 3}, "--root-path"),
        ({"mm_device_do_normalize": "no"}, "--mm-device-do-normalize"),
    ],
)
def test_a_value_we_cannot_honour_is_refused_naming_the_flag(
    extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(FrontendArgsError, match=re.escape(message)):
        parsed(**extra)


def test_cors_root_path_and_image_flags_map_onto_the_config() -> None:
    args = parsed(
        allowed_origins=["https://app.example"],
        allowed_methods=["GET", "POST"],
        allow_credentials=True,
        root_path="/llm",
        limit_mm_per_prompt={"image": 2},
        allowed_media_domains=["images.example"],
        allowed_local_media_path="/srv/images",
    )
    config = gateway_config(args, Path(MODEL), WORKER)
    assert config.cors == CorsPolicy(
        allowed_origins=("https://app.example",),
        allowed_methods=("GET", "POST"),
        allowed_headers=("*",),  # vLLM's default
        allow_credentials=True,
    )
    assert config.root_path == "/llm"
    assert config.limit_mm_per_prompt == 2
    assert config.allowed_media_domains == ("images.example",)
    assert config.allowed_local_media_path == "/srv/images"
    assert gateway_config(parsed(), Path(MODEL), WORKER).cors is None  # vLLM's default: off


@pytest.mark.parametrize("value", [None, True, False])
def test_the_engines_pixel_setting_reaches_the_images(value: bool | None) -> None:
    """vLLM's `--[no-]mm-device-do-normalize` is the engines' and ours to follow: the Qwen-VL
    pixels go as the engines take them (docs/images.md §4.2); absent, vLLM's default."""
    extra = {} if value is None else {"mm_device_do_normalize": value}
    config = gateway_config(parsed(**extra), Path(MODEL), WORKER)
    assert config.mm_device_do_normalize is value


def test_the_answer_and_request_log_flags_map_onto_the_config() -> None:
    args = parsed(
        response_role="bot",
        return_tokens_as_token_ids=True,
        enable_prompt_tokens_details=True,
        max_log_len=20,
        chat_template_content_format="string",
        otlp_traces_endpoint="127.0.0.1:4317",
        default_chat_template_kwargs={"enable_thinking": False},
        exclude_tools_when_tool_choice_none=True,
        trust_request_chat_template=True,
        enable_force_include_usage=True,
    )
    config = gateway_config(args, Path(MODEL), WORKER)
    assert config.chat_template_content_format == "string"
    assert (config.otlp_traces_endpoint, config.otlp_endpoint) == ("127.0.0.1:4317", None)
    assert config.default_chat_template_kwargs == {"enable_thinking": False}
    assert config.exclude_tools_when_tool_choice_none
    assert config.trust_request_chat_template
    assert config.enable_force_include_usage
    assert config.response_role == "bot"
    assert config.return_tokens_as_token_ids
    assert config.enable_prompt_tokens_details
    assert config.max_log_len == 20
    default = gateway_config(parsed(), Path(MODEL), WORKER)
    assert (default.response_role, default.max_log_len) == ("assistant", None)
    assert not default.return_tokens_as_token_ids
    assert not default.enable_prompt_tokens_details


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"max_log_len": -1}, "--max-log-len"),
        ({"max_log_len": "long"}, "--max-log-len"),
        ({"response_role": ""}, "--response-role"),
        ({"response_role": 3}, "--response-role"),
        ({"chat_template_content_format": "list"}, "--chat-template-content-format list"),
        ({"default_chat_template_kwargs": "x"}, "--default-chat-template-kwargs"),
    ],
)
def test_a_bad_answer_flag_is_refused_naming_it(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(FrontendArgsError, match=re.escape(message)):
        parsed(**extra)


def test_a_root_path_that_is_not_a_path_is_refused() -> None:
    with pytest.raises(ConfigError, match="root_path must start with '/'"):
        gateway_config(parsed(root_path="llm"), Path(MODEL), WORKER)


def test_chat_template_a_file_or_the_template_itself(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0]['content'] }}", encoding="utf-8")
    assert chat_template_source(str(template)) == (template.resolve(), None)
    inline = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert chat_template_source(inline) == (None, inline)
    assert chat_template_source(None) == (None, None)
    with pytest.raises(FrontendArgsError, match=re.escape("--chat-template 'chatml.jinja'")):
        chat_template_source("chatml.jinja")  # one of vLLM's bundled names, or a missing file
    config = gateway_config(parsed(), Path(MODEL), WORKER, template_text=inline)
    assert (config.chat_template, config.chat_template_text) == (None, inline)


def test_an_unknown_parser_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nosuchparser"):
        gateway_config(parsed(tool_call_parser="nosuchparser"), Path(MODEL), WORKER)


def test_no_model_is_refused() -> None:
    with pytest.raises(FrontendArgsError, match="names no model"):
        parse_frontend_args({"dtype": "float32"})


def test_model_tag_wins_over_model() -> None:
    assert parse_frontend_args({"model": "a", "model_tag": "b"}).model == "b"


def test_the_docs_table_lists_every_front_end_and_refused_flag() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for flag in (*FRONTEND_FLAGS, *REFUSED_FLAGS):
        assert f"`{flag}`" in text, flag
    assert set(REFUSED_REASONS) <= REFUSED_FLAGS


@pytest.mark.parametrize(
    ("flags", "runner", "convert"),
    [
        ({}, "generate", None),
        ({"runner": "generate", "convert": "none"}, "generate", None),
        ({"runner": "pooling", "convert": "embed"}, "pooling", "embed"),
        ({"runner": "pooling", "convert": "classify"}, "pooling", "classify"),
        ({"convert": "classify"}, "pooling", "classify"),  # --runner auto: vLLM's pooling
        ({"runner": "pooling"}, "pooling", None),  # the architecture decides
    ],
)
def test_runner_and_convert_map_onto_the_models_tasks(
    flags: dict[str, Any], runner: str, convert: str | None
) -> None:
    args = parsed(**flags)
    assert (args.runner, args.convert) == (runner, convert)
    config = gateway_config(args, Path(MODEL), WORKER, convert=convert or "embed")
    assert config.runner == runner
    assert config.convert == (None if runner == "generate" else convert or "embed")
