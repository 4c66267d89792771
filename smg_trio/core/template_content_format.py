"""Pure. How a chat template takes a message's content (vLLM's `--chat-template-content-format`,
docs/request-fields.md §1), as vLLM hands it over:

- `string`: the text parts joined by newlines; each image of the message as the model's
  placeholder (`<image>`) on a line of its own in front, less those the text already holds;
  no content is "";
- `openai`: a list of `{"type": "text", "text": ...}` and `{"type": "image"}` parts (a string
  content is one text part, no content an empty list), except a tool message's text, which stays
  one string;
- `auto`: what the template reads, below.

vLLM decides `auto` from the template's syntax: `openai` when a `for` loop iterates over a
message's content, `string` otherwise. We read the same from the template's statements without
a Jinja parser (minijinja exposes none): the names that stand for `messages` (itself, and what
`{% set %}` binds to it, sliced or filtered), the loop variables over them (the messages), then
a loop over a message's `content` (attribute or item, sliced or filtered), over a macro
parameter a message's content is passed to, or over a bare `content` outside macros.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from smg_trio.errors import ClientError
from smg_trio.wire import openai as oa

ContentFormat = Literal["string", "openai"]
ContentFormatFlag = Literal["auto", "string", "openai"]  # the flag: "auto" asks the template
CONTENT_FORMATS: Final = ("auto", "string", "openai")

_COMMENT: Final = re.compile(r"{#.*?#}", re.DOTALL)
_STATEMENT: Final = re.compile(r"{%-?\+?\s*(.*?)\s*[-+]?%}", re.DOTALL)
_FOR: Final = re.compile(r"for\s+(\w+)\s+in\s+(.+?)(?:\s+if\s+.+?)?(?:\s+recursive)?$", re.DOTALL)
_SET: Final = re.compile(r"set\s+(\w+)\s*=\s*(.+)$", re.DOTALL)
_MACRO: Final = re.compile(r"macro\s+(\w+)\s*\((.*)\)$", re.DOTALL)
_NAME: Final = r"(?P<name>[A-Za-z_]\w*)"
_CONTENT_KEY: Final = r"\s*(?:\.\s*content\b|\[\s*(?P<quote>['\"])content(?P=quote)\s*\])"
# After the access: slices, then filters or a test (what vLLM still counts as the same value).
_REST: Final = r"(?:\s*\[[^\]]*:[^\]]*\])*\s*(?:$|\||is\s)"
_VALUE: Final = re.compile(_NAME + _REST)
_CONTENT: Final = re.compile(_NAME + _CONTENT_KEY + _REST)


def detected_content_format(source: str) -> ContentFormat:
    """vLLM's `auto`: `openai` when the template loops over a message's content."""
    statements = [m.group(1) for m in _STATEMENT.finditer(_COMMENT.sub("", source))]
    messages = _bound_names(statements, {"messages"})
    loops = _loops(statements)
    message_names = {target for target, value, _ in loops if _names_of(_VALUE, value) & messages}
    content_params = _macro_content_params(source, statements, message_names)
    for _, value, macro in loops:
        if _names_of(_CONTENT, value) & message_names:
            return "openai"
        bare = value.strip()
        if macro is None and bare == "content":
            return "openai"
        if macro is not None and bare in content_params.get(macro, ()):
            return "openai"
    return "string"


def _names_of(pattern: re.Pattern[str], expression: str) -> set[str]:
    found = pattern.match(expression.strip())
    return set() if found is None else {found.group("name")}


def _bound_names(statements: list[str], names: set[str]) -> set[str]:
    """`names` and every name a `{% set %}` binds to one of them (sliced or filtered)."""
    bound = set(names)
    grew = True
    while grew:
        grew = False
        for statement in statements:
            found = _SET.match(statement)
            if found and found.group(1) not in bound and _names_of(_VALUE, found.group(2)) & bound:
                bound.add(found.group(1))
                grew = True
    return bound


def _loops(statements: list[str]) -> list[tuple[str, str, str | None]]:
    """Each `for` loop: its variable, what it iterates, and the macro it is in (None)."""
    loops: list[tuple[str, str, str | None]] = []
    macro: str | None = None
    for statement in statements:
        if (found := _MACRO.match(statement)) is not None:
            macro = found.group(1)
        elif statement.startswith("endmacro"):
            macro = None
        elif (found := _FOR.match(statement)) is not None:
            loops.append((found.group(1), found.group(2), macro))
    return loops


def _macro_content_params(
    source: str, statements: list[str], message_names: set[str]
) -> dict[str, set[str]]:
    """Per macro, its parameters some call passes a message's content to."""
    params: dict[str, set[str]] = {}
    for statement in statements:
        found = _MACRO.match(statement)
        if found is None:
            continue
        name = found.group(1)
        declared = [p.split("=")[0].strip() for p in found.group(2).split(",") if p.strip()]
        for call in re.finditer(rf"\b{name}\s*\(([^()]*)\)", source):
            for at, argument in enumerate(call.group(1).split(",")):
                key, eq, value = argument.partition("=")
                param = key.strip() if eq else (declared[at] if at < len(declared) else "")
                if param and _names_of(_CONTENT, value if eq else key) & message_names:
                    params.setdefault(name, set()).add(param)
    return params


def content_for_template(
    content: oa.Content | None,
    index: int,
    *,
    form: ContentFormat,
    role: str,
    placeholder: str | None,
) -> str | list[dict[str, Any]]:
    """Message `index`'s content as a template in `form` takes it (the module doc);
    `placeholder`: what stands for an image (None: the request has none)."""
    if content is None:
        return [] if form == "openai" and role != "tool" else ""
    parts: tuple[oa.ContentPart, ...] = (
        (oa.TextPart(content),) if isinstance(content, str) else content
    )
    texts: list[str] = []
    listed: list[dict[str, Any]] = []
    images = 0
    for at, part in enumerate(parts):
        if isinstance(part, oa.TextPart):
            texts.append(part.text)
            listed.append({"type": "text", "text": part.text})
        elif isinstance(part, oa.ImagePart) and placeholder is not None:
            images += 1
            listed.append({"type": "image"})
        else:
            raise ClientError(
                f"messages[{index}].content[{at}]: this gateway takes text and images only "
                f"(got a {type(part).__name__})",
                code="multimodal_not_supported",
                param=f"messages[{index}].content[{at}]",
            )
    if form == "openai" and (images or role != "tool"):
        return listed
    text = "\n".join(texts)
    if not images or placeholder is None:
        return text
    missing = images - text.count(placeholder)
    if missing < 0:
        raise ClientError(
            f"messages[{index}]: its text holds more image placeholders {placeholder!r} than "
            f"it has images ({images})",
            param=f"messages[{index}].content",
        )
    return "\n".join([placeholder] * missing + ([text] if text else []))
