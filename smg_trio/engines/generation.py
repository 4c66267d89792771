"""Pure. Scripted token generation for the reference engines: what a request says next and when it
stops. Shared by every reference engine (ZMQ today, gRPC later); it knows no wire.

A request's tokens depend only on its prompt ids, its sampling key (greedy, or a seed) and the
engine-wide `TokenSource`, so concurrent requests, batch composition and step timing never
change what a request generates. Modes:

- `random`: a uniformly drawn ordinary token (no special or added tokens) per position; with
  probability `eos_probability` one of the model's EOS ids instead, so EOS stops get exercised.
  Each draw is a function of the sampling key and every id before it (prompt and output), as a
  real model's greedy choice is of its context: a request re-sent with its output so far
  appended to its prompt goes on exactly as it would have (mid-stream migration,
  docs/resilience.md §9). The context is kept as a polynomial hash updated once per token.
- `echo`: the prompt's ordinary tokens back, cycling (a chat prompt's template tokens, EOS among
  them, are skipped so an echo does not stop on the first `<|im_end|>`); never emits EOS.
- `replay`: a text's token ids, then the model's first EOS id, cycling. Useful for stop strings.

Stops follow vLLM's `check_stop` order (docs/wire.md §A.6.1): an EOS id, then a stop token id (its id
is the stop reason), then the length caps (`max_model_len` on prompt + output, `max_tokens` on
output). `min_tokens` is honoured the way vLLM's sampler does it: while the output is shorter, the
stop ids are masked, i.e. a drawn one is replaced by another ordinary token.
"""

from __future__ import annotations

import enum
import hashlib
import random
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, assert_never

from smg_trio.engines.token_rules import NO_TOKEN_RULES, TokenRules

DEFAULT_EOS_PROBABILITY: Final = 0.02
# The context hash: ids as digits of base 2**32, modulo the Mersenne prime 2**61 - 1, so hashing a
# whole prompt at once (`context_hash`) equals extending it one id at a time (`extend_hash`).
_HASH_MODULUS: Final = (1 << 61) - 1
_MASK_64: Final = (1 << 64) - 1


class Mode(enum.StrEnum):
    RANDOM = "random"
    ECHO = "echo"
    REPLAY = "replay"


class Vocabulary(Protocol):
    """What `TokenSource.for_tokenizer` needs; `smg_trio.model.hf_tokenizer.ModelTokenizer` has it."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def special_token_ids(self) -> frozenset[int]: ...

    @property
    def is_byte_level(self) -> bool: ...

    def token_bytes(self, token_id: int) -> bytes | None: ...

    def id_to_token(self, token_id: int) -> str | None: ...


def ordinary_token_ids(vocabulary: Vocabulary) -> tuple[int, ...]:
    """Ids a model can say without surprising a detokenizer: no special or added tokens.

    Byte-level vocabularies know exactly which ids are ordinary (`token_bytes` is None for
    added tokens); otherwise every id with a token string that is not special counts.
    """
    ids = range(vocabulary.vocab_size)
    if vocabulary.is_byte_level:
        return tuple(i for i in ids if vocabulary.token_bytes(i) is not None)
    specials = vocabulary.special_token_ids
    return tuple(i for i in ids if i not in specials and vocabulary.id_to_token(i) is not None)


@dataclass(frozen=True)
class TokenSource:
    """The engine-wide fake model: what any request may say. Immutable, shared by all requests.

    `eos_ids` are the model's EOS ids, in the order the model folder lists them (the first one
    ends a replay); they are what `random` mode emits now and then.
    """

    mode: Mode
    ordinary_ids: tuple[int, ...]
    eos_ids: tuple[int, ...] = ()
    eos_probability: float = DEFAULT_EOS_PROBABILITY
    replay_ids: tuple[int, ...] = ()
    # The replay's answer (after any reasoning block) is JSON: under a JSON constraint the
    # scripted model keeps it, as a model already answering in JSON would (engines.choice_script).
    answers_in_json: bool = False
    _ordinary_set: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.ordinary_ids:
            raise ValueError("the vocabulary has no ordinary tokens to generate")
        if not 0.0 <= self.eos_probability <= 1.0:
            raise ValueError(f"eos_probability must be in [0, 1], got {self.eos_probability}")
        if self.mode is Mode.REPLAY and not self.replay_ids:
            raise ValueError("replay mode needs a text that encodes to at least one token")
        object.__setattr__(self, "_ordinary_set", frozenset(self.ordinary_ids))

    def is_ordinary(self, token_id: int) -> bool:
        return token_id in self._ordinary_set


@dataclass(frozen=True)
class Greedy:
    """Temperature 0 (or top_k 1): one fixed stream per prompt."""


@dataclass(frozen=True)
class Seeded:
    """Sampling with this seed (explicit, or drawn once per request by the engine)."""

    seed: int


SamplingKey = Greedy | Seeded


@dataclass(frozen=True)
class StopRules:
    """When a request ends, in an engine's own terms (the wire adapters fill it in).

    `eos_ids` end with STOP and no stop reason (vLLM: `_eos_token_id` only; TokenSpeed: the
    model's EOS ids unless ignore_eos); `stop_token_ids` end with STOP and the id as stop reason.
    While fewer than `min_tokens` were generated, `eos_ids`, `stop_token_ids` and `masked_ids`
    (vLLM's `_all_stop_token_ids`) are never generated.
    """

    max_tokens: int
    max_model_len: int
    eos_ids: frozenset[int] = frozenset()
    stop_token_ids: frozenset[int] = frozenset()
    min_tokens: int = 0
    masked_ids: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")

    @property
    def min_tokens_mask(self) -> frozenset[int]:
        return self.eos_ids | self.stop_token_ids | self.masked_ids


@dataclass(frozen=True)
class EosStop:
    token_id: int


@dataclass(frozen=True)
class TokenStop:
    """A `stop_token_ids` hit: vLLM reports the id as `stop_reason`."""

    token_id: int


@dataclass(frozen=True)
class LengthStop:
    """`max_tokens` generated, or prompt + output reached `max_model_len`."""


Finish = EosStop | TokenStop | LengthStop


@dataclass(frozen=True)
class Step:
    token_id: int
    finish: Finish | None


def check_stop(
    rules: StopRules, token_id: int, *, num_tokens: int, num_output: int
) -> Finish | None:
    """vLLM's order: EOS id, stop token id, then the length caps."""
    if token_id in rules.eos_ids:
        return EosStop(token_id)
    if token_id in rules.stop_token_ids:
        return TokenStop(token_id)
    if num_tokens >= rules.max_model_len or num_output >= rules.max_tokens:
        return LengthStop()
    return None


def stream_seed(prompt_ids: Sequence[int], key: SamplingKey) -> int:
    """A 64-bit seed from (sampling key, prompt ids): the only inputs a stream depends on."""
    match key:
        case Greedy():
            tag = b"greedy"
        case Seeded(seed):
            tag = b"seed:%d" % seed
        case _:
            assert_never(key)
    digest = hashlib.blake2b(tag + b"|", digest_size=8)
    digest.update(array("I", prompt_ids).tobytes())
    return int.from_bytes(digest.digest(), "little")


def context_hash(ids: Sequence[int]) -> int:
    """The polynomial hash of `ids` (see `_HASH_MODULUS`), computed in one pass of C code."""
    packed = array("I", ids)
    if sys.byteorder == "little":
        packed.byteswap()
    return int.from_bytes(packed.tobytes(), "big") % _HASH_MODULUS


def extend_hash(state: int, token_id: int) -> int:
    """`context_hash(ids + [token_id])` from `context_hash(ids)`."""
    return ((state << 32) + token_id) % _HASH_MODULUS


def mix64(value: int) -> int:
    """A 64-bit avalanche of `value` (the splitmix64 finalizer)."""
    value &= _MASK_64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK_64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK_64
    return value ^ (value >> 31)


class Generation:
    """One request's generation state. Call `step()` until it returns a finish."""

    def __init__(
        self,
        source: TokenSource,
        prompt_ids: Sequence[int],
        key: SamplingKey,
        rules: StopRules,
        token_rules: TokenRules = NO_TOKEN_RULES,
    ) -> None:
        self.source = source
        self.prompt_len = len(prompt_ids)
        self.rules = rules
        self.token_rules = token_rules
        self.output_ids: list[int] = []
        self.finish: Finish | None = None
        self._key = stream_seed((), key)
        self._context = context_hash(prompt_ids)  # prompt and output so far (random mode)
        self._script = self._script_for(prompt_ids)

    def _script_for(self, prompt_ids: Sequence[int]) -> tuple[int, ...]:
        """The fixed token cycle of echo/replay; empty for random mode (or an echo of nothing)."""
        match self.source.mode:
            case Mode.RANDOM:
                return ()
            case Mode.ECHO:
                return tuple(t for t in prompt_ids if self.source.is_ordinary(t))
            case Mode.REPLAY:
                return self.source.replay_ids + self.source.eos_ids[:1]
            case _:
                assert_never(self.source.mode)

    def step(self) -> Step:
        if self.finish is not None:
            raise RuntimeError("step() after the generation finished")
        position = len(self.output_ids)
        draw = mix64(self._context ^ self._key)
        token_id = self._next_token(position, draw)
        masked = self.rules.min_tokens_mask if position < self.rules.min_tokens else frozenset()
        if not self.token_rules.trivial:
            token_id = self.token_rules.choose(
                token_id, self.output_ids, masked, random.Random(draw), self.source.ordinary_ids
            )
        elif token_id in masked:
            token_id = self._unmasked_token(masked, random.Random(draw))
        self.output_ids.append(token_id)
        self._context = extend_hash(self._context, token_id)
        self.finish = check_stop(
            self.rules,
            token_id,
            num_tokens=self.prompt_len + len(self.output_ids),
            num_output=len(self.output_ids),
        )
        return Step(token_id, self.finish)

    def _next_token(self, position: int, draw: int) -> int:
        """Echo and replay: the script's next id; random: from `draw` (64 bits of the context)."""
        if self._script:
            return self._script[position % len(self._script)]
        source = self.source
        if source.eos_ids and (draw >> 11) * 2.0**-53 < source.eos_probability:
            return source.eos_ids[mix64(draw + 1) % len(source.eos_ids)]
        return source.ordinary_ids[mix64(draw + 2) % len(source.ordinary_ids)]

    def _unmasked_token(self, masked: frozenset[int], rng: random.Random) -> int:
        ordinary = self.source.ordinary_ids
        for _ in range(16):  # masks are tiny next to a vocabulary: this almost never loops
            token_id = rng.choice(ordinary)
            if token_id not in masked:
                return token_id
        allowed = [t for t in ordinary if t not in masked]
        if not allowed:
            raise ValueError("min_tokens masks every ordinary token")
        return rng.choice(allowed)
