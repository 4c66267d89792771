"""The gateway's configuration: worker specs, listener, limits; from flags or a TOML file.

A worker spec is `RUNTIME+WIRE://ADDRESS`, e.g. `vllm+zmq://127.0.0.1:27937` (listen there for a
vLLM EngineCore handshake) or `sglang+grpc://127.0.0.1:8200`. The runtime is always explicit: a
spec without one (`zmq://...`), an unknown runtime, or a runtime with no adapter for the wire is a
ConfigError before anything starts.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Final

import msgspec

from smg_trio.errors import ConfigError, UnsupportedRuntime
from smg_trio.neutral.runtime import Runtime, Wire, parse_runtime, parse_wire, require_adapter

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_S: Final = 600.0  # generous: long generations on slow engines


class WorkerSpec(msgspec.Struct, frozen=True):
    runtime: Runtime
    wire: Wire
    address: str  # host:port (ZMQ: the handshake listener; gRPC: the engine's server)

    def __str__(self) -> str:
        return f"{self.runtime.value}+{self.wire.value}://{self.address}"


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
    # Observability (docs/observability.md): a second, metrics-only listener; prompt and
    # completion text in the request log lines; OTLP/HTTP traces endpoint.
    metrics_port: int | None = None
    log_requests: bool = False
    otlp_endpoint: str | None = None


def parse_worker_spec(spec: str) -> WorkerSpec:
    scheme, sep, address = spec.partition("://")
    if not sep or not address:
        raise ConfigError(f"worker {spec!r}: expected RUNTIME+WIRE://HOST:PORT")
    runtime_name, plus, wire_name = scheme.partition("+")
    if not plus:
        raise ConfigError(
            f"worker {spec!r} names no runtime: write it as RUNTIME+{scheme}://{address} "
            "(runtime: sglang, vllm, tokenspeed, mlx or trtllm); it is never guessed"
        )
    try:
        runtime = parse_runtime(runtime_name)
        wire = parse_wire(wire_name)
        require_adapter(runtime, wire)
    except UnsupportedRuntime as exc:
        raise ConfigError(f"worker {spec!r}: {exc.message}") from exc
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"worker {spec!r}: the address must be HOST:PORT, got {address!r}")
    return WorkerSpec(runtime, wire, address)


def config_from_toml(path: Path) -> GatewayConfig:
    """Read a TOML file with the same content as the flags (`workers = ["vllm+zmq://..."]`)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    return config_from_mapping(data, source=str(path), base=path.parent)


def config_from_mapping(data: dict[str, Any], *, source: str, base: Path) -> GatewayConfig:
    known = set(GatewayConfig.__struct_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown keys {unknown}; known: {sorted(known)}")
    raw_workers = data.get("workers", [])
    if not isinstance(raw_workers, list) or not all(isinstance(w, str) for w in raw_workers):
        raise ConfigError(f"{source}: `workers` must be a list of RUNTIME+WIRE://HOST:PORT strings")
    fields = dict(data)
    fields["workers"] = tuple(parse_worker_spec(w) for w in raw_workers)
    for key in ("model_path", "certfile", "keyfile"):
        if isinstance(fields.get(key), str):
            fields[key] = base / fields[key]
    try:
        config = msgspec.convert(fields, GatewayConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    return validated(config)


def validated(config: GatewayConfig) -> GatewayConfig:
    if not config.workers:
        raise ConfigError("at least one --worker RUNTIME+WIRE://HOST:PORT is needed")
    if (config.certfile is None) != (config.keyfile is None):
        raise ConfigError("TLS needs both a certificate and a key (--certfile and --keyfile)")
    if not 0 <= config.port < 65536:
        raise ConfigError(f"port must be in 0..65535, got {config.port}")
    if config.max_body_bytes < 1024:
        raise ConfigError(f"max_body_bytes must be at least 1024, got {config.max_body_bytes}")
    if any(not name for name in config.served_model_names):
        raise ConfigError("a served model name must not be empty")
    if config.metrics_port is not None and not 0 <= config.metrics_port < 65536:
        raise ConfigError(f"metrics_port must be in 0..65535, got {config.metrics_port}")
    if not config.request_timeout_s > 0:
        raise ConfigError(f"request_timeout_s must be positive, got {config.request_timeout_s}")
    return config
