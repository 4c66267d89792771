"""`smg-trio serve`'s prompt and answer flags, by vLLM's names (serving/frontend_option_flags.py):
from the command line and the TOML file onto the GatewayConfig, bad values refused, and the
`FrontendOptions` the gateway is built with."""

from __future__ import annotations

from pathlib import Path

import pytest

from smg_trio.cli import build_parser
from smg_trio.core.frontend_options import FrontendOptions
from smg_trio.errors import ConfigError
from smg_trio.serving.config import config_from_mapping
from smg_trio.serving.frontend_option_flags import frontend_options
from smg_trio.serving.options import config_from_args


def base(tmp_path: Path) -> list[str]:
    return ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]


def test_the_flags_reach_the_config_and_the_frontend_options(tmp_path: Path) -> None:
    flags = ["--response-role", "bot", "--return-tokens-as-token-ids"]
    flags += ["--enable-prompt-tokens-details", "--max-log-len", "40"]
    flags += ["--chat-template-content-format", "openai"]
    flags += ["--default-chat-template-kwargs", '{"enable_thinking": false}']
    flags += ["--exclude-tools-when-tool-choice-none", "--trust-request-chat-template"]
    flags += ["--enable-force-include-usage"]
    config = config_from_args(build_parser().parse_args([*base(tmp_path), *flags]))
    assert config.chat_template_content_format == "openai"
    assert frontend_options(config) == FrontendOptions(
        response_role="bot",
        return_tokens_as_token_ids=True,
        prompt_tokens_details=True,
        content_format="openai",
        default_chat_template_kwargs={"enable_thinking": False},
        exclude_tools_when_tool_choice_none=True,
        trust_request_chat_template=True,
        force_include_usage=True,
    )
    assert config.max_log_len == 40
    plain = config_from_args(build_parser().parse_args(base(tmp_path)))
    assert frontend_options(plain) == FrontendOptions()
    assert plain.max_log_len is None
    assert plain.chat_template_content_format == "auto"


def test_the_toml_file_takes_the_same_keys_and_a_flag_wins(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nresponse_role = "narrator"\n'
        "enable_prompt_tokens_details = true\nmax_log_len = 8\n",
        encoding="utf-8",
    )
    args = build_parser().parse_args(["serve", "--config", str(path), "--max-log-len", "9"])
    config = config_from_args(args)
    assert (config.response_role, config.enable_prompt_tokens_details) == ("narrator", True)
    assert config.max_log_len == 9


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"response_role": ""}, "response_role must not be empty"),
        ({"max_log_len": -1}, "max_log_len must be 0 or more"),
        ({"chat_template_content_format": "list"}, "chat_template_content_format"),
    ],
)
def test_bad_values_are_config_errors(
    tmp_path: Path, fields: dict[str, object], message: str
) -> None:
    data = {"model_path": str(tmp_path), "workers": ["vllm+zmq://h:1"], **fields}
    with pytest.raises(ConfigError, match=message):
        config_from_mapping(data, source="test", base=tmp_path)
