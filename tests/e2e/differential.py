"""Pure. Field-by-field comparison of an OpenAI-style answer from vLLM's own server with smg-trio's
answer to the same request (the differential harness, docs/real-engines.md).

A streamed answer is folded into the shape of a non-streamed one first (chunk boundaries are not
part of the contract, the concatenated text, logprobs, finish and usage are). What is NOT
compared is listed here, nowhere else:
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

# Keys whose values differ run to run, or are wording rather than contract.
IGNORED_KEYS: Final = frozenset(
    {
        "id",  # request ids: "chatcmpl-..." / "cmpl-..." are random on both sides
        "created",  # a clock
        "system_fingerprint",  # vLLM sends null; not a behaviour
        "message",  # only in an error: its wording; status, type, code and param are compared
        # smg's own stop field, which vLLM does not send; vLLM's `stop_reason` is compared
        # (docs/stops-and-finalize.md §3.9).
        "matched_stop",
    }
)
# Where both sides answer, these must match exactly: the rest of a float tree within 1e-4.
FLOAT_TOLERANCE: Final = 1e-4
# An absent key, null, [] and {} are the same answer to the `openai` SDK (vLLM sends many
# null/[] extension fields: `stop_reason`, `prompt_logprobs`, `kv_transfer_params`, ...).
EMPTY: Final[tuple[object, ...]] = (None, [], {})
MISSING: Final = "<absent>"


@dataclass
class Answer:
    """One HTTP exchange: the status, the JSON body (or the folded stream) and, for streams, the
    raw chunks (kept for the report)."""

    status: int
    body: Any
    chunks: list[Any] = field(default_factory=list)
    done: bool = False  # saw `data: [DONE]`

    def as_report(self) -> dict[str, Any]:
        report: dict[str, Any] = {"status": self.status, "body": self.body}
        if self.chunks:
            report["chunks"] = self.chunks
            report["done"] = self.done
        return report


@dataclass(frozen=True)
class Divergence:
    path: str
    vllm: Any
    ours: Any

    def __str__(self) -> str:
        return f"{self.path}: vLLM {json.dumps(self.vllm)} / smg-trio {json.dumps(self.ours)}"


def diff(vllm: Any, ours: Any, path: str = "$") -> list[Divergence]:
    if isinstance(vllm, Mapping) and isinstance(ours, Mapping):
        found: list[Divergence] = []
        for key in sorted(set(vllm) | set(ours)):
            error_level = path == "$" or path.endswith(".error")  # vLLM's two error shapes
            if key in IGNORED_KEYS and (key != "message" or error_level):
                continue
            left, right = vllm.get(key, MISSING), ours.get(key, MISSING)
            if _empty(left) and _empty(right):
                continue
            found.extend(diff(left, right, f"{path}.{key}"))
        return found
    if _is_list(vllm) and _is_list(ours):
        found = (
            [] if len(vllm) == len(ours) else [Divergence(f"{path}.length", len(vllm), len(ours))]
        )
        for index, (left, right) in enumerate(zip(vllm, ours, strict=False)):
            found.extend(diff(left, right, f"{path}[{index}]"))
        return found
    if _is_float_pair(vllm, ours):
        close = math.isclose(vllm, ours, rel_tol=0.0, abs_tol=FLOAT_TOLERANCE)
        return [] if close else [Divergence(path, vllm, ours)]
    if type(vllm) is not type(ours) or vllm != ours:
        return [Divergence(path, vllm, ours)]
    return []


def _empty(value: Any) -> bool:
    return value == MISSING or any(value == empty and type(value) is type(empty) for empty in EMPTY)


def _is_list(value: Any) -> bool:
    return isinstance(value, list)


def _is_float_pair(left: Any, right: Any) -> bool:
    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    return number(left) and number(right) and (isinstance(left, float) or isinstance(right, float))


def fold_stream(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The non-streamed shape of a stream: per choice index the concatenated text (or content),
    logprobs and `token_ids`, the last finish_reason and stop_reason, its prompt's
    `prompt_token_ids` (completions), the usage on its last chunk and on chat's role chunk
    (the count on a first text chunk depends on how tokens coalesced, as chunk boundaries); the
    `prompt_token_ids` of chat's role chunks; the last usage; and whether every chunk carried
    usage (continuous_usage_stats puts it on every one). Not how many chunks did: that counts
    chunk boundaries, which differ with how tokens coalesce under load and with vLLM sending the
    last token's text in its finish chunk."""
    folded: dict[str, Any] = {"choices": {}, "usage": None, "usage_on_every_chunk": bool(chunks)}
    for chunk in chunks:
        for key in ("object", "model"):
            folded.setdefault(key, chunk.get(key))
        if chunk.get("prompt_token_ids") is not None:  # chat: on every role chunk
            folded.setdefault("prompt_token_ids", chunk["prompt_token_ids"])
        usage = chunk.get("usage")
        if usage is not None:
            folded["usage"] = usage
        else:
            folded["usage_on_every_chunk"] = False
        for choice in chunk.get("choices") or []:
            into = folded["choices"].setdefault(choice["index"], {})
            if usage is not None:  # continuous usage: the choice's running count
                if (choice.get("delta") or {}).get("role") is not None:
                    into["role_usage"] = usage  # chat's role chunk: no completion tokens yet
                into["last_usage"] = usage
            _fold_choice(into, choice)
    folded["choices"] = [folded["choices"][index] for index in sorted(folded["choices"])]
    return folded


def _fold_choice(into: dict[str, Any], choice: Mapping[str, Any]) -> None:
    for key in ("finish_reason", "stop_reason"):
        if choice.get(key) is not None:
            into[key] = choice[key]
    if choice.get("prompt_token_ids") is not None:  # completions: on a choice's first chunk
        into.setdefault("prompt_token_ids", choice["prompt_token_ids"])
    if choice.get("token_ids") is not None:
        into["token_ids"] = into.get("token_ids", []) + choice["token_ids"]
    delta = choice.get("delta")
    if delta is not None:  # chat
        if delta.get("role") is not None:
            into.setdefault("role", delta["role"])
        if delta.get("content") is not None:
            into["content"] = into.get("content", "") + delta["content"]
        if delta.get("tool_calls"):
            into.setdefault("tool_calls", []).extend(delta["tool_calls"])
        logprobs = choice.get("logprobs")
        if logprobs is not None:
            into.setdefault("logprobs", []).extend(logprobs.get("content") or [])
        return
    if choice.get("text") is not None:  # completions
        into["text"] = into.get("text", "") + choice["text"]
    logprobs = choice.get("logprobs")
    if logprobs is not None:
        merged = into.setdefault("logprobs", {})
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            merged.setdefault(key, []).extend(logprobs.get(key) or [])
