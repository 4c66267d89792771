"""Pure. The one grammar the reference engines follow: a choice among fixed strings. A request
constrained to `choice` (vLLM gRPC), to vLLM's grammar for a choice (`root ::= "a" | "b"`, what
vLLM's front end and the gateway send its EngineCore) or to a regex that is only an alternation
of literal strings (what the gateway makes of a choice for SGLang, TokenSpeed and TRT-LLM,
docs/request-fields.md §2) says its first choice, then EOS, as a grammar-guided model must say
one of them and stop. A JSON schema is followed by saying its smallest instance
(`engines.schema_instance`); any other constraint (general regex, grammar) is reported, not
followed (docs/request-fields.md §5).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.engines.schema_instance import schema_text

_SPECIALS: Final = frozenset("\\.^$|?*+()[]{}")
# `root ::= "a" | "b"`: string literals (escapes inside) joined by `|`, nothing else.
_CHOICE_GRAMMAR: Final = re.compile(r'root ::= ("(?:[^"\\]|\\.)*")(?: \| ("(?:[^"\\]|\\.)*"))*')
_LITERAL: Final = re.compile(r'"((?:[^"\\]|\\.)*)"')
_EBNF_ESCAPE: Final = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")
_EBNF_CHARS: Final = {"n": "\n", "r": "\r", "t": "\t"}


def regex_alternatives(regex: str) -> tuple[str, ...] | None:
    """The literal strings `(a|b|c)` (or `a|b|c`) matches, or None if it is anything else.

    Escapes (`\\.`) are literal characters; any unescaped metacharacter but the alternation's
    own `|` and outer parentheses makes it a real regex, which the fake model cannot follow.
    """
    pieces: list[tuple[str, bool]] = []  # (character, escaped)
    escaped = False
    for char in regex:
        if escaped:
            pieces.append((char, True))
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            pieces.append((char, False))
    if escaped:
        return None  # a trailing lone backslash: not a regex at all
    if len(pieces) >= 2 and pieces[0] == ("(", False) and pieces[-1] == (")", False):
        pieces = pieces[1:-1]
    choices: list[str] = []
    current: list[str] = []
    for char, literal in pieces:
        if literal or char not in _SPECIALS:
            current.append(char)
        elif char == "|":
            choices.append("".join(current))
            current = []
        else:
            return None
    choices.append("".join(current))
    return tuple(choices)


def choice_script(
    choices: Sequence[str] | None, tokenizer: TokenizerLike | None, end_ids: Sequence[int]
) -> tuple[int, ...]:
    """The tokens of the first non-empty choice then the first EOS id; () when there is no
    choice to say, no tokenizer to spell it or no EOS to end it with."""
    first = next((choice for choice in choices or () if choice), None)
    if first is None or tokenizer is None or not end_ids:
        return ()
    return (*tokenizer.encode(first, add_special_tokens=False), end_ids[0])


def grammar_alternatives(grammar: str) -> tuple[str, ...] | None:
    """The strings vLLM's choice grammar `root ::= "a" | "b"` allows, or None for any other."""
    if _CHOICE_GRAMMAR.fullmatch(grammar) is None:
        return None
    return tuple(_EBNF_ESCAPE.sub(_unescaped, literal) for literal in _LITERAL.findall(grammar))


def _unescaped(escape: re.Match[str]) -> str:
    code = escape.group(1)
    if code.startswith("u") and len(code) == 5:
        return chr(int(code[1:], 16))
    return _EBNF_CHARS.get(code, code)


def constraint_choices(
    choice: Sequence[str] | None,
    regex: str | None,
    grammar: str | None = None,
    *,
    json_schema: str | None = None,
    json_object: bool = False,
    answers_in_json: bool = False,
) -> tuple[str, ...] | None:
    """The strings a constraint allows, if it is a choice, vLLM's grammar for a choice or a
    regex of literal alternatives; for a JSON schema (or any JSON object), the one instance
    the fake model writes (`engines.schema_instance`), unless the model's own answer is JSON
    already (`answers_in_json`: a replay that answers in JSON keeps its answer)."""
    if choice:
        return tuple(choice)
    if answers_in_json and (json_schema or json_object):
        return None
    if json_schema:
        text = schema_text(json_schema)
        return None if text is None else (text,)
    if json_object:
        return ("{}",)
    if grammar:
        return grammar_alternatives(grammar)
    return None if not regex else regex_alternatives(regex)
