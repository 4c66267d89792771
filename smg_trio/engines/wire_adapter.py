"""Pure. The seam between the reference engines' batching loop and their wires: what an engine
serves (`EngineModel`), what an input frame means (`Command`), what one step says about one
request (`Emission`), the engine's load and counters, and the `WireAdapter` protocol that the
vLLM and TokenSpeed engines implement.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeAlias

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.engines.generation import Finish, Generation, TokenSource
from smg_trio.neutral.events import TokenLogprob, TopLogprob
from smg_trio.wire.vllm_zmq_outputs import PrefixCacheStats
from smg_trio.wire.zmq_transport import EngineAddresses

BLOCK_SIZE = 16  # KV block size in tokens; only reported (registration map, load), never enforced
SENT_ON_FIRST_TOKEN = 1


@dataclass(frozen=True)
class EngineModel:
    """What the fake model is: its vocabulary, context, EOS ids and reported identity."""

    source: TokenSource
    vocab_size: int
    max_model_len: int
    eos_ids: tuple[int, ...]  # the model folder's EOS ids (TokenSpeed stops on these itself)
    served_name: str
    dtype: str = "bfloat16"
    num_gpu_blocks: int = 0
    tokenizer: TokenizerLike | None = None  # spells a choice constraint (engines.choice_script)
    reasoning_end_ids: tuple[int, ...] = ()  # vLLM's --reasoning-parser (engines.reasoning_gate)
    hidden_size: int = 64  # the pooler's embedding size (engines.pooling; config.json's)
    num_labels: int = 2  # the classifier's classes (config.json's id2label)
    model_type: str = ""  # config.json's: the image kwargs' field config (engines.vllm_mm_fields)


@dataclass
class ActiveRequest:
    """One admitted request and what it has not yet been told."""

    request_id: str
    client_index: int  # index into INIT's outputs (TokenSpeed: always 0)
    generation: Generation
    logprobs: int | None = None  # None: not asked; vLLM: top-k width; TokenSpeed: 0
    emit_interval: int = 1  # send tokens every N generated (the first and the last always)
    unsent: list[int] = field(default_factory=list)
    emitted: bool = False  # vLLM attaches prefill stats to a request's first output
    aborted: bool = False  # set when an ABORT removes it; a step that still sees it is a bug
    # The prompt, kept only by wires whose engine has a prefix cache (engines.prefix_cache).
    prompt_ids: tuple[int, ...] = ()
    cached_tokens: int = 0  # prompt tokens its prefix cache held when it was admitted
    cache_creation_tokens: int = 0  # prompt tokens it wrote to the prefix cache
    # A pooling request's result (engines.pooling): it finishes with it in its first step.
    pooled: tuple[float, ...] | None = None

    def should_emit(self, finished: bool) -> bool:
        count = len(self.generation.output_ids)
        return (
            finished
            or count == SENT_ON_FIRST_TOKEN
            or (self.emit_interval > 0 and count % self.emit_interval == 0)
        )


@dataclass(frozen=True)
class Add:
    request: ActiveRequest
    # The request's sampling fields as decoded from the wire, kept for the test-only
    # `smg_trio_received` utility (engines.batching) so a test can see what arrived.
    received: dict[str, Any] | None = None


@dataclass(frozen=True)
class Reject:
    """A request the engine refuses after decoding it: it gets a terminal error/abort output."""

    request_id: str
    client_index: int
    message: str
    # vLLM's image cache miss: the `data: nil` keys the engine does not hold (sent back in
    # the output's `mm_cache_miss_hashes`, so the frontend resends them with data).
    cache_miss: tuple[str, ...] = ()


@dataclass(frozen=True)
class Abort:
    request_ids: tuple[str, ...]


@dataclass(frozen=True)
class Utility:
    client_index: int
    call_id: int
    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Ignored:
    """Nothing to do: a frame this engine drops (logged with `reason`)."""

    reason: str


Command = Add | Reject | Abort | Utility | Ignored


@dataclass(frozen=True)
class Aborted:
    """Ended by the engine itself (shutdown), not by a client ABORT (those are silent)."""


@dataclass(frozen=True)
class Rejected:
    message: str
    cache_miss: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pooled:
    """A pooling request finished: its tensor, flat."""

    values: tuple[float, ...]


Outcome = Finish | Aborted | Rejected | Pooled


@dataclass(frozen=True)
class Emission:
    """One request's part of a step's output message."""

    request_id: str
    client_index: int
    new_token_ids: tuple[int, ...]
    outcome: Outcome | None  # None: still running
    prompt_tokens: int
    completion_tokens: int  # cumulative
    logprobs: int | None = None
    first: bool = False
    cached_tokens: int = 0
    cache_creation_tokens: int = 0


OutputMessage: TypeAlias = tuple[int, bytes | list[bytes]]
"""One output message for a client (its index): one frame, or a payload and its aux frames."""


@dataclass(frozen=True)
class Load:
    running: int
    waiting: int
    step_counter: int
    used_blocks: int
    total_blocks: int
    # Set for a scheduler step's messages only (not a rejection's or shutdown's): what the
    # prefix cache saw since the previous step, all zero without a cache. vLLM sends it in
    # the step's scheduler stats (docs/wire.md §A.7.4).
    prefix_cache_stats: PrefixCacheStats | None = None

    @property
    def kv_cache_usage(self) -> float:
        return min(1.0, self.used_blocks / self.total_blocks) if self.total_blocks else 0.0


@dataclass
class Counters:
    """What tests read through the `smg_trio_counters` utility call. Gauges and running totals."""

    requests_active: int = 0
    requests_waiting: int = 0
    requests_added: int = 0
    requests_finished: int = 0  # ended by a stop rule (EOS, stop id, length)
    requests_rejected: int = 0
    requests_aborted: int = 0  # active or waiting requests an ABORT removed
    abort_ids_received: int = 0  # every id named in an ABORT, known or not
    tokens_generated: int = 0
    tokens_after_abort: int = 0  # tokens generated for a request after its ABORT: must stay 0
    steps: int = 0
    output_messages: int = 0
    utility_calls: int = 0

    def snapshot(self) -> dict[str, int]:
        return asdict(self)


class WireAdapter(Protocol):
    """One engine wire: handshake payloads, input parsing, output encoding."""

    @property
    def ready_before_registration(self) -> bool:
        """TokenSpeed sends READY right after INIT; vLLM registers first, then says READY."""
        ...

    @property
    def handshake_timeout_seconds(self) -> float: ...

    @property
    def sentinel_on_shutdown(self) -> bool:
        """TokenSpeed sends ENGINE_CORE_DEAD on shutdown; vLLM aborts in-flight requests."""
        ...

    def hello(self) -> bytes: ...

    def ready(self) -> bytes: ...

    def registration(self) -> bytes: ...

    def addresses(self, addresses: EngineAddresses) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The (inputs, outputs) this engine dials, from INIT's addresses."""
        ...

    def parse(self, frames: Sequence[bytes]) -> Command:
        """Frames as the engine's DEALER receives them: `[type byte, payload, aux...]`."""
        ...

    def encode_step(self, emissions: Sequence[Emission], load: Load) -> Sequence[OutputMessage]:
        """(output index, payload) messages for one step; none when nothing is due."""
        ...

    def encode_utility_reply(self, call_id: int, failure: str | None, value: Any) -> bytes: ...

    def reset_media(self) -> bool:
        """vLLM's `reset_mm_cache` utility: forget every image item held (True when done)."""
        ...


RUNNER_UP_LOGPROB = -1.5  # each runner-up 1.5 nats less likely than the one before it


def sampled_logprob(token_id: int) -> float:
    """The fake model's logprob of the token it sampled: fairly sure, in [-1.05, -0.05],
    different per token and the same every time (a multiplicative hash of the id), so a test
    can tell positions apart and the reference engines agree with each other."""
    return -0.05 - ((token_id * 2654435761) % 1000) / 1000


PROMPT_TOKEN_RANK = 2  # the fake model ranks each prompt token second: one runner-up beats it


def prompt_position_logprobs(model: EngineModel, token_id: int, width: int) -> TokenLogprob:
    """The fake model's logprobs at one prompt position (vLLM's prompt logprobs): the prompt
    token ranked `PROMPT_TOKEN_RANK`, below one runner-up and above the rest; the top `width`
    candidates in order. Deterministic, like `sampled_logprob`, and distinct from it."""
    logprob = sampled_logprob(token_id) + RUNNER_UP_LOGPROB
    first, *rest = runner_up_ids(model, token_id, max(1, width - 1))
    ranked = [(first, logprob - RUNNER_UP_LOGPROB), (token_id, logprob)]
    ranked += [(other, logprob + RUNNER_UP_LOGPROB * (i + 1)) for i, other in enumerate(rest)]
    top = tuple(TopLogprob(token_id=t, logprob=lp) for t, lp in ranked[:width])
    return TokenLogprob(token_id=token_id, logprob=logprob, rank=PROMPT_TOKEN_RANK, top=top)


def prompt_problem(prompt_ids: Sequence[int], model: EngineModel) -> str | None:
    """Why an engine cannot take this prompt, or None (checks both engines make before sampling)."""
    if not prompt_ids:
        return "the prompt has no tokens"
    if len(prompt_ids) >= model.max_model_len:
        return f"the prompt has {len(prompt_ids)} tokens; max_model_len is {model.max_model_len}"
    for token_id in prompt_ids:
        if not 0 <= token_id < model.vocab_size:
            return f"prompt token id {token_id} is outside the vocabulary [0, {model.vocab_size})"
    return None


def runner_up_ids(model: EngineModel, token_id: int, count: int) -> list[int]:
    """`count` ordinary ids other than `token_id`, deterministic: the fake top-k candidates."""
    ordinary = model.source.ordinary_ids
    start = token_id % len(ordinary)
    candidates = (ordinary[(start + offset) % len(ordinary)] for offset in range(len(ordinary)))
    return list(itertools.islice((c for c in candidates if c != token_id), count))
