"""Pure. A chat request rendered as a Harmony prompt for gpt-oss (docs/tools-and-reasoning.md
§10), in place of the model's chat template, as vLLM renders gpt-oss prompts with its Harmony
library rather than the template.

The `openai-harmony` package needs the o200k_base vocabulary, which it downloads at first use
and cannot load offline; the markup is plain text around special tokens, so it is written here
and tokenized with the model's own tokenizer (which has Harmony's special tokens).

    <|start|>system<|message|>{identity, dates, Reasoning: EFFORT, valid channels}<|end|>
    <|start|>developer<|message|># Instructions … # Tools … namespace functions {…}<|end|>
    <|start|>user<|message|>…<|end|>
    <|start|>assistant<|channel|>final<|message|>…<|end|>
    <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{…}<|call|>
    <|start|>functions.NAME<|channel|>commentary to=assistant<|message|>{result}<|end|>
    <|start|>assistant
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from smg_trio.core.plan import GeneratePlan
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.errors import ClientError, ConfigError
from smg_trio.wire import openai as oa

IDENTITY: Final = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF: Final = "2024-06"
EFFORTS: Final = ("low", "medium", "high")
DEFAULT_EFFORT: Final = "medium"
# The ids the engine must stop on: a finished answer and a tool call (finalize sends them).
STOP_TOKENS: Final = ("<|return|>", "<|call|>")
SPECIAL_TOKENS: Final = (
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    *STOP_TOKENS,
)


def harmony_stop_ids(tokenizer: TokenizerLike) -> tuple[int, ...]:
    """The ids of `<|return|>` and `<|call|>`; a ConfigError at startup if the model's
    tokenizer does not have every Harmony special token as one token."""
    ids = {}
    for token in SPECIAL_TOKENS:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1:
            raise ConfigError(
                f"the Harmony parsers need a gpt-oss tokenizer: {token} is not one token "
                "in this model's tokenizer"
            )
        ids[token] = encoded[0]
    return tuple(ids[token] for token in STOP_TOKENS)


def render_harmony(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    reasoning_effort: object,
    now: _dt.datetime,
    add_generation_prompt: bool = True,
) -> str:
    """The Harmony prompt of `messages` (as `chat_template.template_messages` gives them,
    developer role kept)."""
    effort = DEFAULT_EFFORT if reasoning_effort is None else reasoning_effort
    if effort not in EFFORTS:
        raise ClientError(
            f"reasoning_effort must be one of {', '.join(EFFORTS)} for this model, got {effort!r}",
            param="reasoning_effort",
        )
    functions = [t["function"] for t in tools or () if t.get("type") == "function"]
    system = (
        f"{IDENTITY}\nKnowledge cutoff: {KNOWLEDGE_CUTOFF}\nCurrent date: {now:%Y-%m-%d}\n\n"
        f"Reasoning: {effort}\n\n# Valid channels: analysis, commentary, final. Channel must "
        "be included for every message."
    )
    if functions:
        system += "\nCalls to these tools must go to the commentary channel: 'functions'."
    parts = [_message("system", system)]
    # As vLLM: a first system or developer message is the instructions; later ones are
    # developer messages where they stand.
    leading = bool(messages) and messages[0]["role"] in ("system", "developer")
    instructions = messages[0].get("content") if leading else None
    developer = []
    if instructions:
        developer.append(f"# Instructions\n\n{instructions}")
    if functions:
        developer.append("# Tools\n\n## functions\n\n" + tools_namespace(functions))
    if developer:
        parts.append(_message("developer", "\n\n".join(developer)))
    names: dict[str, str] = {}  # tool call id → function name, for the results
    parts.extend(_turn(message, names) for message in messages[1 if leading else 0 :])
    if add_generation_prompt:
        parts.append("<|start|>assistant")
    return "".join(parts)


def harmony_chat_text(
    req: oa.ChatCompletionRequest, messages: Sequence[Mapping[str, Any]], *, now: _dt.datetime
) -> str:
    """A chat request's Harmony prompt; `messages` as the template would get them."""
    if req.continue_final_message:
        raise ClientError(
            "continue_final_message is not supported with Harmony (gpt-oss) prompts",
            param="continue_final_message",
        )
    kwargs = req.chat_template_kwargs or {}
    others = sorted(set(kwargs) - {"reasoning_effort"})
    if others:  # no template reads them: refused rather than ignored
        raise ClientError(
            f"chat_template_kwargs {', '.join(others)}: a Harmony (gpt-oss) prompt has no "
            "template; only reasoning_effort applies",
            param="chat_template_kwargs",
        )
    if not req.separate_reasoning:
        raise ClientError(
            "separate_reasoning false is not supported: gpt-oss's analysis channel is always "
            "reasoning (include_reasoning false leaves it out)",
            param="separate_reasoning",
        )
    # As for templates (docs/request-fields.md §3): the client's chat_template_kwargs win.
    effort = kwargs.get("reasoning_effort", req.reasoning_effort)
    return render_harmony(
        messages,
        tools=[msgspec.to_builtins(t) for t in req.tools] if req.tools else None,
        reasoning_effort=effort,
        now=now,
        add_generation_prompt=req.add_generation_prompt,
    )


def with_harmony_stops(plan: GeneratePlan, stop_ids: tuple[int, ...]) -> GeneratePlan:
    """`<|return|>` and `<|call|>` end a Harmony answer: the engine stops on them (finalize
    carries stop ids to each runtime) and the router hides them, as vLLM adds them."""
    if not stop_ids:
        return plan
    sampling, spec = plan.sampling, plan.stop_spec
    extra = tuple(i for i in stop_ids if i not in sampling.stop_token_ids)
    sampling = msgspec.structs.replace(sampling, stop_token_ids=sampling.stop_token_ids + extra)
    spec_extra = tuple(i for i in stop_ids if i not in spec.token_ids)
    spec = msgspec.structs.replace(spec, token_ids=spec.token_ids + spec_extra)
    return msgspec.structs.replace(plan, sampling=sampling, stop_spec=spec)


def _message(header: str, body: str, end: str = "<|end|>") -> str:
    return f"<|start|>{header}<|message|>{body}{end}"


def _turn(message: Mapping[str, Any], names: dict[str, str]) -> str:
    role, content = message["role"], message.get("content") or ""
    if role in ("system", "developer"):
        return _message("developer", f"# Instructions\n\n{content}")
    if role == "user":
        return _message("user", content)
    if role == "tool":
        call_id = message.get("tool_call_id") or ""
        name = names.get(call_id) or message.get("name") or "unknown"
        return _message(f"functions.{name}<|channel|>commentary to=assistant", content)
    if role != "assistant":
        raise ClientError(f"role {role!r} has no Harmony form", param="messages")
    out = _message("assistant<|channel|>final", content) if content else ""
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        name = str(function.get("name", ""))
        names[str(call.get("id", ""))] = name
        arguments = function.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        # The header as vLLM renders a previous call (the form gpt-oss was trained on).
        header = f"assistant to=functions.{name}<|channel|>commentary json"
        out += _message(header, arguments, "<|call|>")
    return out


def tools_namespace(functions: Sequence[Mapping[str, Any]]) -> str:
    """The tools as Harmony's TypeScript-like `functions` namespace."""
    entries = []
    for function in functions:
        lines = []
        if function.get("description"):
            lines.append(f"// {function['description']}")
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties") or {}
        if not properties:
            lines.append(f"type {function['name']} = () => any;")
        else:
            lines.append(f"type {function['name']} = (_: {{")
            lines.extend(_property_lines(properties, set(parameters.get("required") or ())))
            lines.append("}) => any;")
        entries.append("\n".join(lines))
    return "namespace functions {\n\n" + "\n\n".join(entries) + "\n\n} // namespace functions"


def _property_lines(properties: Mapping[str, Any], required: set[str]) -> list[str]:
    lines = []
    for key, schema in properties.items():
        schema = schema if isinstance(schema, Mapping) else {}
        if schema.get("description"):
            lines.append(f"// {schema['description']}")
        line = f"{key}{'' if key in required else '?'}: {typescript_type(schema)},"
        if "default" in schema:
            default = schema["default"]
            shown = default if isinstance(default, str) else json.dumps(default, ensure_ascii=False)
            line += f" // default: {shown}"
        lines.append(line)
    return lines


def typescript_type(schema: Mapping[str, Any]) -> str:
    """A JSON schema as a TypeScript type (what Harmony shows the model)."""
    if "enum" in schema:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    variants = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(variants, list):
        return " | ".join(typescript_type(v) for v in variants if isinstance(v, Mapping))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(typescript_type({**schema, "type": k}) for k in kind)
    match kind:
        case "string" | "boolean" | "null":
            return str(kind)
        case "integer" | "number":
            return "number"
        case "array":
            items = schema.get("items")
            inner = typescript_type(items) if isinstance(items, Mapping) else "any"
            return f"({inner})[]" if " | " in inner else f"{inner}[]"
        case "object":
            properties = schema.get("properties")
            if not isinstance(properties, Mapping) or not properties:
                return "object"
            required = set(schema.get("required") or ())
            fields = ", ".join(
                f"{k}{'' if k in required else '?'}: "
                f"{typescript_type(v if isinstance(v, Mapping) else {})}"
                for k, v in properties.items()
            )
            return f"{{ {fields} }}"
        case _:
            return "any"
