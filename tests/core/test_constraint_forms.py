"""A structured-output constraint in each engine's form (docs/request-fields.md §2): what vLLM
0.32's front end does before its EngineCore (a choice becomes its EBNF grammar, a schema nested
past 64 levels is refused), and the rewrites for the engines without a native spelling."""

from __future__ import annotations

import pytest

from smg_trio.core.constraint_forms import (
    JSON_OBJECT_SCHEMA,
    MAX_SCHEMA_NESTING,
    check_schema_nesting,
    choice_grammar,
    engine_constraint,
)
from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import SUPPORTED_PAIRS, capabilities_of
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.neutral.sampling import ConstraintKind, StructuredConstraint

PAIRS = sorted(SUPPORTED_PAIRS - {(Runtime.MLX, Wire.GRPC)}, key=str)  # MLX: no grammar at all
SCHEMA = '{"type":"string"}'


def nested(levels: int) -> str:
    """A schema whose objects nest `levels` deep (the root is level 1)."""
    return '{"not":' * (levels - 1) + "{}" + "}" * (levels - 1)


@pytest.mark.parametrize(
    ("choices", "grammar"),
    [
        (["yes", "no"], 'root ::= "yes" | "no"'),
        # vLLM 0.32's choice_as_grammar on the same list (its output, copied as data).
        (
            ['a"b', "c\\d", "e\nf", "\r\t", "\x01\x7f", "ü", "|"],
            'root ::= "a\\"b" | "c\\\\d" | "e\\nf" | "\\r\\t" | "\\u0001\\u007f" | "ü" | "|"',
        ),
    ],
)
def test_choice_grammar_is_vllms(choices: list[str], grammar: str) -> None:
    assert choice_grammar(choices) == grammar


# (runtime, wire) → the kind each client kind reaches the engine as.
FORMS = {
    (Runtime.VLLM, Wire.ZMQ): {
        ConstraintKind.CHOICE: ConstraintKind.GRAMMAR,
        ConstraintKind.JSON_OBJECT: ConstraintKind.JSON_OBJECT,
    },
    (Runtime.VLLM, Wire.GRPC): {
        ConstraintKind.CHOICE: ConstraintKind.CHOICE,
        ConstraintKind.JSON_OBJECT: ConstraintKind.JSON_OBJECT,
    },
    (Runtime.TRTLLM, Wire.GRPC): {
        ConstraintKind.CHOICE: ConstraintKind.REGEX,
        ConstraintKind.JSON_OBJECT: ConstraintKind.JSON_OBJECT,
    },
}
ELSEWHERE = {
    ConstraintKind.CHOICE: ConstraintKind.REGEX,
    ConstraintKind.JSON_OBJECT: ConstraintKind.JSON_SCHEMA,
}


@pytest.mark.parametrize(("runtime", "wire"), PAIRS)
@pytest.mark.parametrize("kind", list(ConstraintKind))
def test_every_kind_reaches_every_grammar_engine_in_a_kind_it_takes(
    kind: ConstraintKind, runtime: Runtime, wire: Wire
) -> None:
    caps = capabilities_of(runtime, wire)
    text = {ConstraintKind.JSON_SCHEMA: SCHEMA, ConstraintKind.CHOICE: ""}.get(kind, "a")
    choices = ("yes", "no") if kind is ConstraintKind.CHOICE else ()
    given = StructuredConstraint(kind=kind, param="p", text=text, choices=choices)
    sent = engine_constraint(given, caps)
    expected = FORMS.get((runtime, wire), ELSEWHERE).get(kind, kind)
    assert sent.kind is expected
    assert sent.kind in caps.constraints
    assert sent.param == "p"
    match kind, expected:
        case ConstraintKind.CHOICE, ConstraintKind.GRAMMAR:
            assert (sent.text, sent.choices) == ('root ::= "yes" | "no"', ())
        case ConstraintKind.CHOICE, ConstraintKind.REGEX:
            assert (sent.text, sent.choices) == ("(yes|no)", ())
        case ConstraintKind.JSON_OBJECT, ConstraintKind.JSON_SCHEMA:
            assert sent.text == JSON_OBJECT_SCHEMA
        case _:
            assert sent == given


def test_a_schema_nested_past_vllms_bound_is_a_400_naming_the_field() -> None:
    check_schema_nesting(nested(MAX_SCHEMA_NESTING), "response_format")
    with pytest.raises(ClientError) as info:
        check_schema_nesting(nested(MAX_SCHEMA_NESTING + 1), "response_format")
    assert (info.value.status, info.value.param) == (400, "response_format")
    deep = StructuredConstraint(
        kind=ConstraintKind.JSON_SCHEMA, param="guided_json", text=nested(MAX_SCHEMA_NESTING + 1)
    )
    for runtime, wire in PAIRS:
        with pytest.raises(ClientError) as info:
            engine_constraint(deep, capabilities_of(runtime, wire))
        assert info.value.param == "guided_json"
