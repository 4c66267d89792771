"""The reference engines' answer to a JSON-schema constraint (engines/schema_instance.py): the
schema's smallest instance, valid under a real validator (jsonschema) for generated schemas, and
parsed by the pydantic models the openai SDK's `parse` helpers send; None where the fake model
cannot be sure (then it samples as without a constraint)."""

from __future__ import annotations

import datetime
import enum
import json
from typing import Any, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from smg_trio.engines.choice_script import choice_script, constraint_choices
from smg_trio.engines.schema_instance import answers_in_json, schema_text
from smg_trio.model.folder import demo_model_path, load_model_dir

pytestmark = pytest.mark.timeout(60)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    number: int = Field(ge=3, le=9)


class Person(BaseModel):
    name: str = Field(min_length=2)
    age: int = Field(gt=17)
    score: float = Field(ge=0.5)
    colour: Colour
    kind: Literal["a", "b"]
    nickname: str | None = None
    tags: list[str] = Field(min_length=2)
    home: Address
    previous: list[Address] = Field(default_factory=list)
    born: datetime.date
    either: int | str
    active: bool


@pytest.mark.parametrize("model", [Person, Address])
def test_a_pydantic_models_schema_gets_an_instance_the_model_parses(model: type[BaseModel]) -> None:
    text = schema_text(model.model_json_schema())
    assert text is not None
    model.model_validate_json(text)
    jsonschema.validate(json.loads(text), model.model_json_schema())


def test_the_schema_is_read_from_its_serialized_text_as_vllm_sends_it() -> None:
    schema = {"type": "object", "properties": {"x": {"const": 4}}, "required": ["x"]}
    assert schema_text(json.dumps(schema)) == '{"x": 4}'


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^[a-z]+$"},
        {"not": {"type": "null"}},
        {"$ref": "https://example.com/other.json"},
        {"$ref": "#/$defs/missing"},
        {"type": "integer", "minimum": 2.2, "maximum": 2.8},
        {"type": "integer", "minimum": 3, "multipleOf": 2},
        {"type": "string", "minLength": 4, "maxLength": 2},
        {"type": "string", "format": "ipv6-zone"},
        {"$defs": {"n": {"$ref": "#/$defs/n"}}, "$ref": "#/$defs/n"},
        {"enum": []},
    ],
)
def test_no_instance_when_the_fake_model_cannot_be_sure(schema: dict[str, Any]) -> None:
    assert schema_text(schema) is None


@pytest.mark.parametrize("bad", ["not json", "[1, 2]", "3"])
def test_a_schema_that_is_not_a_json_object_has_no_instance(bad: str) -> None:
    assert schema_text(bad) is None


def _scalars() -> st.SearchStrategy[dict[str, Any]]:
    bounds = st.integers(-50, 50)
    return st.one_of(
        st.builds(
            lambda low, span: {"type": "integer", "minimum": low, "maximum": low + span},
            bounds,
            st.integers(0, 10),
        ),
        st.builds(lambda low: {"type": "number", "exclusiveMinimum": low}, bounds),
        st.builds(lambda low: {"type": "integer", "exclusiveMaximum": low}, bounds),
        st.builds(
            lambda n: {"type": "string", "minLength": n, "maxLength": n + 3}, st.integers(0, 20)
        ),
        st.builds(
            lambda values: {"enum": values},
            st.lists(st.one_of(st.integers(), st.text(max_size=4)), min_size=1, max_size=3),
        ),
        st.just({"type": "boolean"}),
        st.just({"type": ["null", "string"]}),
        st.just({"type": "string", "format": "date-time"}),
    )


def _schemas() -> st.SearchStrategy[dict[str, Any]]:
    def nested(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        properties = st.dictionaries(st.text(min_size=1, max_size=5), children, max_size=4)
        objects = properties.flatmap(
            lambda props: st.builds(
                lambda required: {"type": "object", "properties": props, "required": required},
                st.lists(st.sampled_from(sorted(props)), unique=True) if props else st.just([]),
            )
        )
        arrays = st.builds(
            lambda items, count: {"type": "array", "items": items, "minItems": count},
            children,
            st.integers(0, 3),
        )
        unions = st.lists(children, min_size=1, max_size=3).map(
            lambda branches: {"anyOf": branches}
        )
        return st.one_of(objects, arrays, unions)

    return st.recursive(_scalars(), nested, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_schemas())
def test_every_generated_schemas_instance_is_valid(schema: dict[str, Any]) -> None:
    text = schema_text(schema)
    assert text is not None
    jsonschema.validate(json.loads(text), schema)


def test_the_engines_say_the_instance_then_eos() -> None:
    tokenizer = load_model_dir(demo_model_path()).tokenizer
    schema = json.dumps(Address.model_json_schema())
    allowed = constraint_choices(None, None, json_schema=schema)
    assert allowed == ('{"street": "", "number": 3}',)
    script = choice_script(allowed, tokenizer, (2,))
    assert script[-1] == 2
    assert tokenizer.decode(list(script[:-1]), skip_special_tokens=True) == allowed[0]
    assert constraint_choices(None, None, json_object=True) == ("{}",)


@pytest.mark.parametrize(
    ("replay", "json_answer"),
    [
        ('{"city": "Paris"}', True),
        ('[{"name": "f", "parameters": {}}]', True),
        ('<think>Weather, then.</think>{"city": "Paris"}', True),
        ("Once upon a time STOP and more", False),
        ("<think>{}</think>plain words", False),
        ("42", False),
    ],
)
def test_a_replay_that_answers_in_json_keeps_its_answer(replay: str, json_answer: bool) -> None:
    assert answers_in_json(replay) is json_answer
    schema = json.dumps({"type": "object"})
    allowed = constraint_choices(None, None, json_schema=schema, answers_in_json=json_answer)
    assert allowed == (None if json_answer else ("{}",))
