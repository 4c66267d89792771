"""Worker specs and config files: the runtime is always explicit; bad input is a ConfigError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from smg_trio.cli import build_parser
from smg_trio.errors import ConfigError
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.serving.config import (
    GatewayConfig,
    config_from_mapping,
    read_config_file,
)
from smg_trio.serving.options import config_from_args
from smg_trio.serving.worker_specs import parse_worker_spec


def config_from_toml(path: Path) -> GatewayConfig:
    """A TOML file's config alone (as `serve --config FILE` with no flags)."""
    return config_from_mapping(read_config_file(path), source=str(path), base=path.parent)


@pytest.mark.parametrize(
    ("spec", "runtime", "wire", "address"),
    [
        ("vllm+zmq://127.0.0.1:27937", Runtime.VLLM, Wire.ZMQ, "127.0.0.1:27937"),
        ("tokenspeed+zmq://127.0.0.1:1", Runtime.TOKENSPEED, Wire.ZMQ, "127.0.0.1:1"),
        ("SGLang+gRPC://127.0.0.1:8200", Runtime.SGLANG, Wire.GRPC, "127.0.0.1:8200"),
        ("tensorrt-llm+grpc://localhost:9", Runtime.TRTLLM, Wire.GRPC, "localhost:9"),
        ("mlx+grpc://[::1]:9", Runtime.MLX, Wire.GRPC, "[::1]:9"),
    ],
)
def test_valid_specs(spec: str, runtime: Runtime, wire: Wire, address: str) -> None:
    parsed = parse_worker_spec(spec)
    assert (parsed.runtime, parsed.wire, parsed.address) == (runtime, wire, address)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zmq://127.0.0.1:1", "names no runtime"),
        ("grpc://127.0.0.1:1", "names no runtime"),
        ("llama+zmq://127.0.0.1:1", "unknown engine runtime 'llama'"),
        ("sglang+zmq://127.0.0.1:1", "'sglang' has no adapter for the zmq wire"),
        ("vllm+http://127.0.0.1:1", "unknown wire 'http'"),
        ("vllm+zmq://127.0.0.1", "HOST:PORT"),
        ("vllm+zmq://127.0.0.1:99999", "HOST:PORT"),
        ("vllm+zmq:127.0.0.1:1", "RUNTIME+WIRE://HOST:PORT"),
        ("unspecified+zmq://127.0.0.1:1", "must be declared"),
    ],
)
def test_invalid_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        parse_worker_spec(spec)
    assert spec in info.value.message


def test_toml_config(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "model"\nworkers = ["vllm+zmq://127.0.0.1:27937"]\nport = 9000\n'
        'api_key = "k"\n',
        encoding="utf-8",
    )
    config = config_from_toml(path)
    assert config.model_path == tmp_path / "model"
    assert config.port == 9000
    assert config.api_key == "k"
    assert [str(w) for w in config.workers] == ["vllm+zmq://127.0.0.1:27937"]


def test_toml_cors_root_path_and_inline_template(tmp_path: Path) -> None:
    """The settings vLLM's --allowed-origins, --root-path and inline --chat-template become."""
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "model"\nworkers = ["vllm+zmq://127.0.0.1:27937"]\nroot_path = "/llm"\n'
        "chat_template_text = \"{{ messages[0]['content'] }}\"\n"
        '[cors]\nallowed_origins = ["https://app.example"]\nallow_credentials = true\n',
        encoding="utf-8",
    )
    config = config_from_toml(path)
    assert config.root_path == "/llm"
    assert config.chat_template_text == "{{ messages[0]['content'] }}"
    assert config.model_specs[0].chat_template_text == config.chat_template_text
    assert config.cors is not None
    assert config.cors.allowed_origins == ("https://app.example",)
    assert config.cors.allowed_methods == ("*",)
    assert config.cors.allow_credentials


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nroot_path = "llm"\n', "root_path"),
        ('model_path = "m"\nworkers = ["zmq://127.0.0.1:1"]\n', "names no runtime"),
        ('model_path = "m"\nworkers = []\n', "at least one"),
        ('model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nprot = 1\n', "unknown keys"),
        ('model_path = "m"\nworkers = "vllm+zmq://h:1"\n', "must be a list"),
        ('model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nport = "x"\n', "port"),
        ('model_path = "m"\nworkers = ["vllm+zmq://h:1"]\ncertfile = "c"\n', "both"),
        ("model_path = ", "invalid TOML"),
    ],
)
def test_bad_toml_is_a_config_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        config_from_toml(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        config_from_toml(tmp_path / "absent.toml")


def test_served_model_names_repeat_on_the_command_line_and_in_toml(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model-path",
            str(tmp_path),
            "--worker",
            "vllm+zmq://127.0.0.1:1",
            "--served-model-name",
            "a",
            "--served-model-name",
            "b",
        ]
    )
    assert config_from_args(args).served_model_names == ("a", "b")
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nserved_model_names = ["x", "y"]\n',
        encoding="utf-8",
    )
    assert config_from_toml(path).served_model_names == ("x", "y")
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nserved_model_names = [""]\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="must not be empty"):
        config_from_toml(path)


def test_routing_flags_and_per_model_policies_in_toml(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nserved_model_names = ["chat", "rag"]\n'
        'policy = "power_of_two"\nmax_concurrent_requests = 64\n'
        '[model_policies]\nrag = "cache_aware"\n',
        encoding="utf-8",
    )
    args = build_parser().parse_args(
        [
            "serve",
            "--config",
            str(path),
            "--max-retries",
            "0",
            "--queue-timeout-s",
            "2.5",
            "--max-queue",
            "8",
            "--admin-api-key",
            "adm",
            "--session-header",
            "x-user",
        ]
    )
    config = config_from_args(args)
    assert (config.policy, config.model_policies) == ("power_of_two", {"rag": "cache_aware"})
    assert (config.max_concurrent_requests, config.max_queue, config.queue_timeout_s) == (
        64,
        8,
        2.5,
    )
    assert (config.max_retries, config.admin_api_key, config.session_header) == (0, "adm", "x-user")
    flagged = build_parser().parse_args(["serve", "--config", str(path), "--policy", "random"])
    assert config_from_args(flagged).policy == "random"
    assert config.migration_limit == 1  # docs/resilience.md §9
    path.write_text(
        path.read_text(encoding="utf-8").replace("[model", "migration_limit = 0\n[model")
    )
    assert config_from_toml(path).migration_limit == 0
    flagged = build_parser().parse_args(["serve", "--config", str(path), "--migration-limit", "3"])
    assert config_from_args(flagged).migration_limit == 3


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('policy = "fastest"', "unknown routing policy 'fastest'"),
        ('model_policies = {other = "random"}', "not served"),
        ('model_policies = {a = "sticky"}', "unknown routing policy 'sticky'"),
        ("max_retries = -1", "max_retries"),
        ("migration_limit = -1", "migration_limit"),
        ("max_concurrent_requests = 0", "max_concurrent_requests"),
        ("queue_timeout_s = 0", "queue_timeout_s"),
    ],
)
def test_bad_routing_settings_are_config_errors(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(
        f'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nserved_model_names = ["a"]\n{line}\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=message):
        config_from_toml(path)


def test_output_parsers_by_flag_and_toml_and_unknown_names_are_config_errors(
    tmp_path: Path,
) -> None:
    argv = ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]
    args = build_parser().parse_args(
        [*argv, "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]
    )
    config = config_from_args(args)
    assert (config.tool_call_parser, config.reasoning_parser) == ("hermes", "qwen3")
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\ntool_call_parser = "qwen"\n'
        'reasoning_parser = "deepseek_r1"\n',
        encoding="utf-8",
    )
    config = config_from_toml(path)
    assert (config.tool_call_parser, config.reasoning_parser) == ("qwen", "deepseek_r1")
    with pytest.raises(ConfigError, match=r"tool_call_parser 'nope' is unknown; known: .*hermes"):
        config_from_args(build_parser().parse_args([*argv, "--tool-call-parser", "nope"]))
    with pytest.raises(ConfigError, match="reasoning_parser 'nope' is unknown"):
        config_from_args(build_parser().parse_args([*argv, "--reasoning-parser", "nope"]))


def test_http_limit_flags_reach_the_config_and_bad_values_are_refused(tmp_path: Path) -> None:
    base = ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]
    limits = ["--idle-timeout-s", "5", "--header-timeout-s", "3", "--body-timeout-s", "9"]
    limits += ["--body-idle-s", "2", "--max-connections", "100", "--max-websockets", "10"]
    limits += ["--h2-max-streams", "8"]
    config = config_from_args(build_parser().parse_args([*base, *limits]))
    assert (config.idle_timeout_s, config.header_timeout_s) == (5.0, 3.0)
    assert (config.body_timeout_s, config.body_idle_s) == (9.0, 2.0)
    assert (config.max_connections, config.max_websockets) == (100, 10)
    assert config.h2_max_streams == 8
    defaults = config_from_args(build_parser().parse_args(base))
    assert (defaults.idle_timeout_s, defaults.max_connections) == (75.0, 0)  # 0: from fd limit
    with pytest.raises(ConfigError, match="body_idle_s must be positive"):
        config_from_args(build_parser().parse_args([*base, "--body-idle-s", "0"]))
    with pytest.raises(ConfigError, match="max_connections must be 0"):
        config_from_args(build_parser().parse_args([*base, "--max-connections", "-1"]))


def test_observability_flags_reach_the_config(tmp_path: Path) -> None:
    base = ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]
    plain = config_from_args(build_parser().parse_args(base))
    assert (plain.metrics_port, plain.log_requests, plain.otlp_endpoint) == (None, False, None)
    args = build_parser().parse_args(
        [
            *base,
            "--metrics-port",
            "9100",
            "--log-requests",
            "--otlp-endpoint",
            "http://127.0.0.1:4318/v1/traces",
            "--log-format",
            "json",
        ]
    )
    config = config_from_args(args)
    assert (config.metrics_port, config.log_requests) == (9100, True)
    assert config.otlp_endpoint == "http://127.0.0.1:4318/v1/traces"
    assert args.log_format == "json"
    with pytest.raises(ConfigError, match="metrics_port"):
        config_from_args(build_parser().parse_args([*base, "--metrics-port", "70000"]))
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--log-format", "xml"])


def test_the_response_store_by_flag_and_toml_and_bad_urls_are_config_errors(
    tmp_path: Path,
) -> None:
    argv = ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]
    store = "sqlite:////var/lib/smg/responses.sqlite3"
    config = config_from_args(build_parser().parse_args([*argv, "--response-store", store]))
    assert config.response_store == store
    assert config_from_args(build_parser().parse_args(argv)).response_store is None  # default
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\n'
        'response_store = "postgresql://gw@db.internal/responses"\n',
        encoding="utf-8",
    )
    assert config_from_toml(path).response_store == "postgresql://gw@db.internal/responses"
    with pytest.raises(ConfigError, match="expected sqlite:///PATH or postgresql://"):
        config_from_args(build_parser().parse_args([*argv, "--response-store", "mysql://x"]))


def test_processes_by_flag_and_toml_and_what_several_cannot_share(tmp_path: Path) -> None:
    """docs/processes.md §3-§4: N > 1 refuses what one client or one process only can do."""
    base = ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]
    assert config_from_args(build_parser().parse_args(base)).processes == 1
    assert config_from_args(build_parser().parse_args([*base, "--processes", "3"])).processes == 3
    toml = tmp_path / "gateway.toml"
    toml.write_text('model_path = "."\nworkers = ["sglang+grpc://127.0.0.1:2"]\nprocesses = 2\n')
    assert config_from_toml(toml).processes == 2
    refused = [
        (["--processes", "0"], "processes must be at least 1"),
        (["--processes", "2", "--worker", "tokenspeed+zmq://127.0.0.1:3"], "tokenspeed\\+zmq"),
        (["--processes", "2", "--probe-port", "9101"], "--probe-port"),
        (["--processes", "2", "--admin-api-key", "k"], "--admin-api-key"),
    ]
    for flags, message in refused:
        with pytest.raises(ConfigError, match=message):
            config_from_args(build_parser().parse_args([*base, *flags]))


def test_stream_interval_by_flag_and_toml_and_below_one_is_a_config_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gw.toml"
    base = 'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\n'
    path.write_text(base + "stream_interval = 4\n", encoding="utf-8")
    assert config_from_toml(path).stream_interval == 4
    args = build_parser().parse_args(["serve", "--config", str(path), "--stream-interval", "8"])
    assert config_from_args(args).stream_interval == 8
    path.write_text(base, encoding="utf-8")
    assert config_from_toml(path).stream_interval == 1  # the default: every batch as it comes
    path.write_text(base + "stream_interval = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="stream_interval"):
        config_from_toml(path)


def test_api_keys_and_state_url_by_flag_and_toml_and_what_they_refuse(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"sk-1" = "acme"\n', encoding="utf-8")
    argv = ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]
    redis = "redis://:pw@10.0.0.5:6380/2"
    config = config_from_args(
        build_parser().parse_args([*argv, "--api-keys", str(keys), "--state-url", redis])
    )
    assert (config.api_keys, config.state_url) == (keys.resolve(), redis)
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\n'
        f'api_keys = "keys.toml"\nstate_url = "{redis}"\n',
        encoding="utf-8",
    )
    assert config_from_toml(path).api_keys == tmp_path / "keys.toml"  # relative to the file
    refused = [
        (["--api-keys", str(keys), "--api-key", "k"], "exclude each other"),
        (["--state-url", redis], "needs --api-keys"),
        (["--api-keys", str(keys), "--state-url", "http://x"], "expected redis://"),
        (["--api-keys", str(keys), "--state-url", "redis://h/db"], "a database number"),
        (["--api-keys", str(tmp_path / "absent.toml")], "cannot read it"),
    ]
    for flags, message in refused:
        with pytest.raises(ConfigError, match=message):
            config_from_args(build_parser().parse_args([*argv, *flags]))


def test_kv_event_endpoints_in_worker_specs_by_flag_and_toml(tmp_path: Path) -> None:
    spec = "vllm+zmq://127.0.0.1:27937?kv_events=ipc:///tmp/kv.sock&kv_replay=tcp://127.0.0.1:5558"
    parsed = parse_worker_spec(spec)
    assert (parsed.address, parsed.kv_events, parsed.kv_replay) == (
        "127.0.0.1:27937",
        "ipc:///tmp/kv.sock",
        "tcp://127.0.0.1:5558",
    )
    assert str(parsed) == spec
    args = build_parser().parse_args(
        ["serve", "--model-path", str(tmp_path), "--worker", spec, "--policy", "kv_events"]
    )
    assert config_from_args(args).workers == (parsed,)
    toml = tmp_path / "gateway.toml"
    toml.write_text(f'model_path = "."\npolicy = "kv_events"\nworkers = ["{spec}"]\n')
    assert config_from_toml(toml).workers == (parsed,)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vllm+zmq://127.0.0.1:1?kv=tcp://a:1", "unknown query 'kv=tcp://a:1'"),
        ("vllm+zmq://127.0.0.1:1?kv_events=http://a:1", "kv_events must be a tcp:// or ipc://"),
        ("vllm+zmq://127.0.0.1:1?kv_replay=tcp://a:1", "kv_replay needs kv_events"),
    ],
)
def test_bad_kv_event_queries_are_config_errors(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_worker_spec(spec)


def test_kv_events_without_a_publisher_is_a_config_error(tmp_path: Path) -> None:
    toml = tmp_path / "gateway.toml"
    toml.write_text(
        'model_path = "."\npolicy = "kv_events"\nworkers = ["vllm+zmq://127.0.0.1:1"]\n'
    )
    with pytest.raises(ConfigError, match="kv_events needs the engines' KV-event publishers"):
        config_from_toml(toml)


def test_a_publisher_no_policy_reads_is_a_config_error(tmp_path: Path) -> None:
    toml = tmp_path / "gateway.toml"
    toml.write_text(
        'model_path = "."\npolicy = "cache_aware"\n'
        'workers = ["vllm+zmq://127.0.0.1:1?kv_events=ipc:///tmp/kv.sock"]\n'
    )
    with pytest.raises(ConfigError, match="no policy reads KV events"):
        config_from_toml(toml)


@pytest.mark.parametrize(
    ("flags", "value"),
    [([], None), (["--mm-device-do-normalize"], True), (["--no-mm-device-do-normalize"], False)],
)
def test_the_engines_pixel_setting_is_vllms_flag(
    tmp_path: Path, flags: list[str], value: bool | None
) -> None:
    """`--[no-]mm-device-do-normalize`, as vLLM spells it (docs/images.md §4.2); absent: its
    default. A TOML file takes it too."""
    base = ["serve", "--model-path", str(tmp_path), "--worker", "vllm+zmq://127.0.0.1:1"]
    args = build_parser().parse_args([*base, *flags])
    assert config_from_args(args).mm_device_do_normalize is value
    path = tmp_path / "gw.toml"
    path.write_text(
        'model_path = "m"\nworkers = ["vllm+zmq://h:1"]\nmm_device_do_normalize = false\n',
        encoding="utf-8",
    )
    assert config_from_toml(path).mm_device_do_normalize is False
