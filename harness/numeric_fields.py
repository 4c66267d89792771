"""Pure. Every numeric field of every client request type, read from the request Structs
themselves (`msgspec.inspect`), and the hostile values of issue 45 for each: integers beyond
int64 and beyond float range, a float overflow, a bool, a negative (docs/limits.md §5).

A field is named by its path as a client writes it and as a 400's `param` names it
(`sampling_params.seed`, `stop_token_ids[0]`, `thinking.budget_tokens`); `body_with` puts a raw
JSON number text at that path in an endpoint's valid body. Nothing here is a hand-kept list of
fields: a numeric field added to a request Struct is walked the next time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec
import msgspec.inspect as mi

from smg_trio.wire.anthropic import CountTokensRequest, MessagesRequest
from smg_trio.wire.openai import ChatCompletionRequest, CompletionRequest, GenerateRequest
from smg_trio.wire.openai_tokenize import DetokenizeRequest
from smg_trio.wire.responses_api import ResponsesRequest

Kind = Literal["int", "float"]
Step = str | int  # a member's name, or index 0 of an array
_PLACEHOLDER: Final = "__numeric_field_value__"
_DICT_KEY: Final = "5"  # a dict's key: a token id in every vocabulary (logit_bias)

CHAT: Final = "/v1/chat/completions"
COMPLETIONS: Final = "/v1/completions"
GENERATE: Final = "/generate"
TOKENIZE: Final = "/v1/tokenize"
DETOKENIZE: Final = "/v1/detokenize"
RESPONSES: Final = "/v1/responses"
MESSAGES: Final = "/v1/messages"
COUNT_TOKENS: Final = "/v1/messages/count_tokens"

_USER: Final = [{"role": "user", "content": "hi"}]
ENDPOINTS: Final[dict[str, tuple[type[msgspec.Struct], dict[str, Any]]]] = {
    # The request type of each POST path and a valid body asking for at most two tokens (the
    # tokenize chat form decodes as a chat request, so it has every chat field).
    CHAT: (ChatCompletionRequest, {"messages": _USER, "max_tokens": 2}),
    COMPLETIONS: (CompletionRequest, {"prompt": "once upon", "max_tokens": 2}),
    GENERATE: (GenerateRequest, {"text": "hello", "sampling_params": {"max_new_tokens": 2}}),
    # (a field in `EXCLUSIVE` replaces the member it excludes: `input_ids` replaces `text`)
    TOKENIZE: (ChatCompletionRequest, {"messages": _USER}),
    DETOKENIZE: (DetokenizeRequest, {"tokens": [5, 6]}),
    RESPONSES: (ResponsesRequest, {"input": "hi", "max_output_tokens": 2}),
    MESSAGES: (MessagesRequest, {"model": "demo_model", "messages": _USER, "max_tokens": 2}),
    COUNT_TOKENS: (CountTokensRequest, {"model": "demo_model", "messages": _USER}),
}


EXCLUSIVE: Final[dict[str, str]] = {"input_ids": "text"}
"""/generate takes `text` or `input_ids`, never both."""


@dataclass(frozen=True)
class NumericField:
    """One numeric field: where it sits in a body and the number type it declares."""

    steps: tuple[Step, ...]
    kind: Kind
    tags: tuple[tuple[int, str, str], ...] = ()
    """(depth, tag field, tag) of each tagged Struct on the way (`thinking`'s `type`)."""

    @property
    def path(self) -> str:
        out = ""
        for step in self.steps:
            out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
        return out

    @property
    def name(self) -> str:
        """The path without array indexes and dict keys: what a 400's `param` must start with."""
        return field_name(self.path)


def field_name(param: str) -> str:
    """`prompt[0][0]` → `prompt`, `logit_bias[...]` / `logit_bias.5` → `logit_bias`."""
    return re.sub(r"\[[^\]]*\]", "", param).removesuffix(f".{_DICT_KEY}")


def numeric_fields(struct: type[msgspec.Struct]) -> list[NumericField]:
    """Every numeric field `struct` declares, nested Structs, arrays and dicts included."""
    return list(_walk(mi.type_info(struct), (), ()))


def _walk(
    info: mi.Type, steps: tuple[Step, ...], tags: tuple[tuple[int, str, str], ...]
) -> Iterator[NumericField]:
    match info:
        case mi.IntType():
            yield NumericField(steps, "int", tags)
        case mi.FloatType():
            yield NumericField(steps, "float", tags)
        case mi.UnionType(types=types):
            seen: set[str] = set()
            for member in types:
                for found in _walk(member, steps, tags):
                    if found.path not in seen:  # `int | tuple[int]` at one place: once
                        seen.add(found.path)
                        yield found
        case mi.VarTupleType(item_type=item) | mi.ListType(item_type=item):
            yield from _walk(item, (*steps, 0), tags)
        case mi.DictType(value_type=value):
            yield from _walk(value, (*steps, _DICT_KEY), tags)
        case mi.StructType(fields=fields, tag_field=tag_field, tag=tag):
            inner = tags
            if tag_field is not None and steps:
                inner = (*tags, (len(steps), tag_field, str(tag)))
            for field in fields:
                yield from _walk(field.type, (*steps, field.encode_name), inner)
        case _:
            return


def body_with(base: dict[str, Any], field: NumericField, number: str) -> bytes:
    """`base` with the raw JSON number text `number` at `field`'s path (containers made on the
    way, each tagged Struct given its tag)."""
    body: Any = json.loads(json.dumps(base))
    excluded = EXCLUSIVE.get(str(field.steps[0]))
    if excluded is not None:
        body.pop(excluded, None)
    tags = {depth: (name, tag) for depth, name, tag in field.tags}
    holder = body
    for depth, step in enumerate(field.steps[:-1], start=1):
        following = field.steps[depth]
        fresh: Any = [] if isinstance(following, int) else {}
        if isinstance(step, int):
            if not holder:
                holder.append(fresh)
            holder = holder[0]
        else:
            current = holder.get(step)
            if not isinstance(current, type(fresh)) or isinstance(current, list):
                current = fresh  # a list is replaced: its first item is where the value goes
                holder[step] = current
            holder = current
        if depth in tags:
            name, tag = tags[depth]
            holder[name] = tag
    last = field.steps[-1]
    if isinstance(last, int):
        holder.append(_PLACEHOLDER)
    else:
        holder[last] = _PLACEHOLDER
    return json.dumps(body).replace(json.dumps(_PLACEHOLDER), number).encode()


# The hostile numbers of issue 45, as JSON texts. Every one is a 400 naming the field, on every
# numeric field (`NEGATIVE` only where a negative is meaningless: `NEGATIVE_ALLOWED`).
BEYOND_INT64: Final = str(2**63)
BELOW_INT64: Final = str(-(2**63) - 1)
HUGE_INT: Final = "9" * 300  # issue 45's bodies: far beyond int64, still a float
BEYOND_FLOAT: Final = "1" + "0" * 400  # an integer no float holds
FLOAT_OVERFLOW: Final = "1e400"
NEGATIVE_OVERFLOW: Final = "-1e400"
BOOL: Final = "true"
NEGATIVE: Final = "-1"

ALWAYS_REFUSED: Final[dict[Kind, tuple[str, ...]]] = {
    "int": (BEYOND_INT64, BELOW_INT64, HUGE_INT, BEYOND_FLOAT, FLOAT_OVERFLOW, BOOL),
    # An integer beyond int64 is an ordinary float (2**63 = 9.2e18): only its range decides.
    "float": (BEYOND_FLOAT, FLOAT_OVERFLOW, NEGATIVE_OVERFLOW, BOOL),
}
NEGATIVE_ALLOWED: Final = frozenset(
    {
        "seed",  # vLLM takes any int64 seed
        "sampling_params.seed",
        "sampling_params.sampling_seed",
        "top_k",  # -1: every token
        "sampling_params.top_k",
        "presence_penalty",  # [-2, 2]
        "sampling_params.presence_penalty",
        "frequency_penalty",
        "sampling_params.frequency_penalty",
        "logit_bias",  # [-100, 100]
        "truncate_prompt_tokens",  # -1: the model's context length
        "logprob_start_len",  # -1: SGLang's default
    }
)
"""Numeric fields where -1 means something; every other one refuses a negative."""


def hostile_numbers(field: NumericField) -> tuple[str, ...]:
    """The numbers `field` must refuse with a 400 naming it."""
    numbers = ALWAYS_REFUSED[field.kind]
    if field.name not in NEGATIVE_ALLOWED:
        numbers += (NEGATIVE,)
    return numbers
