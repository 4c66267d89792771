"""Pure. The one grammar the reference engines follow: a choice among fixed strings. A request
constrained to `choice` (vLLM) or to a regex that is only an alternation of literal strings
(what the gateway makes of a choice for SGLang, TokenSpeed and TRT-LLM, docs/request-fields.md
§2) says its first choice, then EOS, as a grammar-guided model must say one of them and stop.
Any other constraint (JSON schema, general regex, grammar) is reported, not followed
(docs/request-fields.md §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from smg_trio.core.tokenizer import TokenizerLike

_SPECIALS: Final = frozenset("\\.^$|?*+()[]{}")


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


def constraint_choices(choice: Sequence[str] | None, regex: str | None) -> tuple[str, ...] | None:
    """The strings a constraint allows, if it is a choice or a regex of literal alternatives."""
    if choice:
        return tuple(choice)
    return None if not regex else regex_alternatives(regex)
