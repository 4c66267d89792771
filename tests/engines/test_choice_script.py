"""The one grammar the reference engines follow: a choice, given as a list (vLLM gRPC), as
vLLM's choice grammar (vLLM's EngineCore) or as the regex alternation the gateway writes for the
other engines (core.constraint_forms)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.constraint_forms import choice_grammar, choice_regex
from smg_trio.engines.choice_script import (
    choice_script,
    constraint_choices,
    grammar_alternatives,
    regex_alternatives,
)
from smg_trio.model.folder import demo_model_path, load_model_dir

TOKENIZER = load_model_dir(demo_model_path()).tokenizer


@settings(max_examples=500)
@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5))
def test_the_gateways_choice_regex_reads_back_as_its_choices(choices: list[str]) -> None:
    assert regex_alternatives(choice_regex(tuple(choices))) == tuple(choices)


@settings(max_examples=500)
@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5))
def test_the_gateways_choice_grammar_reads_back_as_its_choices(choices: list[str]) -> None:
    assert grammar_alternatives(choice_grammar(choices)) == tuple(choices)
    assert constraint_choices(None, None, choice_grammar(choices)) == tuple(choices)


def test_only_a_choice_grammar_is_a_choice() -> None:
    assert grammar_alternatives('root ::= "yes" | "no"') == ("yes", "no")
    assert grammar_alternatives('root ::= "a\\"b" | "\\u0001\\n"') == ('a"b', "\x01\n")
    assert grammar_alternatives('root ::= "a" | b') is None
    assert grammar_alternatives('root ::= "a"+') is None
    assert grammar_alternatives('start: "a"') is None


def test_only_literal_alternations_are_choices() -> None:
    assert regex_alternatives("(yes|no)") == ("yes", "no")
    assert regex_alternatives("a\\.b|c") == ("a.b", "c")
    assert regex_alternatives("[0-9]+") is None
    assert regex_alternatives("(a|b)*") is None
    assert regex_alternatives("ab\\") is None
    assert regex_alternatives("(a)|(b)") is None  # the parentheses are not one outer group
    assert regex_alternatives("(\\\\)") == ("\\",)  # an escaped backslash, then the group's end
    assert constraint_choices(["x"], None) == ("x",)
    assert constraint_choices(None, "(p|q)") == ("p", "q")
    assert constraint_choices(None, None) is None


def test_the_script_is_the_first_choice_then_eos() -> None:
    spelled = TOKENIZER.encode("yes", add_special_tokens=False)
    assert choice_script(("", "yes", "no"), TOKENIZER, (7, 8)) == (*spelled, 7)
    assert choice_script(("yes",), TOKENIZER, ()) == ()  # nothing would end it: no script
    assert choice_script(("yes",), None, (7,)) == ()
    assert choice_script(None, TOKENIZER, (7,)) == ()
