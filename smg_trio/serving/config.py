"""I/O. The gateway's configuration: workers, listener, limits; from flags or a TOML file.

Workers are given as specs (`RUNTIME+WIRE://HOST:PORT[?QUERY]`, serving/worker_specs.py); with
several models (serving/model_specs.py, docs/fleet.md §4) a worker's `?model=NAME` says which
model it serves.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Final

import msgspec

from smg_trio.core.parsers.registry import check_parser_names
from smg_trio.core.template_content_format import ContentFormatFlag
from smg_trio.errors import ConfigError
from smg_trio.frontends.cors import CorsPolicy
from smg_trio.frontends.root_path import checked_root_path
from smg_trio.neutral.capabilities import capabilities_of
from smg_trio.request.arrival import DEFAULT_SESSION_HEADER
from smg_trio.responses.store.stores import check_store_url
from smg_trio.routing.admission import DEFAULT_MAX_QUEUE, DEFAULT_QUEUE_TIMEOUT_S
from smg_trio.routing.policies import POLICY_NAMES
from smg_trio.routing.retry import DEFAULT_MAX_RETRIES, DEFAULT_MIGRATION_LIMIT
from smg_trio.serving.frontend_option_flags import check_frontend_option_fields
from smg_trio.serving.model_specs import ModelSpec, check_models, unfold_model_tables
from smg_trio.serving.worker_specs import WorkerSpec, parse_worker_spec
from smg_trio.tenancy.api_keys import load_api_keys
from smg_trio.tenancy.redis_client import RedisAddress

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_S: Final = 600.0  # generous: long generations on slow engines
# Resilience (docs/resilience.md): engine silence while a first token or a probe answer is
# awaited, the drain on SIGTERM/SIGINT, and the keep-alive of silent streams.
DEFAULT_ENGINE_SILENCE_S: Final = 30.0
DEFAULT_DRAIN_TIMEOUT_S: Final = 30.0
DEFAULT_KEEPALIVE_S: Final = 15.0


class GatewayConfig(msgspec.Struct, frozen=True, kw_only=True):
    model_path: Path
    workers: tuple[WorkerSpec, ...]
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    # The names clients may put in `model` (`--served-model-name`, repeatable); the first is
    # the one responses and /v1/models lead with. Empty: the model folder's name.
    served_model_names: tuple[str, ...] = ()
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    certfile: Path | None = None
    keyfile: Path | None = None
    engine_silence_s: float = DEFAULT_ENGINE_SILENCE_S
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    # Routing and admission (docs/routing.md): the policy for every model, or per served name
    # (TOML `model_policies = {"alias" = "cache_aware"}`); retries before the first byte; the
    # global concurrency limit with its queue; the /workers API's key (None: no /workers).
    policy: str = "round_robin"
    model_policies: dict[str, str] = msgspec.field(default_factory=dict)
    session_header: str = DEFAULT_SESSION_HEADER
    max_retries: int = DEFAULT_MAX_RETRIES
    # Moves of a request to another worker after output began (docs/resilience.md §9); 0: none.
    migration_limit: int = DEFAULT_MIGRATION_LIMIT
    max_concurrent_requests: int | None = None
    max_queue: int = DEFAULT_MAX_QUEUE
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    admin_api_key: str | None = None
    # The served model's output parsers, by vLLM's names (docs/tools-and-reasoning.md §6).
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    # The model's chat template from a Jinja file instead of its folder's (vLLM's
    # --chat-template FILE, or the template itself), and its context bound below the folder's
    # (--max-model-len).
    chat_template: Path | None = None
    chat_template_text: str | None = None
    max_model_len: int | None = None
    # What the first model serves, by vLLM's `--runner generate|pooling` and
    # `--convert embed|classify` (docs/pooling.md §4).
    runner: str = "generate"
    convert: str | None = None
    # Further models served by the same gateway (docs/fleet.md §4); the fields above are the
    # first. A worker names its model with `?model=NAME`.
    models: tuple[ModelSpec, ...] = ()
    # Bytes of bodies and prompt ids all requests in flight may hold (docs/limits.md §4);
    # None: a quarter of physical memory.
    memory_budget_mb: int | None = None
    # Streamed tokens per chunk after a choice's first (vLLM's --stream-interval; 1 = every
    # engine batch as it comes; docs/performance.md §4).
    stream_interval: int = 1
    # HTTP server limits (docs/http.md): seconds, and 0 = derived from the fd limit for caps.
    idle_timeout_s: float = 75.0
    header_timeout_s: float = 20.0
    body_timeout_s: float = 60.0
    body_idle_s: float = 15.0
    max_connections: int = 0
    max_websockets: int = 0
    h2_max_streams: int = 100  # SETTINGS_MAX_CONCURRENT_STREAMS we advertise (hypercorn's, smg's)
    # Observability (docs/observability.md): a second, metrics-only listener; prompt and
    # completion text in the request log lines; OTLP/HTTP traces endpoint.
    metrics_port: int | None = None
    # Probes (/health, /readiness, /liveness, /metrics) in a process of their own, answered
    # however busy the event loop is (docs/resilience.md §8).
    probe_port: int | None = None
    log_requests: bool = False
    otlp_endpoint: str | None = None
    # vLLM's --otlp-traces-endpoint: the same traces over the protocol vLLM would use with this
    # environment (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: grpc, its default, or http/protobuf).
    otlp_traces_endpoint: str | None = None
    # /v1/responses' store (docs/client-apis.md §3.3): sqlite:///PATH or postgresql://...;
    # None: a SQLite file in the user's data dir, opened on first use.
    response_store: str | None = None
    # Tenants (docs/fleet.md §2): a TOML file of API keys → tenant with optional budgets
    # (tenancy/api_keys.py), in place of `api_key`; where their limits live: None, in each
    # process; redis://HOST:PORT/DB, shared by every process and replica.
    api_keys: Path | None = None
    state_url: str | None = None
    # Responses that outlive their connection (docs/client-apis.md §3.5): how long a finished
    # run's events stay in the log, how many events of one response it keeps (the oldest go
    # first), and how long a resumable stream nobody follows keeps generating.
    response_retention_s: float = 3600.0
    response_events_max: int = 65536
    resume_grace_s: float = 30.0
    # vLLM's GET /tokenizer_info (its --enable-tokenizer-info-endpoint; model/tokenizer_info.py).
    tokenizer_info_endpoint: bool = False
    # vLLM's --enable-scale-out (POST /inference/v1/abort_requests) and its dev mode
    # (VLLM_SERVER_DEV_MODE=1: POST /collective_rpc); docs/vllm-frontend.md §9, §10.
    scale_out: bool = False
    dev_mode: bool = False
    # Served under a proxy's path prefix, and to browser pages of other origins (vLLM's
    # --root-path and CORS flags; frontends/root_path.py, frontends/cors.py).
    root_path: str = ""
    cors: CorsPolicy | None = None
    # Gateway processes sharing the listening socket (docs/processes.md); 1: this process
    # serves, with no supervisor.
    processes: int = 1
    # Images (docs/images.md §3, vLLM's flags; serving/media_options.py): per request; the
    # only hosts fetched (at any address; empty: public addresses of any host); file: URLs.
    limit_mm_per_prompt: int = 16
    allowed_media_domains: tuple[str, ...] = ()
    allowed_local_media_path: str | None = None
    # The engines' `--mm-device-do-normalize` (vLLM's flag; docs/images.md §4.2): whether they
    # normalise pixels themselves (raw uint8 on the wire) for the families that support it;
    # None: vLLM's default (on for them).
    mm_device_do_normalize: bool | None = None
    # Answers and the request log, by vLLM's flags (serving/frontend_option_flags.py): the chat reply's
    # role; logprob tokens as token_id:N; usage.prompt_tokens_details always; characters of
    # the body and of each completion text in a --log-requests line (None: all).
    response_role: str = "assistant"
    return_tokens_as_token_ids: bool = False
    enable_prompt_tokens_details: bool = False
    max_log_len: int | None = None
    # How a message's content reaches the chat template (vLLM's --chat-template-content-format):
    # auto (the template's own, as vLLM detects it), string or openai.
    chat_template_content_format: ContentFormatFlag = "auto"
    # vLLM's --default-chat-template-kwargs, --exclude-tools-when-tool-choice-none,
    # --trust-request-chat-template and --enable-force-include-usage (core/frontend_options.py).
    default_chat_template_kwargs: dict[str, Any] | None = None
    exclude_tools_when_tool_choice_none: bool = False
    trust_request_chat_template: bool = False
    enable_force_include_usage: bool = False

    @property
    def model_specs(self) -> tuple[ModelSpec, ...]:
        """Every served model, the first from the gateway's own model fields."""
        first = ModelSpec(
            model_path=self.model_path,
            served_model_names=self.served_model_names,
            tool_call_parser=self.tool_call_parser,
            reasoning_parser=self.reasoning_parser,
            chat_template=self.chat_template,
            chat_template_text=self.chat_template_text,
            max_model_len=self.max_model_len,
            runner=self.runner,
            convert=self.convert,
        )
        return (first, *self.models)


def read_config_file(path: Path) -> dict[str, Any]:
    """A TOML config file's tables (`--config`: the same content as the flags)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def config_from_mapping(data: dict[str, Any], *, source: str, base: Path) -> GatewayConfig:
    known = set(GatewayConfig.__struct_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown keys {unknown}; known: {sorted(known)}")
    raw_workers = data.get("workers", [])
    if not isinstance(raw_workers, list) or not all(isinstance(w, str) for w in raw_workers):
        raise ConfigError(f"{source}: `workers` must be a list of RUNTIME+WIRE://HOST:PORT strings")
    fields, table_workers = unfold_model_tables(data, source, base)
    workers = [parse_worker_spec(w) for w in raw_workers]
    for model, listed in table_workers:
        workers.extend(_serving(parse_worker_spec(w), model) for w in listed)
    fields["workers"] = tuple(workers)
    for key in ("model_path", "certfile", "keyfile", "api_keys", "chat_template"):
        if isinstance(fields.get(key), str):
            fields[key] = base / fields[key]
    try:
        config = msgspec.convert(fields, GatewayConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    return validated(config)


def _serving(spec: WorkerSpec, model: str | None) -> WorkerSpec:
    """A [[models]] table's worker: the table's model (a `?model=` must not say otherwise)."""
    if model is None or spec.model == model:
        return spec
    if spec.model is not None:
        raise ConfigError(f"worker {spec} is listed under model {model!r} but names another")
    return msgspec.structs.replace(spec, model=model)


def validated(config: GatewayConfig) -> GatewayConfig:
    if not config.workers:
        raise ConfigError("at least one --worker RUNTIME+WIRE://HOST:PORT is needed")
    check_models(config.model_specs, [spec.model for spec in config.workers], config.model_policies)
    if (config.certfile is None) != (config.keyfile is None):
        raise ConfigError("TLS needs both a certificate and a key (--certfile and --keyfile)")
    if not 0 <= config.port < 65536:
        raise ConfigError(f"port must be in 0..65535, got {config.port}")
    if config.max_body_bytes < 1024:
        raise ConfigError(f"max_body_bytes must be at least 1024, got {config.max_body_bytes}")
    if any(not name for name in config.served_model_names):
        raise ConfigError("a served model name must not be empty")
    for name in ("request_timeout_s", "engine_silence_s", "keepalive_s"):
        if not getattr(config, name) > 0:
            raise ConfigError(f"{name} must be positive, got {getattr(config, name)}")
    if not config.drain_timeout_s >= 0:
        raise ConfigError(f"drain_timeout_s must be 0 or more, got {config.drain_timeout_s}")
    validate_routing(config)
    check_parser_names(config.tool_call_parser, config.reasoning_parser)
    if config.memory_budget_mb is not None and config.memory_budget_mb < 1:
        raise ConfigError(f"memory_budget_mb must be at least 1, got {config.memory_budget_mb}")
    check_http_limits(config)
    if config.response_store is not None:
        check_store_url(config.response_store)
    for name in ("response_retention_s", "resume_grace_s"):
        if not getattr(config, name) >= 0:
            raise ConfigError(f"{name} must be 0 or more, got {getattr(config, name)}")
    if config.response_events_max < 16:
        raise ConfigError(
            f"response_events_max must be at least 16, got {config.response_events_max}"
        )
    for name in ("metrics_port", "probe_port"):
        value = getattr(config, name)
        if value is not None and not 0 <= value < 65536:
            raise ConfigError(f"{name} must be in 0..65535, got {value}")
    if config.max_model_len is not None and config.max_model_len < 1:
        raise ConfigError(f"max_model_len must be at least 1, got {config.max_model_len}")
    check_processes(config)
    check_tenancy(config)
    checked_root_path(config.root_path)
    check_frontend_option_fields(config)
    if config.otlp_endpoint is not None and config.otlp_traces_endpoint is not None:
        raise ConfigError(
            "--otlp-endpoint (OTLP/HTTP) and --otlp-traces-endpoint (vLLM's) exclude each other"
        )
    return config


def check_tenancy(config: GatewayConfig) -> None:
    if config.api_keys is not None:
        if config.api_key is not None:
            raise ConfigError(
                "--api-key and --api-keys exclude each other: put the key in the file"
            )
        table = load_api_keys(config.api_keys)  # every error now, before anything starts
        served = {name for spec in config.model_specs for name in spec.names}
        for tenant in table.tenants:
            unknown = sorted((tenant.models or frozenset()) - served)
            if unknown:
                raise ConfigError(
                    f"{config.api_keys}: tenants.{tenant.name}.models names models that are "
                    f"not served: {unknown}"
                )
    if config.state_url is not None:
        if config.api_keys is None:
            raise ConfigError("--state-url holds tenant limits: it needs --api-keys FILE")
        RedisAddress(config.state_url)


def check_processes(config: GatewayConfig) -> None:
    """What several gateway processes cannot share (docs/processes.md §4)."""
    if config.processes < 1:
        raise ConfigError(f"processes must be at least 1, got {config.processes}")
    if config.processes == 1:
        return
    for spec in config.workers:
        if capabilities_of(spec.runtime, spec.wire).one_gateway_process:
            raise ConfigError(
                f"worker {spec}: TokenSpeed over ZMQ answers one client only (no client_index, "
                f"outputs[0] only: docs/wire.md §B.7); use --processes 1 for it"
            )
    refused = (
        ("probe_port", "--probe-port"),
        ("admin_api_key", "--admin-api-key (/workers would change one process only)"),
    )
    for name, flag in refused:
        if getattr(config, name) is not None:
            raise ConfigError(f"{flag} is not supported with --processes {config.processes}")


def validate_routing(config: GatewayConfig) -> None:
    policies = (
        config.policy,
        *config.model_policies.values(),
        *(model.policy for model in config.models if model.policy is not None),
    )
    subscribed = [str(spec) for spec in config.workers if spec.kv_events is not None]
    if subscribed and "kv_events" not in policies:
        raise ConfigError(
            f"worker {subscribed[0]} names a KV-event publisher, but no policy reads KV events: "
            "use policy kv_events (or a model_policies entry), or drop ?kv_events="
        )
    model_own = [(f"model {m.names[0]!r}", m.policy) for m in config.models if m.policy]
    for where, policy in (("policy", config.policy), *config.model_policies.items(), *model_own):
        if policy not in POLICY_NAMES:
            raise ConfigError(
                f"{where}: unknown routing policy {policy!r}; known: {', '.join(POLICY_NAMES)}"
            )
        if policy == "kv_events" and not any(spec.kv_events for spec in config.workers):
            raise ConfigError(
                f"{where}: kv_events needs the engines' KV-event publishers: add "
                "?kv_events=tcp://HOST:PORT to the worker specs (docs/routing.md §9)"
            )
    if config.stream_interval < 1:
        raise ConfigError(f"stream_interval must be at least 1, got {config.stream_interval}")
    if config.max_retries < 0:
        raise ConfigError(f"max_retries must be 0 or more, got {config.max_retries}")
    if config.migration_limit < 0:
        raise ConfigError(f"migration_limit must be 0 or more, got {config.migration_limit}")
    limit = config.max_concurrent_requests
    if limit is not None and limit < 1:
        raise ConfigError(f"max_concurrent_requests must be at least 1, got {limit}")
    if config.max_queue < 0:
        raise ConfigError(f"max_queue must be 0 or more, got {config.max_queue}")
    if not config.queue_timeout_s > 0:
        raise ConfigError(f"queue_timeout_s must be positive, got {config.queue_timeout_s}")
    if not config.session_header:
        raise ConfigError("session_header must not be empty")


def check_http_limits(config: GatewayConfig) -> None:
    for name in ("idle_timeout_s", "header_timeout_s", "body_timeout_s", "body_idle_s"):
        if not getattr(config, name) > 0:
            raise ConfigError(f"{name} must be positive, got {getattr(config, name)}")
    for name in ("max_connections", "max_websockets"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name} must be 0 (derived from the fd limit) or more")
    if config.h2_max_streams < 1:
        raise ConfigError(f"h2_max_streams must be at least 1, got {config.h2_max_streams}")
