"""Pure. The parsers by name (vLLM's `--tool-call-parser` / `--reasoning-parser` names), and
`OutputParser`, one choice's chain: reasoning first, then tool calls on what is content
(docs/tools-and-reasoning.md §1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from smg_trio.core.parsers.deepseek_calls import DeepSeekV3Calls
from smg_trio.core.parsers.events import Parsed, TextParser, ToolCallArguments
from smg_trio.core.parsers.harmony import HarmonyChannels
from smg_trio.core.parsers.json_calls import CallIds
from smg_trio.core.parsers.json_sequences import JsonCallSequence
from smg_trio.core.parsers.mistral_calls import MistralCalls
from smg_trio.core.parsers.pythonic import PythonicCalls
from smg_trio.core.parsers.reasoning import GraniteParser, ThinkingParser
from smg_trio.core.parsers.tagged_calls import TaggedJsonCalls
from smg_trio.core.parsers.xml_calls import XmlCalls
from smg_trio.core.plan import ParserSetup
from smg_trio.errors import ConfigError

ToolParserFactory = Callable[[frozenset[str], CallIds, bool], TextParser]


def _hermes(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return TaggedJsonCalls(tools, ids, parallel=parallel, start="<tool_call>", end="</tool_call>")


def _llama3_json(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return JsonCallSequence(
        tools, ids, parallel=parallel, trigger="<|python_tag|>", separators=";", leading=True
    )


def _mistral(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return MistralCalls(tools, ids, parallel=parallel)


def _pythonic(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return PythonicCalls(tools, ids, parallel=parallel)


def _deepseek_v3(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return DeepSeekV3Calls(tools, ids, parallel=parallel)


def _qwen3_coder(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return XmlCalls(tools, ids, parallel=parallel)


def _harmony(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return HarmonyChannels(tools, ids, parallel=parallel)


TOOL_PARSERS: Final[Mapping[str, ToolParserFactory]] = {
    "hermes": _hermes,
    "qwen": _hermes,  # SGLang's name for Qwen 2.5's hermes-style markup
    "qwen25": _hermes,
    "llama3_json": _llama3_json,
    "mistral": _mistral,
    "pythonic": _pythonic,
    "deepseek_v3": _deepseek_v3,
    "qwen3_coder": _qwen3_coder,
    "qwen3_xml": _qwen3_coder,
    "openai": _harmony,  # vLLM's name for gpt-oss's Harmony tool calls
    "harmony": _harmony,
}
# Harmony is one format for reasoning and calls alike: one parser reads every channel.
HARMONY_TOOL_PARSERS: Final = frozenset({"openai", "harmony"})
HARMONY_REASONING_PARSERS: Final = frozenset({"openai_gptoss", "harmony"})


def uses_harmony(tool_call_parser: str | None, reasoning_parser: str | None) -> bool:
    """The model speaks Harmony (gpt-oss): its prompt is rendered in Harmony too."""
    return tool_call_parser in HARMONY_TOOL_PARSERS or reasoning_parser in HARMONY_REASONING_PARSERS


# tool_choice "required" / a named function: the output is JSON made under a schema
# (core/tool_choice.py), read by these rather than by a model family's parser.
REQUIRED_CALLS: Final = "tool_choice=required"
NAMED_CALL: Final = "tool_choice=function"


def forced_call(tool_parser: str | None) -> bool:
    return tool_parser in (REQUIRED_CALLS, NAMED_CALL)


def _required(tools: frozenset[str], ids: CallIds, parallel: bool) -> TextParser:
    return JsonCallSequence(
        tools, ids, parallel=parallel, trigger="[", separators=",", closer="]", leading=True
    )


# Tool parsers whose markers are special tokens: the router keeps special tokens for them.
KEEPS_SPECIAL_TOKENS: Final = frozenset({"mistral", "deepseek_v3", *HARMONY_TOOL_PARSERS})

REASONING_PARSERS: Final[Mapping[str, Callable[[], TextParser]]] = {
    "deepseek_r1": lambda: ThinkingParser("<think>", "</think>"),
    "qwen3": lambda: ThinkingParser("<think>", "</think>"),
    "granite": GraniteParser,
    # Harmony's analysis channel, with tool calls left as content (no tool parser asked).
    "openai_gptoss": lambda: HarmonyChannels(frozenset(), CallIds(""), parallel=True, calls=False),
    "harmony": lambda: HarmonyChannels(frozenset(), CallIds(""), parallel=True, calls=False),
}


class NamedCall:
    """tool_choice naming a function: the whole output is that call's arguments."""

    __slots__ = ("_ids", "_index", "_name")

    def __init__(self, name: str, ids: CallIds) -> None:
        self._name, self._ids, self._index = name, ids, -1

    def _open(self, out: Parsed) -> None:
        if self._index < 0:
            start = self._ids.next(self._name)
            self._index = start.index
            out.calls.append(start)

    def feed(self, text: str) -> Parsed:
        out = Parsed()
        self._open(out)
        if text:
            out.calls.append(ToolCallArguments(self._index, text))
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        self._open(out)
        return out


def check_parser_names(tool_call_parser: str | None, reasoning_parser: str | None) -> None:
    """A configured name must be one we have (a ConfigError listing them otherwise)."""
    for kind, name, known in (
        ("tool_call_parser", tool_call_parser, TOOL_PARSERS),
        ("reasoning_parser", reasoning_parser, REASONING_PARSERS),
    ):
        if name is not None and name not in known:
            raise ConfigError(f"{kind} {name!r} is unknown; known: {', '.join(sorted(known))}")
    # gpt-oss's output is always Harmony channels: one parser reads them all, so the reasoning
    # parser must be Harmony's, and no other family's tool parser can read its calls.
    tool_harmony = tool_call_parser in HARMONY_TOOL_PARSERS
    reasoning_harmony = reasoning_parser in HARMONY_REASONING_PARSERS
    if (tool_harmony and not reasoning_harmony) or (
        reasoning_harmony and tool_call_parser is not None and not tool_harmony
    ):
        raise ConfigError(
            "Harmony (gpt-oss) parsers go together: --reasoning-parser openai_gptoss with "
            "--tool-call-parser openai (or none); both may be spelled harmony"
        )


class OutputParser:
    """One choice's parsers: reasoning (if any), then tool calls (if any) on its content."""

    __slots__ = ("_ids", "_reasoning", "_tools")

    def __init__(self, setup: ParserSetup, call_id_prefix: str) -> None:
        self._ids = CallIds(call_id_prefix)
        reasoning, tools = setup.reasoning_parser, setup.tool_parser
        if tools in HARMONY_TOOL_PARSERS:
            reasoning = None  # the Harmony tool parser reads the analysis channel itself
        self._reasoning = None if reasoning is None else REASONING_PARSERS[reasoning]()
        self._tools: TextParser | None = None
        if tools == NAMED_CALL and setup.forced_function is not None:
            self._tools = NamedCall(setup.forced_function, self._ids)
        elif tools == REQUIRED_CALLS:
            self._tools = _required(setup.tool_names, self._ids, setup.parallel_tool_calls)
        elif tools is not None:
            factory = TOOL_PARSERS[tools]
            self._tools = factory(setup.tool_names, self._ids, setup.parallel_tool_calls)

    @property
    def called(self) -> bool:
        """At least one tool call was made (the finish reason becomes "tool_calls")."""
        return self._ids.count > 0

    def feed(self, text: str) -> Parsed:
        if self._reasoning is None:
            return self._tool_content(text)
        thought = self._reasoning.feed(text)
        if self._tools is not None and thought.content:
            tools = self._tools.feed(thought.content)
            tools.reasoning = thought.reasoning
            return tools
        return thought

    def finish(self) -> Parsed:
        out = Parsed()
        if self._reasoning is not None:
            thought = self._reasoning.finish()
            out.reasoning = thought.reasoning
            out.extend(self._tool_content(thought.content))
        if self._tools is not None:
            out.extend(self._tools.finish())
        return out

    def _tool_content(self, text: str) -> Parsed:
        if self._tools is None or not text:
            return Parsed(content=text)
        return self._tools.feed(text)


def parse_whole(setup: ParserSetup, call_id_prefix: str, text: str) -> tuple[Parsed, bool]:
    """A non-streaming choice's text, parsed by the same parsers in one piece; and whether it
    made a tool call."""
    parser = OutputParser(setup, call_id_prefix)
    out = parser.feed(text)
    out.extend(parser.finish())
    return out, parser.called
