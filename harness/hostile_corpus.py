"""Pure. A seeded corpus of hostile request bodies and WebSocket frames (docs/limits.md §5).

Every item starts from a valid request of one endpoint and is bent by one or two mutations
drawn from what an attacker (or a buggy client) sends: cut-off or bit-flipped JSON, values of
the wrong type, huge or negative numbers, deep nesting (in a known field and in an unknown
one), long strings, junk bytes, non-objects, and (issue 45) numbers no field holds on every
numeric field the request Structs declare. The same seed always gives the same items, so a
failure names its seed and index. Valid bodies ask for at most two tokens: a mutation that
leaves a request valid costs the engine almost nothing.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from harness.numeric_fields import (
    BELOW_INT64,
    BEYOND_FLOAT,
    BEYOND_INT64,
    BOOL,
    CHAT,
    COMPLETIONS,
    COUNT_TOKENS,
    DETOKENIZE,
    ENDPOINTS,
    FLOAT_OVERFLOW,
    GENERATE,
    HUGE_INT,
    MESSAGES,
    NEGATIVE,
    NEGATIVE_OVERFLOW,
    RESPONSES,
    TOKENIZE,
    body_with,
    numeric_fields,
)

POST_PATHS: Final = (
    CHAT,
    COMPLETIONS,
    GENERATE,
    TOKENIZE,
    DETOKENIZE,
    RESPONSES,
    MESSAGES,
    COUNT_TOKENS,
)
GET_PATHS: Final = ("/v1/models", "/health", "/v1/ws", "/nowhere")
DEEP: Final = 5000
HUGE_NUMBER_SHARE: Final = 0.15  # of the bodies: issue 45's class (`huge_number`)
_LENGTHS: Final = frozenset({"max_tokens", "max_output_tokens"})

VALID: Final[dict[str, tuple[dict[str, Any], ...]]] = {
    CHAT: (
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        {
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            "max_tokens": 2,
            "stream": True,
            "stop": ["x"],
            "temperature": 0.5,
            "logprobs": True,
            "top_logprobs": 2,
        },
    ),
    COMPLETIONS: (
        {"prompt": "once upon", "max_tokens": 2},
        {"prompt": [1, 2, 3], "max_tokens": 2, "stream": True, "echo": True, "logprobs": 1},
        {"prompt": ["a", "b"], "max_tokens": 1, "n": 2, "truncate_prompt_tokens": 3},
    ),
    GENERATE: (
        {"text": "hello", "sampling_params": {"max_new_tokens": 2}},
        {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 1}, "stream": True},
    ),
    TOKENIZE: (
        {"prompt": "hello world"},
        {"messages": [{"role": "user", "content": "hi"}], "return_token_strs": True},
    ),
    DETOKENIZE: ({"tokens": [5, 6, 7]},),
    RESPONSES: (
        {"input": "hi", "max_output_tokens": 2},
        {
            "input": [{"role": "user", "content": "hi"}],
            "instructions": "be brief",
            "max_output_tokens": 2,
            "stream": True,
            "store": False,
            "temperature": 0.5,
        },
    ),
    MESSAGES: (
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        {
            "system": "s",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "u"}]}],
            "max_tokens": 2,
            "stream": True,
            "stop_sequences": ["x"],
        },
    ),
    COUNT_TOKENS: ({"messages": [{"role": "user", "content": "hi"}]},),
}

_ODD_VALUES: Final[tuple[Any, ...]] = (
    None,
    True,
    -1,
    0,
    2**70,
    -(2**70),
    1e308,
    "",
    "x" * 300,
    "\u0000\ud7ff\U0001f600",
    [],
    {},
    [None],
    {"": None},
    [[[]]],
)


@dataclass(frozen=True)
class HostileBody:
    path: str
    body: bytes
    huge_number: bool = False  # of issue 45's class (`huge_number`)


def _deep(rng: random.Random) -> str:
    opener = rng.choice("[{")
    if opener == "[":
        return "[" * DEEP + "]" * DEEP
    return '{"a":' * DEEP + "1" + "}" * DEEP


def _mutate_value(value: dict[str, Any], rng: random.Random) -> str:
    value = json.loads(json.dumps(value))
    # Never a length: a null one asks for the whole context, a long (valid) generation.
    key = rng.choice([*(k for k in value if k not in _LENGTHS), "unknown_field", "prompt", "n"])
    value[key] = rng.choice(_ODD_VALUES)
    return json.dumps(value)


def _text_mutations() -> tuple[Callable[[str, random.Random], str], ...]:
    def cut(text: str, rng: random.Random) -> str:
        return text[: rng.randrange(len(text) + 1)]

    def flip(text: str, rng: random.Random) -> str:
        at = rng.randrange(len(text))
        return text[:at] + rng.choice('{}[]":,\\x0 \u00ff') + text[at + 1 :]

    def deep_unknown(text: str, rng: random.Random) -> str:
        return text[:1] + '"zz":' + _deep(rng) + "," + text[1:] if text.startswith("{") else text

    def deep_known(text: str, rng: random.Random) -> str:
        key = rng.choice(["messages", "prompt", "stop", "tokens", "sampling_params", "tools"])
        return text[:1] + json.dumps(key) + ":" + _deep(rng) + "," + text[1:]

    def junk(text: str, rng: random.Random) -> str:
        return "".join(chr(rng.randrange(0x20, 0x250)) for _ in range(rng.randrange(1, 64)))

    def not_object(text: str, rng: random.Random) -> str:
        return rng.choice(["[]", "null", "1", '"s"', "", "[" + text + "]", text + text])

    def long_string(text: str, rng: random.Random) -> str:
        return text[:1] + '"junk":"' + "y" * rng.randrange(1000, 100_000) + '",' + text[1:]

    return (cut, flip, deep_unknown, deep_known, junk, not_object, long_string)


_MUTATIONS: Final = _text_mutations()


# Issue 45's class: a number no field holds (beyond int64, beyond float range, an overflowing
# float, a bool, a negative; CPython's 4300-digit str() limit too), on a numeric field the
# request Structs declare (harness/numeric_fields.py), or in a field of free JSON (template
# kwargs, a tool's schema, an unknown field) where nothing checks numbers.
_HUGE_NUMBERS: Final = (
    BEYOND_INT64,
    BELOW_INT64,
    HUGE_INT,
    BEYOND_FLOAT,
    FLOAT_OVERFLOW,
    NEGATIVE_OVERFLOW,
    "-" + HUGE_INT,
    "9" * 5000,
    "1E+99999",
    "1e-400",
    "-0",
    BOOL,
    NEGATIVE,
)
_FREE_JSON: Final = (
    '"chat_template_kwargs":{"n":%s}',
    '"tools":[{"type":"function","function":{"name":"f","parameters":{"maximum":%s}}}]',
    '"zz_unknown":[%s]',
    '"metadata":{"k":%s}',
)


def huge_number(path: str, rng: random.Random) -> str:
    """A valid body of `path` with one number no field holds (issue 45)."""
    number = rng.choice(_HUGE_NUMBERS)
    struct, base = ENDPOINTS[path]
    fields = numeric_fields(struct)
    if fields and rng.random() < 0.8:
        return body_with(base, rng.choice(fields), number).decode()
    text = json.dumps(base)
    return text[:1] + rng.choice(_FREE_JSON) % number + "," + text[1:]


def hostile_text(path: str, rng: random.Random) -> str:
    """One mutated body of `path` (POST paths only)."""
    return hostile_item(path, rng)[0]


def hostile_item(path: str, rng: random.Random) -> tuple[str, bool]:
    """One mutated body of `path`, and whether it is of issue 45's class (`huge_number`)."""
    if rng.random() < HUGE_NUMBER_SHARE:
        return huge_number(path, rng), True
    return _mutated(path, rng), False


def _mutated(path: str, rng: random.Random) -> str:
    text = _mutate_value(rng.choice(VALID[path]), rng) if rng.random() < 0.4 else None
    if text is None or rng.random() < 0.5:
        base = text or json.dumps(rng.choice(VALID[path]))
        text = rng.choice(_MUTATIONS)(base, rng)
    return text


def hostile_bodies(seed: int, count: int) -> Iterator[HostileBody]:
    rng = random.Random(seed)
    for _ in range(count):
        path = rng.choice(POST_PATHS)
        text, huge = hostile_item(path, rng)
        yield HostileBody(path, text.encode("utf-8", "surrogatepass"), huge)


def frame_id(index: int) -> str:
    """The id `hostile_frames` gives its frame number `index`."""
    return f"f{index}"


def expected_id(frame: str, index: int) -> str | None:
    """The id frame number `index` still names after its mutations, which the server must end
    with exactly one terminal frame (README.md "WebSocket protocol"): the frame is a JSON object
    with that id and is no cancel, or its text still opens with the request's type and id."""
    stream_id = frame_id(index)
    if frame.startswith(f'{{"type":"request","id":"{stream_id}"'):
        return stream_id
    try:
        message = json.loads(frame)
    except (ValueError, RecursionError):  # not JSON, or too deep for Python's decoder
        return None
    if isinstance(message, dict) and message.get("id") == stream_id:
        return None if message.get("type") == "cancel" else stream_id
    return None


def hostile_frames(seed: int, count: int) -> Iterator[str]:
    """WebSocket text frames: a mutated request envelope, or a request with a mutated body."""
    rng = random.Random(seed)
    for index in range(count):
        path = rng.choice(POST_PATHS)
        body = hostile_text(path, rng)
        head = f'{{"type":"request","id":"{frame_id(index)}","path":{json.dumps(path)}'
        frame = f'{head},"body":{body}}}'
        if rng.random() < 0.3:
            frame = rng.choice(_MUTATIONS)(frame, rng)
        yield frame.encode("utf-8", "replace").decode("utf-8")
