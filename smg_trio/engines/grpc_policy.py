"""Pure. The seam between the reference gRPC engines' shared core (`grpc_engine`,
`grpc_scheduler`) and their five runtimes (`grpc_vllm`, `grpc_sglang`, `grpc_tokenspeed`,
`grpc_mlx`, `grpc_trtllm`): what a runtime policy is, what an admitted request is (`JobSpec`),
what one step tells a request's stream (`Delivery`), how requests end, and the rules several
runtimes share (stop rules, sampling keys, matched stops, fake logprobs).

A runtime policy is data plus pure functions: it turns that runtime's protobuf request into a
`JobSpec` or a `Rejected` (a gRPC status), shapes chunk and complete messages, and answers the
management RPCs from an `EngineView` snapshot. The only per-request state it creates is a
request's stop-string matcher (`JobSpec.stops`); everything else stateful lives in the core.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, assert_never

from google.protobuf.message import Message

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.engines.choice_script import choice_script, constraint_choices
from smg_trio.engines.generation import (
    EosStop,
    Finish,
    Greedy,
    LengthStop,
    SamplingKey,
    Seeded,
    StopRules,
    TokenStop,
)
from smg_trio.engines.grpc_stops import StopMatcher, StringStop
from smg_trio.engines.token_rules import NO_TOKEN_RULES, TokenRules
from smg_trio.engines.wire_adapter import (
    RUNNER_UP_LOGPROB,
    EngineModel,
    prompt_problem,
    runner_up_ids,
    sampled_logprob,
)
from smg_trio.wire.grpc_responses import GrpcStatus

MAX_LOGPROBS: Final = 20  # vLLM's cap; "all" (-1) means this many here
_SEEDS: Final = random.Random()  # unseeded sampling draws one seed per request from here


@dataclass(frozen=True)
class ServedModel:
    """What a reference gRPC engine serves: the fake model, its tokenizer and folder."""

    engine: EngineModel
    tokenizer: TokenizerLike
    path: Path
    config: Mapping[str, Any]  # config.json
    max_batch: int
    pooling: bool = False
    mm_processor: bool = False
    """vLLM gRPC with `--mm-processor inprocess`: takes `media_refs` (grpc_vllm_media_refs)."""
    """Served as a pooling model (`--runner pooling`): it answers Embed and refuses Generate;
    a generative model the other way round (docs/pooling.md §5)."""

    def config_int(self, key: str, default: int = 0) -> int:
        value = self.config.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    @property
    def architectures(self) -> list[str]:
        value = self.config.get("architectures")
        return [a for a in value if isinstance(a, str)] if isinstance(value, list) else []


@dataclass(frozen=True)
class AbortedByRpc:
    """Ended by the runtime's Abort RPC (a cancelled stream ends with no message at all)."""


Ending = Finish | StringStop | AbortedByRpc


@dataclass(frozen=True)
class JobSpec:
    """One admitted Generate request, in engine-neutral terms."""

    request_id: str
    prompt_ids: tuple[int, ...]
    key: SamplingKey
    rules: StopRules
    stream: bool
    stops: StopMatcher | None = None
    trim_matched_stop: bool = False  # drop the tokens of the matched stop from the output
    logprobs: int | None = None  # None: not asked; else top candidates per token (0: none)
    token_rules: TokenRules = NO_TOKEN_RULES  # logit_bias, bad words (engines.token_rules)


@dataclass(frozen=True)
class Delivery:
    """What one step (or an Abort RPC) tells a request's stream."""

    new_ids: tuple[int, ...]  # new output tokens, as the wire shows them
    generated: int  # tokens generated so far, a trimmed stop included
    ending: Ending | None = None
    output_ids: tuple[int, ...] = ()  # at an ending: the whole output as the wire shows it


@dataclass(frozen=True)
class EngineView:
    """A snapshot of the engine for the management RPCs."""

    model: ServedModel
    running: int
    waiting: int
    used_blocks: int
    started_at: float  # wall clock, seconds since the epoch
    now: float
    serving: bool  # False once shutting down

    @property
    def kv_usage(self) -> float:
        total = self.model.engine.num_gpu_blocks
        return min(1.0, self.used_blocks / total) if total else 0.0


class AbortEnding(enum.Enum):
    """What a Generate stream sees when the Abort RPC ends its request."""

    COMPLETE = "complete"  # a last (empty) chunk when streaming, then a complete message
    SILENT = "silent"  # the stream just ends (status OK, no complete)
    STATUS = "status"  # the stream ends with gRPC status INTERNAL


class Rejected(Exception):
    """A request the engine refuses: the Generate call ends with this gRPC status."""

    def __init__(self, status: GrpcStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


UnaryAnswer = Callable[[Any, EngineView], Message]


@dataclass(frozen=True)
class PoolSpec:
    """One admitted Embed request: pooled at the step that takes it into the batch."""

    request_id: str
    prompt_ids: tuple[int, ...]


@dataclass(frozen=True)
class EmbedPolicy:
    """How a runtime's service answers Embed (docs/wire.md §C.8)."""

    admit: Callable[[Any, ServedModel], PoolSpec]  # raises Rejected
    reply: Callable[[PoolSpec, tuple[float, ...]], Message]


@dataclass(frozen=True)
class RuntimePolicy:
    """One runtime's service: its generated grpclib base class and its behaviour."""

    engine_name: str  # the CLI name, e.g. "vllm-grpc"
    description: str
    service_base: type[Any]  # the generated `...Base` (its abstract methods are the RPCs)
    admit: Callable[[Any, ServedModel], JobSpec]  # raises Rejected
    chunk: Callable[[ServedModel, JobSpec, Delivery], Message]
    complete: Callable[[ServedModel, JobSpec, Delivery], Message]
    abort_targets: Callable[[Any], Sequence[str]]
    abort_reply: Callable[[Any, int], Message]  # (request, how many requests it ended)
    abort_ending: AbortEnding
    unary: Mapping[str, UnaryAnswer]  # RPC name -> answer; unlisted ones are UNIMPLEMENTED
    embed: EmbedPolicy | None = None  # None: Embed is UNIMPLEMENTED


# ---- rules several runtimes share ---------------------------------------------------------


def invalid(message: str) -> Rejected:
    return Rejected(GrpcStatus.INVALID_ARGUMENT, message)


def checked_prompt(prompt_ids: Sequence[int], model: ServedModel) -> tuple[int, ...]:
    problem = prompt_problem(prompt_ids, model.engine)
    if problem is not None:
        raise invalid(problem)
    return tuple(prompt_ids)


def stop_rules(
    model: ServedModel,
    prompt_len: int,
    *,
    max_tokens: int | None,
    min_tokens: int = 0,
    stop_token_ids: Sequence[int] = (),
    ignore_eos: bool = False,
    extra_eos_as_stop_ids: bool = False,
) -> StopRules:
    """The engine's stop rules; `max_tokens=None` means the rest of the context.

    With `extra_eos_as_stop_ids` (vLLM, TRT-LLM) only the model's first EOS id is EOS and the
    others (generation_config's) become stop ids, so they are reported as the matched id; else
    every EOS id is EOS. `ignore_eos` drops both.
    """
    eos = () if ignore_eos else model.engine.eos_ids
    primary, extra = (eos[:1], eos[1:]) if extra_eos_as_stop_ids else (eos, ())
    room = model.engine.max_model_len - prompt_len
    try:
        return StopRules(
            max_tokens=room if max_tokens is None else max_tokens,
            max_model_len=model.engine.max_model_len,
            eos_ids=frozenset(primary),
            stop_token_ids=frozenset((*stop_token_ids, *extra)),
            min_tokens=min_tokens,
            masked_ids=frozenset(model.engine.eos_ids),
        )
    except ValueError as exc:
        raise invalid(str(exc)) from exc


def choice_tokens(
    model: ServedModel,
    choice: Sequence[str] | None,
    regex: str | None,
    *,
    ignore_eos: bool,
    json_schema: str | None = None,
    json_object: bool = False,
) -> tuple[int, ...]:
    """What a choice or JSON constraint makes the fake model say (engines.choice_script)."""
    end = () if ignore_eos else model.engine.eos_ids[:1]
    allowed = constraint_choices(
        choice,
        regex,
        json_schema=json_schema,
        json_object=json_object,
        answers_in_json=model.engine.source.answers_in_json,
    )
    return choice_script(allowed, model.tokenizer, end)


def int_keyed(logit_bias: Mapping[str, float]) -> dict[int, float]:
    """A logit_bias map with string token-id keys (SGLang, TokenSpeed) by integer id."""
    try:
        return {int(key): value for key, value in logit_bias.items()}
    except ValueError as exc:
        raise invalid(f"logit_bias keys must be token ids: {exc}") from exc


def sglang_family_rules(model: ServedModel, params: Any) -> TokenRules:
    """SGLang and its fork TokenSpeed: string-keyed logit_bias and a `constraint` oneof."""
    kind = params.WhichOneof("constraint")
    return TokenRules.of(
        logit_bias=int_keyed(params.logit_bias),
        script=choice_tokens(
            model,
            None,
            params.regex if kind == "regex" else None,
            ignore_eos=params.ignore_eos,
            json_schema=params.json_schema if kind == "json_schema" else None,
        ),
    )


def sglang_family_logprobs(request: Any) -> int | None:
    """The top-k asked through `return_logprob` / `top_logprobs_num` (SGLang, TokenSpeed)."""
    return min(request.top_logprobs_num, MAX_LOGPROBS) if request.return_logprob else None


def sampling_key(*, greedy: bool, seed: int | None) -> SamplingKey:
    if greedy:
        return Greedy()
    return Seeded(_SEEDS.getrandbits(64) if seed is None else seed)


def logprobs_width(asked: int | None) -> int | None:
    """vLLM-style `logprobs`: None = not asked, -1 = "all" (capped), else at most the cap."""
    if asked is None:
        return None
    if asked < -1:
        raise invalid(f"logprobs must be -1 or at least 0, got {asked}")
    return MAX_LOGPROBS if asked == -1 else min(asked, MAX_LOGPROBS)


def trimmed_length(ending: Ending | None) -> int:
    """How many output tokens at the end spell the matched stop."""
    match ending:
        case EosStop() | TokenStop():
            return 1
        case StringStop(token_count=count):
            return count
        case None | LengthStop() | AbortedByRpc():
            return 0
        case _:
            assert_never(ending)


def finish_reason(ending: Ending, *, aborted: str = "abort") -> str:
    match ending:
        case EosStop() | TokenStop() | StringStop():
            return "stop"
        case LengthStop():
            return "length"
        case AbortedByRpc():
            return aborted
        case _:
            assert_never(ending)


def matched_stop(ending: Ending | None, *, eos_reports_id: bool) -> int | str | None:
    """The stop that ended the request: a token id, a stop string, or None.

    SGLang-style engines report an EOS hit as its id (`eos_reports_id`); vLLM and TRT-LLM
    report nothing for EOS.
    """
    match ending:
        case TokenStop(token_id):
            return token_id
        case EosStop(token_id):
            return token_id if eos_reports_id else None
        case StringStop(text=text):
            return text
        case None | LengthStop() | AbortedByRpc():
            return None
        case _:
            assert_never(ending)


def matched_fields(ending: Ending | None, *, eos_reports_id: bool) -> dict[str, Any]:
    """The `matched_stop` oneof as constructor keywords (matched_token_id / matched_stop_str)."""
    match matched_stop(ending, eos_reports_id=eos_reports_id):
        case int() as token_id:
            return {"matched_token_id": token_id}
        case str() as text:
            return {"matched_stop_str": text}
        case _:
            return {}


def position_logprobs(model: ServedModel, token_id: int, width: int) -> list[tuple[int, float]]:
    """The fake top-`width` candidates at one position, the sampled token first."""
    others = runner_up_ids(model.engine, token_id, max(0, width - 1))
    sampled = sampled_logprob(token_id)
    top = [(token_id, sampled)][:width]
    return top + [
        (other, sampled + RUNNER_UP_LOGPROB * (rank + 1)) for rank, other in enumerate(others)
    ]


def columns_logprobs(
    output_cls: type[Any], top_cls: type[Any], model: ServedModel, ids: Sequence[int], width: int
) -> Any:
    """An `OutputLogProbs` (parallel columns) of vLLM/SGLang/TokenSpeed/MLX for `ids`."""
    tops = []
    if width > 0:
        for token_id in ids:
            pairs = position_logprobs(model, token_id, width)
            tops.append(top_cls(token_ids=[t for t, _ in pairs], values=[v for _, v in pairs]))
    return output_cls(
        token_ids=list(ids), token_logprobs=[sampled_logprob(t) for t in ids], top_logprobs=tops
    )
