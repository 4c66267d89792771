"""Pure. What the reference engines say under a JSON-schema constraint: the schema's smallest
instance, as a grammar-guided model must say something the schema accepts and then stop
(docs/request-fields.md §5). The real engines compile the schema into a grammar; the fake model
has no grammar engine, so it writes the one instance a schema's keywords name most plainly:
required properties only, `minItems` items, the first `enum`/`const` value or `anyOf` branch,
the smallest number the bounds allow, a string padded to `minLength`, a fixed sample for a
known `format`.

A replay whose answer is JSON already keeps it (`answers_in_json`): tests that script a
forced tool call replay the call's JSON, as a model that answers in JSON is not changed by a
JSON grammar (the replay need not match the schema: the test scripts what the model says).

A schema whose instance the fake model cannot write with certainty (a string `pattern`, a
`not`, a `$ref` outside the document, bounds with no integer between them, recursion without an
end) has no instance here: the engine then samples as without a constraint, the same as for a
general regex or grammar, and that is reported in docs/request-fields.md §5.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

_MAX_DEPTH: Final = 32
_REASONING_END: Final = "</think>"
_FORMAT_SAMPLES: Final = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00Z",
    "email": "a@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "ipv4": "127.0.0.1",
    "hostname": "localhost",
}
# Keywords whose meaning the instance below would have to honour but does not.
_UNFOLLOWED: Final = frozenset({"not", "pattern", "patternProperties", "if", "dependentSchemas"})


class _NoInstance(Exception):
    """The schema asks for something the fake model cannot write with certainty."""


def schema_text(schema: str | Mapping[str, Any] | None) -> str | None:
    """The JSON text of the schema's smallest instance, or None when there is none to write
    (or the schema is not a JSON object: the gateway has refused such before the engine)."""
    if schema is None:
        return None
    try:
        root = json.loads(schema) if isinstance(schema, str) else schema
        if not isinstance(root, Mapping):
            return None
        return json.dumps(_instance(root, root, 0), ensure_ascii=False)
    except (_NoInstance, ValueError, RecursionError):
        return None


def answers_in_json(text: str) -> bool:
    """Whether a replayed text's answer, after a `<think>...</think>` block if any, is JSON."""
    answer = text.rpartition(_REASONING_END)[2].strip()
    try:
        json.loads(answer)
    except ValueError:
        return False
    return answer[:1] in ("{", "[")


def _instance(schema: Any, root: Mapping[str, Any], depth: int) -> Any:
    if schema is True or schema == {}:
        return {}
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        raise _NoInstance
    if _UNFOLLOWED & schema.keys():
        raise _NoInstance
    if "$ref" in schema:
        return _instance(_resolved(schema["$ref"], root), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise _NoInstance
        return values[0]
    for branches in ("anyOf", "oneOf"):
        if branches in schema:
            return _first_branch(schema[branches], root, depth)
    if "allOf" in schema:
        return _instance(_merged(schema["allOf"], root), root, depth + 1)
    return _typed(schema, _type_of(schema), root, depth)


def _first_branch(branches: Any, root: Mapping[str, Any], depth: int) -> Any:
    if not isinstance(branches, list):
        raise _NoInstance
    for branch in branches:
        try:
            return _instance(branch, root, depth + 1)
        except _NoInstance:
            continue
    raise _NoInstance


def _resolved(ref: Any, root: Mapping[str, Any]) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise _NoInstance
    node: Any = root
    for part in ref[1:].split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or key not in node:
            raise _NoInstance
        node = node[key]
    return node


def _merged(parts: Any, root: Mapping[str, Any]) -> dict[str, Any]:
    """allOf's object schemas as one: their properties and required lists joined."""
    if not isinstance(parts, list):
        raise _NoInstance
    merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    for part in parts:
        while isinstance(part, Mapping) and "$ref" in part:
            part = _resolved(part["$ref"], root)
        if not isinstance(part, Mapping) or _type_of(part) != "object":
            raise _NoInstance
        merged["properties"].update(part.get("properties", {}))
        merged["required"].extend(part.get("required", []))
    return merged


def _type_of(schema: Mapping[str, Any]) -> str:
    declared = schema.get("type")
    if isinstance(declared, list):
        declared = next((name for name in declared if name != "null"), "null")
    if isinstance(declared, str):
        return declared
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "object"


def _typed(schema: Mapping[str, Any], kind: str, root: Mapping[str, Any], depth: int) -> Any:
    if kind == "object":
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, Mapping) or not isinstance(required, list):
            raise _NoInstance
        return {name: _instance(properties.get(name, {}), root, depth + 1) for name in required}
    if kind == "array":
        return _array(schema, root, depth)
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, integer=kind == "integer")
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    raise _NoInstance


def _array(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> list[Any]:
    prefix = schema.get("prefixItems", [])
    count = int(schema.get("minItems", 0))
    if not isinstance(prefix, list) or count > 64:
        raise _NoInstance
    head = [_instance(item, root, depth + 1) for item in prefix[:count]]
    rest = count - len(head)
    if rest <= 0:
        return head
    item = _instance(schema.get("items", {}), root, depth + 1)
    return head + [item] * rest


def _string(schema: Mapping[str, Any]) -> str:
    if "format" in schema:
        sample = _FORMAT_SAMPLES.get(str(schema["format"]))
        if sample is None:
            raise _NoInstance
        return sample
    length = int(schema.get("minLength", 0))
    if length > 4096 or length > int(schema.get("maxLength", length)):
        raise _NoInstance
    return "a" * length


def _number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    low = _bound(schema, "minimum", "exclusiveMinimum", up=True, integer=integer)
    high = _bound(schema, "maximum", "exclusiveMaximum", up=False, integer=integer)
    value: int | float = 0
    if low is not None and value < low:
        value = low
    if high is not None and value > high:
        value = high
    if low is not None and high is not None and low > high:
        raise _NoInstance
    step = schema.get("multipleOf")
    if step is not None and value != 0 and not _is_multiple(value, step):
        raise _NoInstance
    return int(value) if integer else value


def _bound(
    schema: Mapping[str, Any], inclusive: str, exclusive: str, *, up: bool, integer: bool
) -> int | float | None:
    if inclusive in schema:
        value = float(schema[inclusive])
        return math.ceil(value) if integer and up else math.floor(value) if integer else value
    if exclusive in schema:
        value = float(schema[exclusive])
        if integer:
            return math.floor(value) + 1 if up else math.ceil(value) - 1
        step = max(abs(value) * 1e-9, 1e-9)
        return value + step if up else value - step
    return None


def _is_multiple(value: float, step: Any) -> bool:
    try:
        quotient = value / float(step)
    except (TypeError, ValueError, ZeroDivisionError):
        return False
    return abs(quotient - round(quotient)) < 1e-9
