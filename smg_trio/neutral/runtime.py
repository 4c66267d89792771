"""Pure. Engine runtimes, wires and client endpoints, and their names in a configuration.

Which (runtime, wire) pairs have an adapter, and what each takes, is `neutral/capabilities.py`.

A worker's runtime is always explicit. `UNSPECIFIED` exists so that a configuration that forgot
it can be represented and rejected with a clear message, never silently defaulted.
"""

from __future__ import annotations

import enum

from smg_trio.errors import UnsupportedRuntime


class Runtime(enum.Enum):
    UNSPECIFIED = "unspecified"
    SGLANG = "sglang"
    VLLM = "vllm"
    TOKENSPEED = "tokenspeed"
    MLX = "mlx"
    TRTLLM = "trtllm"


class Wire(enum.Enum):
    GRPC = "grpc"
    ZMQ = "zmq"


class Endpoint(enum.Enum):
    CHAT = "chat"  # POST /v1/chat/completions
    COMPLETION = "completion"  # POST /v1/completions
    GENERATE = "generate"  # POST /generate (SGLang style)
    RESPONSES = "responses"  # POST /v1/responses (OpenAI Responses)
    MESSAGES = "messages"  # POST /v1/messages (Anthropic)
    TOKENS = "tokens"  # POST /inference/v1/generate (vLLM's tokens in, tokens out)


_RUNTIME_ALIASES = {"tensorrt-llm": Runtime.TRTLLM, "tensorrt_llm": Runtime.TRTLLM}


def parse_runtime(name: str) -> Runtime:
    """Case-insensitive runtime name → Runtime; an unknown name is an error naming it."""
    key = name.strip().lower()
    if key in _RUNTIME_ALIASES:
        return _RUNTIME_ALIASES[key]
    for runtime in Runtime:
        if runtime.value == key:
            return runtime
    known = ", ".join(r.value for r in Runtime if r is not Runtime.UNSPECIFIED)
    raise UnsupportedRuntime(f"unknown engine runtime {name!r}; expected one of: {known}")


def parse_wire(name: str) -> Wire:
    key = name.strip().lower()
    for wire in Wire:
        if wire.value == key:
            return wire
    raise UnsupportedRuntime(f"unknown wire {name!r}; expected 'grpc' or 'zmq'")
