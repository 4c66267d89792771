"""Pure. A structured-output constraint in the form its worker's engine takes
(docs/request-fields.md §2): what vLLM's own front end does to `StructuredOutputsParams` before
its EngineCore sees them, and the rewrites for the engines without a native spelling.

The client's constraint (any of `response_format`, `structured_outputs`, `guided_*`, a forced
`tool_choice`) arrives as ONE neutral `StructuredConstraint`, its value checked at decode
(`neutral/validation.checked_constraint`). `engine_constraint` then, per the capability row:

- refuses a JSON schema nested deeper than vLLM allows (`MAX_SCHEMA_NESTING`), whatever the
  engine: vLLM's front end refuses it before any grammar backend walks it;
- turns a choice into the engine's `choice_as` form: vLLM's EBNF grammar (`choice_grammar`) for
  vLLM's EngineCore, whose grammar backends compile no choice; the regex alternation
  (`choice_regex`) for SGLang, TokenSpeed and TRT-LLM; unchanged where the engine's own front
  end converts it (vLLM's gRPC servicer runs vLLM's input processor);
- turns JSON mode into the permissive object schema where the engine has no JSON-object switch.

The grammar backend (`_backend`) vLLM's front end resolves from `auto` is the wire's business
(`wire/vllm_zmq.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import Capabilities
from smg_trio.neutral.sampling import ConstraintKind, StructuredConstraint
from smg_trio.wire.json_depth import json_depth_exceeds

# JSON mode for an engine with no JSON-object switch: the most permissive object schema (what
# SGLang's own server sends its grammar backend for response_format json_object).
JSON_OBJECT_SCHEMA: Final = '{"type":"object"}'
# vLLM's bound on the objects and arrays nested in a JSON schema (the root is level 1).
MAX_SCHEMA_NESTING: Final = 64
_REGEX_SPECIALS: Final = frozenset("\\.^$|?*+()[]{}")
# How vLLM writes a character inside an EBNF string literal; other C0 controls and DEL are \uXXXX.
_EBNF_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def engine_constraint(constraint: StructuredConstraint, caps: Capabilities) -> StructuredConstraint:
    """`constraint` as the engine of `caps` takes it (`refuse_unsupported` passed it already)."""
    match constraint.kind:
        case ConstraintKind.JSON_SCHEMA:
            check_schema_nesting(constraint.text, constraint.param)
        case ConstraintKind.CHOICE if caps.choice_as is not ConstraintKind.CHOICE:
            return _choice_as(constraint, caps.choice_as)
        case ConstraintKind.JSON_OBJECT if ConstraintKind.JSON_OBJECT not in caps.constraints:
            return msgspec.structs.replace(
                constraint, kind=ConstraintKind.JSON_SCHEMA, text=JSON_OBJECT_SCHEMA
            )
        case _:
            pass
    if constraint.kind not in caps.constraints:  # pragma: no cover - refused before
        raise AssertionError(f"{constraint.kind} reached an engine that cannot take it")
    return constraint


def _choice_as(constraint: StructuredConstraint, kind: ConstraintKind) -> StructuredConstraint:
    match kind:
        case ConstraintKind.GRAMMAR:
            text = choice_grammar(constraint.choices)
        case ConstraintKind.REGEX:
            text = choice_regex(constraint.choices)
        case _:  # pragma: no cover - the capability table's choice_as is one of the two
            raise AssertionError(f"a choice cannot become {kind}")
    return msgspec.structs.replace(constraint, kind=kind, text=text, choices=())


def check_schema_nesting(schema: str, param: str) -> None:
    """vLLM's front-end bound: a schema nesting objects/arrays deeper than 64 levels is a 400."""
    if json_depth_exceeds(schema, MAX_SCHEMA_NESTING):
        raise ClientError(
            f"{param}: the JSON schema is nested too deeply: objects and arrays may nest at "
            f"most {MAX_SCHEMA_NESTING} levels",
            param=param,
        )


def choice_grammar(choices: Iterable[str]) -> str:
    """vLLM's grammar for a choice: `root ::= "a" | "b"`, each choice an EBNF string literal
    (backslash, quote, LF, CR and tab escaped; other C0 controls and DEL as `\\uXXXX`)."""
    literals = ('"' + "".join(_ebnf_char(c) for c in choice) + '"' for choice in choices)
    return "root ::= " + " | ".join(literals)


def _ebnf_char(char: str) -> str:
    escaped = _EBNF_ESCAPES.get(char)
    if escaped is not None:
        return escaped
    if ord(char) < 0x20 or ord(char) == 0x7F:
        return f"\\u{ord(char):04x}"
    return char


def choice_regex(choices: Iterable[str]) -> str:
    """A regex matching exactly one of `choices` (a choice as an alternation).

    Only regex metacharacters are escaped: grammar engines' regex dialects differ on escapes of
    ordinary characters (`\\ `), so none are written.
    """
    escaped = ("".join("\\" + c if c in _REGEX_SPECIALS else c for c in x) for x in choices)
    return "(" + "|".join(escaped) + ")"
