"""Pure. The engine-neutral request: `SamplingParams`, `EngineRequest` (one engine request per
choice) and `EosIds` (a model folder's EOS ids as vLLM's EngineCore needs them).

This is the only place a sampling field is declared. `core.prepare` fills it from the client's
request; `core.finalize` rewrites it per (runtime, wire) so that it says exactly what the ENGINE
is asked; each wire has one builder that renames these fields onto its engine's layout and
checks only that each value fits its field's bytes. Adding a field means: declare it here,
carry it in the builders of the wires whose engine takes it, validate it, test it.
"""

from __future__ import annotations

import enum

import msgspec

from smg_trio.neutral.media import MediaFeature


class ConstraintKind(enum.StrEnum):
    """What a structured-output constraint says the text must be (vLLM's StructuredOutputsParams
    keys; docs/request-fields.md §2)."""

    JSON_SCHEMA = "json"  # `text` is the JSON schema, serialized
    JSON_OBJECT = "json_object"  # any JSON object; `text` is empty
    REGEX = "regex"
    CHOICE = "choice"  # exactly one of `choices`
    GRAMMAR = "grammar"  # an EBNF/GBNF grammar, as vLLM's `grammar` and SGLang's `ebnf`


class StructuredConstraint(msgspec.Struct, frozen=True, kw_only=True):
    """The one constraint a request puts on its output, whichever field the client used.

    `param` is that field as the client spelled it (`response_format`, `structured_outputs`,
    `guided_json`, ...): a runtime that cannot honour the constraint names it in its 400.

    `after_reasoning` says where the constraint starts (docs/tools-and-reasoning.md §5):
    None when the model has no reasoning parser (the engine decides, as vLLM's EngineCore does
    from the prompt); False when reasoning is off for this request (constrained from the first
    token); True when the engine must leave the reasoning free and constrain only what follows
    its end (vLLM's `reasoning_ended: false`; finalize refuses it where no wire carries that).
    """

    kind: ConstraintKind
    param: str
    text: str = ""
    choices: tuple[str, ...] = ()
    after_reasoning: bool | None = None


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """Engine-neutral sampling. `None` means "the engine's default" for that knob.

    Before `finalize` it is what the client asked. After, every field is what the ENGINE is
    asked; what the client sees is governed by the router's `StopSpec`, built before finalize:
    - `stop`/`stop_token_ids`: strings stripped where the engine takes none, single-token stops
      converted, EOS folded (vLLM over ZMQ), ids dropped where the engine must not get them.
    - `skip_special_tokens`: forced on where the engine detokenizes chat for nobody.
    - `no_stop_trim`: the engine keeps the matched stop in its output (vLLM's
      include_stop_str_in_output, TRT-LLM's include_stop_token_in_output, SGLang's and
      TokenSpeed's no_stop_trim).
    - `max_tokens`: set where the engine requires one (TRT-LLM).
    - `eos_token_id`, `all_stop_token_ids`: only for an engine without a tokenizer (vLLM over
      ZMQ): the EOS it stops on without a stop reason, and every id it masks below min_tokens.
    - `constraint`: rewritten to a kind the engine's grammar support takes (a choice becomes a
      regex alternation, JSON mode a permissive schema) where it has no native spelling.
    - `bad_words_token_ids`: only for vLLM over ZMQ, whose EngineCore cannot tokenize
      `bad_words`; finalize tokenizes them as vLLM's frontend does and clears `bad_words`.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0 or -1: all tokens
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    max_tokens: int | None = None  # None: the rest of the context window
    min_tokens: int = 0
    logprobs: int | None = None  # top-k logprobs per sampled token; None = none
    prompt_logprobs: int | None = None  # top-k logprobs per prompt position; None = none
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    eos_token_id: int | None = None
    all_stop_token_ids: tuple[int, ...] = ()
    constraint: StructuredConstraint | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias in [-100, 100])
    allowed_token_ids: tuple[int, ...] | None = None  # None: every token
    bad_words: tuple[str, ...] = ()
    bad_words_token_ids: tuple[tuple[int, ...], ...] = ()


class EngineRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One engine request (one choice), finalized for its worker. Wire builders encode it."""

    request_id: str  # the client-facing id of this choice; backends add a unique suffix
    choice_index: int
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    media: tuple[MediaFeature, ...] = ()  # the prompt's images, by position (neutral/media.py)


class EosIds(msgspec.Struct, frozen=True):
    """A model folder's EOS ids (docs/stops-and-finalize.md §2.2): `extra` excludes `primary`."""

    primary: int | None = None
    extra: tuple[int, ...] = ()
