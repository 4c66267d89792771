"""Pure. Reasoning parsers: `<think>…</think>` (deepseek_r1, qwen3) and granite's prose markers.

Both start in reasoning: the model's first words are its thoughts (templates like DeepSeek-R1's
and Qwen3's open `<think>` in the prompt, so the output may begin inside the block). A leading
start marker is dropped; the end marker switches to content for the rest of the choice. Output
that never ends its reasoning is all reasoning, as vLLM's parsers decide
(docs/tools-and-reasoning.md §3). After the end marker the parser is a pass-through.
"""

from __future__ import annotations

from smg_trio.core.parsers.events import Parsed, partial_tail_any


def _reasoning_up_to(text: str, ends: tuple[str, ...]) -> tuple[Parsed, str, bool]:
    """Reasoning up to the first of `ends` found, content after it. Returns what `text` is, the
    tail held back because it may begin an end marker, and whether the reasoning ended."""
    for end in ends:
        at = text.find(end)
        if at >= 0:
            return Parsed(reasoning=text[:at], content=text[at + len(end) :]), "", True
    hold = partial_tail_any(text, ends)
    if hold:
        return Parsed(reasoning=text[:-hold]), text[-hold:], False
    return Parsed(reasoning=text), "", False


class ThinkingParser:
    """Reasoning until `end`; an optional `start` marker opening the output is dropped."""

    __slots__ = ("_ends", "_held", "_opening", "_reasoning", "_start")

    def __init__(self, start: str, end: str) -> None:
        self._start, self._ends = start, (end,)
        self._reasoning = True
        self._opening = True  # nothing said yet: a start marker may still open the output
        self._held = ""

    def feed(self, text: str) -> Parsed:
        if not self._reasoning:
            return Parsed(content=text)
        text = self._held + text
        self._held = ""
        if self._opening:
            stripped = text.lstrip()
            if self._start.startswith(stripped):  # still might be the start marker
                self._held = text
                return Parsed()
            self._opening = False
            if stripped.startswith(self._start):
                text = stripped[len(self._start) :]
        parsed, self._held, ended = _reasoning_up_to(text, self._ends)
        self._reasoning = not ended
        return parsed

    def finish(self) -> Parsed:
        held, self._held = self._held, ""
        if not self._reasoning:
            return Parsed(content=held)
        if self._opening and held.strip() == self._start:
            return Parsed()
        return Parsed(reasoning=held)


# Granite 3.x thinks in prose: "Here is my thought process:" … "Here is my response:"
# (vLLM's granite parser accepts "Here's" too).
GRANITE_STARTS = ("Here is my thought process:", "Here's my thought process:")
GRANITE_ENDS = ("Here is my response:", "Here's my response:")


class GraniteParser:
    """Granite's markers: reasoning only when the output opens with a start phrase; content
    otherwise (vLLM's granite parser finds no reasoning without one)."""

    __slots__ = ("_held", "_state")

    def __init__(self) -> None:
        self._held = ""
        self._state = "opening"  # then "reasoning" or "content"

    def feed(self, text: str) -> Parsed:
        if self._state == "content":
            return Parsed(content=text)
        text = self._held + text
        self._held = ""
        if self._state == "opening":
            for start in GRANITE_STARTS:
                if text.startswith(start):
                    self._state = "reasoning"
                    text = text[len(start) :]
                    break
            else:
                if any(start.startswith(text) for start in GRANITE_STARTS):
                    self._held = text
                    return Parsed()
                self._state = "content"
                return Parsed(content=text)
        parsed, self._held, ended = _reasoning_up_to(text, GRANITE_ENDS)
        if ended:
            self._state = "content"
        return parsed

    def finish(self) -> Parsed:
        held, self._held = self._held, ""
        if self._state == "reasoning":
            return Parsed(reasoning=held)
        return Parsed(content=held)
