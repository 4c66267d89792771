"""Pure. What the reference vLLM EngineCore refuses in an ADD before it runs the request, as the
real EngineCore does (docs/wire.md §A.6.2): a grammar its backends cannot compile, and an ADD
that does not decode (answered with an error when its id and client can still be read; the
real engine would lose its input thread)."""

from __future__ import annotations

from typing import Final

import msgspec

from smg_trio.engines.wire_adapter import Command, Ignored, Reject
from smg_trio.wire.vllm_zmq import VllmStructuredOutputs

# The backends vLLM's EngineCore can build (its front end writes one into `_backend`).
GRAMMAR_BACKENDS: Final = frozenset({"xgrammar", "guidance", "outlines", "lm-format-enforcer"})
_GENERIC: Final = msgspec.msgpack.Decoder()


def structured_outputs_problem(constraint: VllmStructuredOutputs | None) -> str | None:
    """Why the real EngineCore fails a request's grammar (a terminal ERROR output), or None.

    Its grammar backends compile a JSON schema, JSON mode, a regex, a grammar or a structural
    tag, never a `choice` (vLLM's front end turns one into a grammar first), and it builds its
    backend from `_backend`, which only the front end sets (docs/wire.md §A.6.2).
    """
    if constraint is None:
        return None
    keys = (
        constraint.json,
        constraint.regex,
        constraint.choice,
        constraint.grammar,
        constraint.json_object,
        constraint.structural_tag,
    )
    given = sum(value is not None for value in keys)
    if given != 1:
        return f"structured outputs need exactly one constraint, got {given}"
    if constraint.choice is not None:
        return "grammar is not of valid supported types. (StructuredOutputOptions.CHOICE)"
    if constraint.backend not in GRAMMAR_BACKENDS:
        return f"Unsupported structured output backend: {constraint.backend}"
    return None


def reject_undecodable(payload: bytes, reason: str) -> Command:
    """An ADD that does not decode: answer with an error if its id and client can be read."""
    try:
        raw = _GENERIC.decode(payload)
    except msgspec.DecodeError:
        return Ignored(reason)
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        return Ignored(reason)
    client_index = raw[11] if len(raw) > 11 and type(raw[11]) is int else 0
    return Reject(raw[0], client_index, reason)
