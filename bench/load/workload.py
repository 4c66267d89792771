"""Pure. What a load run sends: arrivals (fixed concurrency or Poisson), prompt and output length
ranges, stop strings, and the requests themselves, drawn from a seeded generator.

Prompts are made of words that the model's tokenizer encodes as exactly one token each (a
leading space included), so a prompt of N words is N prompt tokens on every server that uses
that tokenizer, without sending token ids (smg's /v1/completions takes text only). Random words
per request keep prefix caches from helping one request with another's prompt.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from smg_trio.core.tokenizer import TokenizerLike

Endpoint = Literal["completions", "chat"]
ENDPOINT_PATHS: Final[dict[Endpoint, str]] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}
MIN_PROMPT_WORDS: Final = 64  # a vocabulary with fewer usable words gives repetitive prompts
_WORD: Final = re.compile(r" [A-Za-z]{2,}")


@dataclass(frozen=True)
class FixedConcurrency:
    """`streams` requests in flight at all times, each stream sending the next when one ends
    (after `think_time_s`: with a pause longer than an engine step, each request finds the
    engine idle, so its TTFT is not the wait for a step already under way)."""

    streams: int
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        if self.streams < 1 or self.think_time_s < 0:
            raise ValueError(f"need streams >= 1 and think time >= 0, got {self}")

    @property
    def label(self) -> str:
        return f"c={self.streams}"


@dataclass(frozen=True)
class PoissonArrivals:
    """Open loop: requests start at exponential intervals (mean 1/rate), whatever is in flight,
    up to `max_in_flight` (beyond which arrivals wait, and the run reports it)."""

    rate_per_s: float
    max_in_flight: int = 1024

    def __post_init__(self) -> None:
        if not self.rate_per_s > 0 or self.max_in_flight < 1:
            raise ValueError("rate_per_s must be positive and max_in_flight at least 1")

    @property
    def label(self) -> str:
        return f"rate={self.rate_per_s:g}/s"


Arrival = FixedConcurrency | PoissonArrivals


@dataclass(frozen=True)
class LengthRange:
    """Token counts drawn uniformly from [low, high] (low == high: a fixed length)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"need 1 <= low <= high, got {self.low}-{self.high}")

    @classmethod
    def parse(cls, text: str) -> LengthRange:
        """`128` (fixed) or `64-256` (uniform)."""
        low, sep, high = text.partition("-")
        try:
            return cls(int(low), int(high) if sep else int(low))
        except ValueError as exc:
            raise ValueError(f"a length is N or LOW-HIGH, got {text!r}: {exc}") from None

    def draw(self, rng: random.Random) -> int:
        return self.low if self.low == self.high else rng.randint(self.low, self.high)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class Workload:
    arrival: Arrival
    requests: int  # the count bound: at most this many requests are sent
    prompt_tokens: LengthRange
    output_tokens: LengthRange
    time_cap_s: float  # the time bound: requests still running then are cancelled
    endpoint: Endpoint = "completions"
    stops: tuple[str, ...] = ()
    ignore_eos: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.requests < 1 or not self.time_cap_s > 0:
            raise ValueError("a workload needs at least one request and a positive time cap")


@dataclass(frozen=True)
class RequestSpec:
    index: int
    prompt: str
    prompt_tokens: int  # as drawn: the prompt's token count without special tokens
    max_tokens: int


def prompt_words(tokenizer: TokenizerLike, vocab_size: int) -> tuple[str, ...]:
    """Words (" word") that encode to exactly one ordinary token."""
    words: list[str] = []
    special = tokenizer.special_token_ids
    for token_id in range(vocab_size):
        if token_id in special:
            continue
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        if _WORD.fullmatch(text) and tokenizer.encode(text, add_special_tokens=False) == [token_id]:
            words.append(text)
    if len(words) < MIN_PROMPT_WORDS:
        raise ValueError(f"the tokenizer has only {len(words)} one-token words")
    return tuple(words)


def request_specs(workload: Workload, words: Sequence[str]) -> list[RequestSpec]:
    """Every request of the workload, in sending order, reproducible from its seed."""
    rng = random.Random(workload.seed)
    specs = []
    for index in range(workload.requests):
        prompt_tokens = workload.prompt_tokens.draw(rng)
        prompt = "".join(rng.choices(words, k=prompt_tokens))
        specs.append(RequestSpec(index, prompt, prompt_tokens, workload.output_tokens.draw(rng)))
    return specs


def request_body(
    spec: RequestSpec, *, model: str, endpoint: Endpoint, stops: Sequence[str], ignore_eos: bool
) -> dict[str, Any]:
    """The OpenAI request body: streamed, usage included, greedy, `max_tokens` from the spec."""
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    body.update(
        max_tokens=spec.max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    if ignore_eos:
        body["ignore_eos"] = True
    if stops:
        body["stop"] = list(stops)
    return body


def first_stop_position(
    tokenizer: TokenizerLike, output_ids: Sequence[int], stops: Sequence[str]
) -> int | None:
    """How many output tokens it takes for the text to contain a stop string (None: never)."""
    for count in range(1, len(output_ids) + 1):
        text = tokenizer.decode(output_ids[:count], skip_special_tokens=True)
        if any(stop in text for stop in stops):
            return count
    return None
