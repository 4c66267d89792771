"""Pure. What each engine runtime takes over each wire, as data: one row per (runtime, wire).

The table is the only place a (runtime, wire) pair exists: a pair without a row has no adapter
(`require_adapter`). finalize (`core/finalize.py`) shapes a request by reading its worker's
row, and `core/unsupported.py` refuses, with a 400 naming the parameter, what the row says the
engine cannot take; nothing else decides per runtime what a request may ask. docs/request-fields.md
§1 states the same per column, and `tests/e2e/test_request_fields.py` checks doc against table.
The stop rules behind the first fields: docs/stops-and-finalize.md §1.2.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from smg_trio.errors import UnsupportedRuntime
from smg_trio.neutral.media import ImageInput
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.neutral.sampling import ConstraintKind


class StringStops(enum.Enum):
    """What becomes of the client's stop strings on the engine's request. The router's stop
    scanner enforces every one of them whatever this says (docs/stops-and-finalize.md §3)."""

    ENGINE = "engine"  # sent: the engine matches them too
    TOKEN_IDS = "token_ids"  # stripped; each one-token string becomes a stop id (no min_tokens)
    REFUSED = "refused"  # the wire has no field for them: a 400 naming `stop`


class BadWords(enum.Enum):
    """How `bad_words` reach the engine (docs/request-fields.md §4)."""

    TOKEN_IDS = "token_ids"  # tokenized by the gateway as vLLM's frontend does
    SPELLINGS = "spellings"  # the words (and vLLM's leading-space forms): the engine tokenizes
    REFUSED = "refused"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DefaultMaxTokens:
    """An engine that requires max_tokens: what an unset one becomes, as smg sends it."""

    completion: int
    other: int  # chat-templated endpoints and /generate


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capabilities:
    """One runtime over one wire. Every field is stated in every row (no defaults)."""

    runtime: Runtime
    wire: Wire
    # Stops and EOS (docs/stops-and-finalize.md §1.2).
    string_stops: StringStops
    stop_ids_on_every_endpoint: bool  # False: the engine gets stop ids on completions only
    folds_eos: bool  # the engine has no tokenizer: the gateway sends it the EOS ids
    dedups_stop_ids: bool
    chat_skips_special_tokens: bool  # chat-templated endpoints force skip_special_tokens on
    stop_text_only_on_completion: bool  # no_stop_trim reaches the engine on completions only
    default_max_tokens: DefaultMaxTokens | None  # None: an unset max_tokens stays unset
    # Structured outputs (docs/request-fields.md §2): the kinds the engine spells natively. JSON
    # mode becomes a schema where it is not native; none at all is a 400.
    constraints: frozenset[ConstraintKind]
    # What a choice becomes (core/constraint_forms.py): CHOICE where the engine's own front end
    # converts it, GRAMMAR (vLLM's EBNF) for vLLM's EngineCore, REGEX (an alternation) elsewhere.
    choice_as: ConstraintKind
    constraint_after_reasoning: bool  # the wire says where a grammar starts (`reasoning_ended`)
    # Logprobs and sampling limits.
    top_logprobs: bool  # False: only the sampled token's logprob (`logprobs` 0)
    prompt_logprobs: bool
    top_k_below: int | None  # a finite top_k must be below this (None: no engine limit)
    max_repetition_penalty: float | None
    greedy_n: bool  # False: n > 1 below temperature 1e-5 is a 400 naming `n` (vLLM's rule)
    # Fields beyond sampling (docs/request-fields.md §4).
    logit_bias: bool
    allowed_token_ids: bool
    bad_words: BadWords
    min_tokens: bool
    # Deployment (docs/processes.md §4, docs/wire.md §B.7).
    one_engine_per_worker: bool
    one_gateway_process: bool  # the engine answers one client: no --processes above 1
    # Images in the prompt (docs/images.md): what the wire carries of one, if anything.
    images: ImageInput

    def accepts(self, kind: ConstraintKind) -> bool:
        """Whether a constraint of `kind` reaches this engine, natively or rewritten."""
        native = self.constraints
        match kind:
            case ConstraintKind.CHOICE:
                return self.choice_as in native
            case ConstraintKind.JSON_OBJECT:
                return kind in native or ConstraintKind.JSON_SCHEMA in native
            case _:
                return kind in native


_GRAMMARS: Final = frozenset(
    {ConstraintKind.JSON_SCHEMA, ConstraintKind.REGEX, ConstraintKind.GRAMMAR}
)


_ROWS: Final = (
    Capabilities(
        runtime=Runtime.VLLM,
        wire=Wire.ZMQ,
        string_stops=StringStops.TOKEN_IDS,
        stop_ids_on_every_endpoint=True,
        folds_eos=True,
        dedups_stop_ids=True,
        chat_skips_special_tokens=False,
        stop_text_only_on_completion=False,
        default_max_tokens=None,
        constraints=frozenset(ConstraintKind) - {ConstraintKind.CHOICE},  # its backends: none
        choice_as=ConstraintKind.GRAMMAR,  # as vLLM's front end writes it
        constraint_after_reasoning=True,
        top_logprobs=True,
        prompt_logprobs=True,
        top_k_below=None,
        max_repetition_penalty=None,
        greedy_n=False,
        logit_bias=True,
        allowed_token_ids=True,
        bad_words=BadWords.TOKEN_IDS,
        min_tokens=True,
        one_engine_per_worker=False,
        one_gateway_process=False,
        images=ImageInput.MM_FEATURES,
    ),
    Capabilities(
        runtime=Runtime.VLLM,
        wire=Wire.GRPC,
        string_stops=StringStops.ENGINE,
        stop_ids_on_every_endpoint=True,
        folds_eos=False,
        dedups_stop_ids=False,
        chat_skips_special_tokens=True,
        stop_text_only_on_completion=True,
        default_max_tokens=None,
        constraints=frozenset(ConstraintKind),
        choice_as=ConstraintKind.CHOICE,  # the servicer runs vLLM's input processor
        constraint_after_reasoning=False,
        top_logprobs=True,
        prompt_logprobs=False,
        top_k_below=None,
        max_repetition_penalty=None,
        greedy_n=False,
        logit_bias=True,
        allowed_token_ids=False,
        bad_words=BadWords.REFUSED,
        min_tokens=True,
        one_engine_per_worker=False,
        one_gateway_process=False,
        # processed tensors in GenerateRequest.mm_inputs, or media_refs to a worker that
        # processes images itself (docs/images.md §5.1)
        images=ImageInput.MM_INPUTS,
    ),
    Capabilities(
        runtime=Runtime.SGLANG,
        wire=Wire.GRPC,
        string_stops=StringStops.TOKEN_IDS,
        stop_ids_on_every_endpoint=True,
        folds_eos=False,
        dedups_stop_ids=False,
        chat_skips_special_tokens=True,
        stop_text_only_on_completion=False,
        default_max_tokens=None,
        constraints=_GRAMMARS,
        choice_as=ConstraintKind.REGEX,
        constraint_after_reasoning=False,
        top_logprobs=True,
        prompt_logprobs=False,
        top_k_below=None,
        max_repetition_penalty=None,
        greedy_n=True,
        logit_bias=True,
        allowed_token_ids=False,
        bad_words=BadWords.REFUSED,
        min_tokens=True,
        one_engine_per_worker=False,
        one_gateway_process=False,
        images=ImageInput.MM_INPUTS,  # processed tensors in GenerateRequest.mm_inputs
    ),
    Capabilities(
        runtime=Runtime.TOKENSPEED,
        wire=Wire.ZMQ,
        string_stops=StringStops.TOKEN_IDS,
        stop_ids_on_every_endpoint=True,
        folds_eos=False,
        dedups_stop_ids=True,
        chat_skips_special_tokens=False,
        stop_text_only_on_completion=False,
        default_max_tokens=None,
        constraints=_GRAMMARS,
        choice_as=ConstraintKind.REGEX,
        constraint_after_reasoning=False,
        top_logprobs=False,
        prompt_logprobs=False,
        top_k_below=128,  # its fused top-k kernel
        max_repetition_penalty=2.0,
        greedy_n=True,
        logit_bias=True,
        allowed_token_ids=False,
        bad_words=BadWords.REFUSED,
        min_tokens=True,
        one_engine_per_worker=True,
        one_gateway_process=True,
        images=ImageInput.REFUSED,
    ),
    Capabilities(
        runtime=Runtime.TOKENSPEED,
        wire=Wire.GRPC,
        string_stops=StringStops.ENGINE,
        stop_ids_on_every_endpoint=True,
        folds_eos=False,
        dedups_stop_ids=False,
        chat_skips_special_tokens=False,
        stop_text_only_on_completion=False,
        default_max_tokens=None,
        constraints=_GRAMMARS,
        choice_as=ConstraintKind.REGEX,
        constraint_after_reasoning=False,
        top_logprobs=True,
        prompt_logprobs=False,
        top_k_below=None,
        max_repetition_penalty=None,
        greedy_n=True,
        logit_bias=True,
        allowed_token_ids=False,
        bad_words=BadWords.REFUSED,
        min_tokens=True,
        one_engine_per_worker=False,
        one_gateway_process=False,
        images=ImageInput.REFUSED,
    ),
    Capabilities(
        runtime=Runtime.TRTLLM,
        wire=Wire.GRPC,
        string_stops=StringStops.ENGINE,
        stop_ids_on_every_endpoint=False,  # its chat/generate builders send words only
        folds_eos=False,
        dedups_stop_ids=False,
        chat_skips_special_tokens=False,
        stop_text_only_on_completion=True,
        default_max_tokens=DefaultMaxTokens(completion=16, other=2048),
        constraints=_GRAMMARS | {ConstraintKind.JSON_OBJECT},
        choice_as=ConstraintKind.REGEX,
        constraint_after_reasoning=False,
        top_logprobs=True,
        prompt_logprobs=False,
        top_k_below=None,
        max_repetition_penalty=None,
        greedy_n=True,
        logit_bias=False,  # it takes only a dense embedding_bias
        allowed_token_ids=False,
        bad_words=BadWords.SPELLINGS,
        min_tokens=True,
        one_engine_per_worker=False,
        one_gateway_process=False,
        images=ImageInput.REFUSED,
    ),
    Capabilities(
        runtime=Runtime.MLX,
        wire=Wire.GRPC,
        string_stops=StringStops.REFUSED,
        stop_ids_on_every_endpoint=True,
        folds_eos=False,
        dedups_stop_ids=False,
        chat_skips_special_tokens=False,
        stop_text_only_on_completion=False,
        default_max_tokens=None,
        constraints=frozenset(),
        choice_as=ConstraintKind.REGEX,
        constraint_after_reasoning=False,
        top_logprobs=True,
        prompt_logprobs=False,
        top_k_below=None,
        max_repetition_penalty=None,
        greedy_n=True,
        logit_bias=True,
        allowed_token_ids=False,
        bad_words=BadWords.REFUSED,
        min_tokens=False,
        one_engine_per_worker=False,
        one_gateway_process=False,
        images=ImageInput.REFUSED,
    ),
)
_TABLE: Final[Mapping[tuple[Runtime, Wire], Capabilities]] = MappingProxyType(
    {(row.runtime, row.wire): row for row in _ROWS}
)
SUPPORTED_PAIRS: Final = frozenset(_TABLE)


def require_adapter(runtime: Runtime, wire: Wire) -> None:
    """Raise UnsupportedRuntime unless we have an adapter for this runtime over this wire."""
    capabilities_of(runtime, wire)


def capabilities_of(runtime: Runtime, wire: Wire) -> Capabilities:
    """`runtime` over `wire`'s row; UnsupportedRuntime when there is none."""
    if runtime is Runtime.UNSPECIFIED:
        raise UnsupportedRuntime(
            f"the engine runtime of a {wire.value} worker must be declared "
            "(sglang, vllm, tokenspeed, mlx or trtllm); it is never guessed"
        )
    row = _TABLE.get((runtime, wire))
    if row is None:
        supported = sorted(r.value for r, w in _TABLE if w is wire)
        raise UnsupportedRuntime(
            f"runtime {runtime.value!r} has no adapter for the {wire.value} wire; "
            f"over {wire.value} we support: {', '.join(supported)}"
        )
    return row
