"""Several models in one config (docs/fleet.md §4): `[[models]]` tables, `--model NAME=DIR`,
workers naming their model with `?model=`; the one-model fields stay the first model; every
inconsistency is a ConfigError naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from smg_trio.cli import build_parser
from smg_trio.errors import ConfigError
from smg_trio.model.folder import demo_model_path
from smg_trio.serving.config import (
    GatewayConfig,
    config_from_mapping,
    read_config_file,
)
from smg_trio.serving.model_folders import load_model_folders, load_spec_folder
from smg_trio.serving.model_specs import ModelSpec
from smg_trio.serving.options import config_from_args
from smg_trio.serving.worker_specs import parse_worker_spec

TWO_TABLES = """
policy = "least_load"
[[models]]
model_path = "big"
served_model_names = ["chat", "chat-latest"]
tool_call_parser = "hermes"
workers = ["vllm+zmq://127.0.0.1:1", "vllm+zmq://127.0.0.1:2"]
[[models]]
model_path = "small"
served_model_names = ["fast"]
policy = "cache_aware"
reasoning_parser = "qwen3"
chat_template = "small.jinja"
max_model_len = 512
workers = ["vllm+zmq://127.0.0.1:3"]
"""


def from_toml(tmp_path: Path, text: str) -> GatewayConfig:
    path = tmp_path / "gw.toml"
    path.write_text(text, encoding="utf-8")
    return config_from_mapping(read_config_file(path), source=str(path), base=tmp_path)


def test_models_tables_the_first_is_the_gateways_own_model(tmp_path: Path) -> None:
    config = from_toml(tmp_path, TWO_TABLES)
    assert (config.model_path, config.served_model_names) == (
        tmp_path / "big",
        ("chat", "chat-latest"),
    )
    assert config.tool_call_parser == "hermes"
    assert config.models == (
        ModelSpec(
            model_path=tmp_path / "small",
            served_model_names=("fast",),
            policy="cache_aware",
            reasoning_parser="qwen3",
            chat_template=tmp_path / "small.jinja",
            max_model_len=512,
        ),
    )
    assert [(str(w.address), w.model) for w in config.workers] == [
        ("127.0.0.1:1", None),
        ("127.0.0.1:2", None),
        ("127.0.0.1:3", "fast"),
    ]
    assert [spec.names for spec in config.model_specs] == [("chat", "chat-latest"), ("fast",)]
    assert config.policy == "least_load"


def test_top_level_model_and_a_further_table_with_workers_naming_it(tmp_path: Path) -> None:
    config = from_toml(
        tmp_path,
        'model_path = "big"\nworkers = ["vllm+zmq://127.0.0.1:1", '
        '"vllm+zmq://127.0.0.1:2?model=small"]\n[[models]]\nmodel_path = "small"\n',
    )
    assert [spec.names for spec in config.model_specs] == [("big",), ("small",)]
    assert [w.model for w in config.workers] == [None, "small"]
    assert str(config.workers[1]) == "vllm+zmq://127.0.0.1:2?model=small"


def test_model_flags_and_workers_naming_their_model(tmp_path: Path) -> None:
    argv = [
        "serve",
        "--model",
        f"chat={tmp_path / 'big'}",
        "--model",
        f"fast={tmp_path / 'small'}",
        "--worker",
        "vllm+zmq://127.0.0.1:1",
        "--worker",
        "sglang+grpc://127.0.0.1:2?model=fast",
        "--max-model-len",
        "2048",
    ]
    config = config_from_args(build_parser().parse_args(argv))
    assert (config.model_path, config.served_model_names, config.max_model_len) == (
        tmp_path / "big",
        ("chat",),
        2048,
    )
    assert config.models == (
        ModelSpec(model_path=tmp_path / "small", served_model_names=("fast",)),
    )
    assert [w.model for w in config.workers] == [None, "fast"]
    with_path = [
        "serve",
        "--model-path",
        str(tmp_path / "big"),
        "--model",
        f"fast={tmp_path / 'small'}",
        "--worker",
        "vllm+zmq://127.0.0.1:1",
        "--worker",
        "vllm+zmq://127.0.0.1:2?model=fast",
    ]
    config = config_from_args(build_parser().parse_args(with_path))
    assert [spec.names for spec in config.model_specs] == [("big",), ("fast",)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'model_path = "a"\nworkers = ["vllm+zmq://h:1?model=b"]\n',
            "a worker names model 'b', which is not served",
        ),
        (
            'model_path = "a"\nworkers = ["vllm+zmq://h:1"]\n[[models]]\nmodel_path = "b"\n',
            "model 'b' has no worker",
        ),
        (
            'model_path = "a"\nserved_model_names = ["x"]\nworkers = ["vllm+zmq://h:1"]\n'
            '[[models]]\nmodel_path = "b"\nserved_model_names = ["x"]\n'
            'workers = ["vllm+zmq://h:2"]\n',
            "served model name 'x' is given to two models",
        ),
        (
            'model_path = "a"\nworkers = ["vllm+zmq://h:1"]\n[[models]]\nmodel_path = "b"\n'
            'workers = ["vllm+zmq://h:2?model=a"]\n',
            "is listed under model 'b' but names another",
        ),
        (
            'model_path = "a"\nworkers = ["vllm+zmq://h:1"]\n[[models]]\nmodel_path = "b"\n'
            'polcy = "random"\n',
            "unknown keys ['polcy']",
        ),
        (
            'model_path = "a"\nworkers = ["vllm+zmq://h:1"]\n[[models]]\nmodel_path = "b"\n'
            'policy = "fastest"\nworkers = ["vllm+zmq://h:2"]\n',
            "unknown routing policy 'fastest'",
        ),
        (
            'model_path = "a"\nworkers = ["vllm+zmq://h:1"]\n[[models]]\nmodel_path = "b"\n'
            'tool_call_parser = "nope"\nworkers = ["vllm+zmq://h:2"]\n',
            "tool_call_parser 'nope' is unknown",
        ),
        (
            'model_path = "a"\nworkers = ["vllm+zmq://h:1"]\n[[models]]\nmodel_path = "b"\n'
            'max_model_len = 0\nworkers = ["vllm+zmq://h:2"]\n',
            "max_model_len must be at least 1",
        ),
        (
            '[[models]]\nmodel_path = "a"\nworkers = ["vllm+zmq://h:1"]\n'
            'tool_call_parser = "hermes"\n[[models]]\nserved_model_names = ["b"]\n',
            "[[models]] #2: model_path (the model folder) is required",
        ),
        ('models = ["a"]\nmodel_path = "a"\nworkers = ["vllm+zmq://h:1"]\n', "list of tables"),
    ],
)
def test_inconsistent_models_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_toml(tmp_path, text)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vllm+zmq://127.0.0.1:1?model=", "model= needs a served model name"),
        ("vllm+zmq://127.0.0.1:1?model=a&model=b", "model= is given twice"),
    ],
)
def test_bad_model_queries_are_config_errors(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_worker_spec(spec)


def test_a_model_flag_without_a_name_is_a_config_error(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["serve", "--model", str(tmp_path), "--worker", "vllm+zmq://h:1"]
    )
    with pytest.raises(ConfigError, match=re.escape("expected NAME=DIR")):
        config_from_args(args)


def test_chat_template_file_and_max_model_len_apply_to_the_folder(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0]['content'] }}", encoding="utf-8")
    folder = load_spec_folder(
        ModelSpec(model_path=demo_model_path(), chat_template=template, max_model_len=100)
    )
    assert (folder.chat_template, folder.context_length) == ("{{ messages[0]['content'] }}", 100)
    with pytest.raises(ConfigError, match="max_model_len 5000 is more than its folder's"):
        load_spec_folder(ModelSpec(model_path=demo_model_path(), max_model_len=5000))
    with pytest.raises(ConfigError, match="cannot read the chat template"):
        load_spec_folder(
            ModelSpec(model_path=demo_model_path(), chat_template=tmp_path / "missing.jinja")
        )


def test_vllms_allow_long_switch_takes_a_longer_max_model_len(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As vLLM with VLLM_ALLOW_LONG_MAX_MODEL_LEN: the longer length is taken, and an engine
    reporting it is not taken for another model."""
    spec = ModelSpec(model_path=demo_model_path(), max_model_len=5000)
    own = load_spec_folder(ModelSpec(model_path=demo_model_path())).context_length
    assert own is not None
    assert own < 5000
    for value in ("0", "", "yes"):
        monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", value)
        with pytest.raises(ConfigError, match="more than its folder's"):
            load_spec_folder(spec)
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", " True ")
    assert load_spec_folder(spec).context_length == 5000
    (declared,) = load_model_folders((spec,)).declared
    assert declared.refusal(max_model_len=5000) is None
    assert declared.refusal(max_model_len=5001) is not None


def test_an_inline_chat_template_applies_and_never_with_a_file(tmp_path: Path) -> None:
    inline = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    folder = load_spec_folder(ModelSpec(model_path=demo_model_path(), chat_template_text=inline))
    assert folder.chat_template == inline
    template = tmp_path / "t.jinja"
    template.write_text("{{ 1 }}", encoding="utf-8")
    both = ModelSpec(
        model_path=demo_model_path(), chat_template=template, chat_template_text=inline
    )
    with pytest.raises(ConfigError, match="both given"):
        load_spec_folder(both)


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ('["chat", "gpt-4o"]', "tenants.acme.models names models that are not served: ['gpt-4o']"),
        ("[]", "tenants.acme.models is empty"),
    ],
)
def test_a_tenant_limited_to_models_that_are_not_served_is_a_config_error(
    tmp_path: Path, models: str, message: str
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[keys]\n"sk-1" = "acme"\n[tenants.acme]\nmodels = {models}\n')
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_toml(tmp_path, f'api_keys = "{keys}"\n' + TWO_TABLES)
