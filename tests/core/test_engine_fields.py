"""finalize's per-runtime rules for request fields beyond stops (docs/request-fields.md §1-§2)."""

from __future__ import annotations

import re

import msgspec
import pytest

from smg_trio.core.constraint_forms import JSON_OBJECT_SCHEMA, choice_regex
from smg_trio.core.engine_fields import bad_word_spellings, bad_words_token_ids
from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import SUPPORTED_PAIRS
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import ConstraintKind, SamplingParams, StructuredConstraint
from tests.core.mock_tokenizers import WordMockTokenizer

T1 = WordMockTokenizer()
PAIRS = sorted(SUPPORTED_PAIRS, key=lambda pair: (pair[0].value, pair[1].value))


def engine_sampling(runtime: Runtime, wire: Wire, **fields: object) -> SamplingParams:
    plan = GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.CHAT,
        model="m",
        prompt_ids=(1, 2),
        sampling=msgspec.convert({"max_tokens": 8, **fields}, SamplingParams),
    )
    target = WorkerTarget(runtime=runtime, wire=wire)
    (request,) = finalize(plan, target, T1).requests
    return request.sampling


def constraint(kind: ConstraintKind, **fields: object) -> dict[str, object]:
    value = StructuredConstraint(kind=kind, param="guided_x", **fields)  # type: ignore[arg-type]
    built: dict[str, object] = msgspec.to_builtins(value)
    return built


CHOICE = constraint(ConstraintKind.CHOICE, choices=("yes", "a.b"))
JSON_MODE = constraint(ConstraintKind.JSON_OBJECT)


@pytest.mark.parametrize(("runtime", "wire"), PAIRS)
def test_a_constraint_reaches_every_engine_with_grammar_support_or_is_a_400(
    runtime: Runtime, wire: Wire
) -> None:
    if runtime is Runtime.MLX:
        with pytest.raises(ClientError) as info:
            engine_sampling(runtime, wire, constraint=CHOICE)
        assert info.value.param == "guided_x"
        return
    choice = engine_sampling(runtime, wire, constraint=CHOICE).constraint
    json_mode = engine_sampling(runtime, wire, constraint=JSON_MODE).constraint
    assert choice is not None
    assert json_mode is not None
    if runtime is Runtime.VLLM:  # JSON mode is native
        assert json_mode.kind is ConstraintKind.JSON_OBJECT
    if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ):  # vLLM's front end: a grammar
        assert (choice.kind, choice.text) == (ConstraintKind.GRAMMAR, 'root ::= "yes" | "a.b"')
        return
    if (runtime, wire) == (Runtime.VLLM, Wire.GRPC):  # the servicer's vLLM converts it
        assert (choice.kind, choice.choices) == (ConstraintKind.CHOICE, ("yes", "a.b"))
        return
    assert (choice.kind, choice.text) == (ConstraintKind.REGEX, r"(yes|a\.b)")
    if runtime is Runtime.TRTLLM:  # GUIDE_TYPE_JSON
        assert json_mode.kind is ConstraintKind.JSON_OBJECT
    else:
        assert (json_mode.kind, json_mode.text) == (ConstraintKind.JSON_SCHEMA, JSON_OBJECT_SCHEMA)


def test_choice_regex_matches_exactly_the_choices() -> None:
    choices = ("a+b", "(x)", "c d", "e|f", "[g]", "h\\i")
    pattern = re.compile(choice_regex(choices))
    for choice in choices:
        assert pattern.fullmatch(choice)
    assert not pattern.fullmatch("ab")
    assert not pattern.fullmatch("e")


@pytest.mark.parametrize(("runtime", "wire"), PAIRS)
def test_logit_bias_is_carried_or_refused(runtime: Runtime, wire: Wire) -> None:
    if runtime is Runtime.TRTLLM:
        with pytest.raises(ClientError, match="logit_bias") as info:
            engine_sampling(runtime, wire, logit_bias=[[5, 100.0]])
        assert info.value.param == "logit_bias"
        return
    assert engine_sampling(runtime, wire, logit_bias=[[5, 100.0]]).logit_bias == ((5, 100.0),)


@pytest.mark.parametrize(("runtime", "wire"), PAIRS)
def test_allowed_token_ids_only_on_vllm_zmq(runtime: Runtime, wire: Wire) -> None:
    if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ):
        assert engine_sampling(runtime, wire, allowed_token_ids=[3]).allowed_token_ids == (3,)
        return
    with pytest.raises(ClientError) as info:
        engine_sampling(runtime, wire, allowed_token_ids=[3])
    assert info.value.param == "allowed_token_ids"


@pytest.mark.parametrize(("runtime", "wire"), PAIRS)
def test_bad_words_tokenized_for_vllm_zmq_passed_to_trtllm_else_refused(
    runtime: Runtime, wire: Wire
) -> None:
    if (runtime, wire) == (Runtime.VLLM, Wire.ZMQ):
        s = engine_sampling(runtime, wire, bad_words=["Hello world"])
        assert (s.bad_words, s.bad_words_token_ids) == ((), ((1, 2),))
    elif runtime is Runtime.TRTLLM:
        # TRT-LLM tokenizes the words itself: it gets the spellings vLLM's rule bans.
        assert engine_sampling(runtime, wire, bad_words=["  Hello"]).bad_words == ("Hello",)
    else:
        with pytest.raises(ClientError) as info:
            engine_sampling(runtime, wire, bad_words=["hello"])
        assert info.value.param == "bad_words"


@pytest.mark.parametrize(("runtime", "wire"), PAIRS)
def test_min_tokens_everywhere_but_mlx(runtime: Runtime, wire: Wire) -> None:
    if runtime is Runtime.MLX:
        with pytest.raises(ClientError) as info:
            engine_sampling(runtime, wire, min_tokens=2)
        assert info.value.param == "min_tokens"
    else:
        assert engine_sampling(runtime, wire, min_tokens=2).min_tokens == 2


@pytest.mark.parametrize(
    ("runtime", "wire"),
    [(Runtime.VLLM, Wire.ZMQ), (Runtime.SGLANG, Wire.GRPC), (Runtime.TOKENSPEED, Wire.ZMQ)],
)
def test_min_tokens_keeps_single_token_stop_strings_off_the_engine(
    runtime: Runtime, wire: Wire
) -> None:
    """The engine masks stop ids below min_tokens: converting "Hello" would change the text."""
    plan = GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.COMPLETION,
        model="m",
        prompt_ids=(1, 2),
        sampling=SamplingParams(max_tokens=8, stop=("Hello",), min_tokens=3, ignore_eos=True),
    )
    finalized = finalize(plan, WorkerTarget(runtime=runtime, wire=wire), T1)
    assert finalized.requests[0].sampling.stop == ()  # the router's scanner alone matches it
    assert 1 not in finalized.requests[0].sampling.stop_token_ids
    without = msgspec.structs.replace(plan.sampling, min_tokens=0)
    plan0 = msgspec.structs.replace(plan, sampling=without)
    converted = finalize(plan0, WorkerTarget(runtime=runtime, wire=wire), T1)
    assert 1 in converted.requests[0].sampling.stop_token_ids


class SpacePrefixTokenizer(WordMockTokenizer):
    """Encodes a leading space as its own first token (id 7), like a byte-level BPE would."""

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        ids = super().encode(text, add_special_tokens=add_special_tokens)
        return [7, *ids[1:]] if text.startswith(" ") and ids else ids


def test_bad_words_add_the_space_prefixed_variant_only_when_it_differs_in_first_token() -> None:
    assert bad_words_token_ids(("Hello",), T1) == ((1,),)
    assert bad_words_token_ids((" Hello",), SpacePrefixTokenizer()) == ((1,), (7,))
    assert bad_word_spellings((" Hello",), SpacePrefixTokenizer()) == ("Hello", " Hello")
    with pytest.raises(ClientError, match="no tokens"):
        bad_words_token_ids(("zzz-unknown",), T1)
