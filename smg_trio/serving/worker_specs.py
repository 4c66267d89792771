"""Pure. A worker spec, `RUNTIME+WIRE://HOST:PORT[?QUERY]`: which engine a worker is, where it
listens, and the query's KV-event endpoints and served model (docs/routing.md §9,
docs/fleet.md §4). E.g. `vllm+zmq://127.0.0.1:27937` (listen there for a vLLM EngineCore
handshake), `sglang+grpc://127.0.0.1:8200`, or
`vllm+zmq://127.0.0.1:27937?kv_events=tcp://127.0.0.1:5557&kv_replay=tcp://127.0.0.1:5558`
(the engine's KV-event publisher and its replay socket). The runtime is always explicit: a
spec without one (`zmq://...`), an unknown runtime, or a runtime with no adapter for the wire
is a ConfigError before anything starts. `?model=NAME`: any served name of the model (none:
the first model).
"""

from __future__ import annotations

from typing import Final

import msgspec

from smg_trio.errors import ConfigError, UnsupportedRuntime
from smg_trio.neutral.capabilities import require_adapter
from smg_trio.neutral.runtime import Runtime, Wire, parse_runtime, parse_wire

KV_EVENT_SCHEMES: Final = ("tcp://", "ipc://")


class WorkerSpec(msgspec.Struct, frozen=True):
    runtime: Runtime
    wire: Wire
    address: str  # host:port (ZMQ: the handshake listener; gRPC: the engine's server)
    kv_events: str | None = None  # the engine's KV-event PUB endpoint, which we connect to
    kv_replay: str | None = None  # its replay ROUTER endpoint
    model: str | None = None  # a served name of the model it serves (None: the first model)

    def __str__(self) -> str:
        return f"{self.runtime.value}+{self.wire.value}://{self.address}{self.query}"

    @property
    def query(self) -> str:
        pairs = (
            ("kv_events", self.kv_events),
            ("kv_replay", self.kv_replay),
            ("model", self.model),
        )
        text = "&".join(f"{key}={value}" for key, value in pairs if value is not None)
        return f"?{text}" if text else ""


def parse_worker_spec(spec: str) -> WorkerSpec:
    spec_base, _, query = spec.partition("?")
    kv_events, kv_replay, model = _query_values(spec, query)
    scheme, sep, address = spec_base.partition("://")
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
    return WorkerSpec(runtime, wire, address, kv_events, kv_replay, model)


def _query_values(spec: str, query: str) -> tuple[str | None, str | None, str | None]:
    """`kv_events=ENDPOINT[&kv_replay=ENDPOINT]` and `model=NAME` from a worker spec's query."""
    values: dict[str, str] = {}
    for pair in query.split("&") if query else ():
        key, eq, value = pair.partition("=")
        if key not in ("kv_events", "kv_replay", "model") or not eq:
            raise ConfigError(
                f"worker {spec!r}: unknown query {pair!r}; known: kv_events=, kv_replay=, model="
            )
        if key in values:
            raise ConfigError(f"worker {spec!r}: {key}= is given twice")
        if key == "model":
            if not value:
                raise ConfigError(f"worker {spec!r}: model= needs a served model name")
        elif not value.startswith(KV_EVENT_SCHEMES) or len(value) <= len("tcp://"):
            raise ConfigError(f"worker {spec!r}: {key} must be a tcp:// or ipc:// endpoint")
        values[key] = value
    if "kv_replay" in values and "kv_events" not in values:
        raise ConfigError(f"worker {spec!r}: kv_replay needs kv_events")
    return values.get("kv_events"), values.get("kv_replay"), values.get("model")
