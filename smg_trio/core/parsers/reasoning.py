"""Pure. Reasoning parsers: `<think>…</think>` (deepseek_r1, qwen3) and granite's prose markers.

Both start in reasoning: the model's first words are its thoughts (templates like DeepSeek-R1's
and Qwen3's open `<think>` in the prompt, so the output may begin inside the block). A leading
start marker is dropped; the end marker switches to content for the rest of the choice. Output
that never ends its reasoning is all reasoning, as vLLM's parsers decide
(docs/tools-and-reasoning.md §3). After the end marker the parser is a pass-through.
"""

from __future__ import annotations

from smg_trio.core.parsers.events import Parsed, partial_tail


class ThinkingParser:
    """Reasoning until `end`; an optional `start` marker opening the output is dropped."""

    __slots__ = ("_end", "_held", "_opening", "_reasoning", "_start")

    def __init__(self, start: str, end: str) -> None:
        self._start, self._end = start, end
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
        at = text.find(self._end)
        if at >= 0:
            self._reasoning = False
            return Parsed(reasoning=text[:at], content=text[at + len(self._end) :])
        hold = partial_tail(text, self._end)
        if hold:
            self._held = text[-hold:]
            text = text[:-hold]
        return Parsed(reasoning=text)

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
        for end in GRANITE_ENDS:
            at = text.find(end)
            if at >= 0:
                self._state = "content"
                return Parsed(reasoning=text[:at], content=text[at + len(end) :])
        hold = max(partial_tail(text, end) for end in GRANITE_ENDS)
        if hold:
            self._held = text[-hold:]
            text = text[:-hold]
        return Parsed(reasoning=text)

    def finish(self) -> Parsed:
        held, self._held = self._held, ""
        if self._state == "reasoning":
            return Parsed(reasoning=held)
        return Parsed(content=held)
