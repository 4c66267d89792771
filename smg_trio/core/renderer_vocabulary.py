"""Pure. The words the response assembler and the endpoint renderers share: a choice's
progress as a renderer may read it, the logprob positions it is handed, and the renderer
protocol itself (docs/architecture.md §1).

Its own module so that every renderer (`openai_rendering`, `generate_rendering`,
`responses_rendering`, `anthropic_rendering`, `parsers/chat_output`) and the modules that pick
or drive them (`endpoint_renderers`, `response_assembler`) import it without importing one
another: the renderer modules form no cycle (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from msgspec import UnsetType

from smg_trio.core.render import FinishedChoice
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.neutral.events import TokenLogprob
from smg_trio.wire.openai_responses import (
    ChoiceLogprobs,
    CompletionLogprobs,
    GenerateLogprobs,
    PromptLogprobs,
    Usage,
)

MatchedStop = str | int | None
Positions = Sequence[TokenLogprob]
RenderedLogprobs = ChoiceLogprobs | CompletionLogprobs | GenerateLogprobs


class ChoiceProgress(Protocol):
    """What a renderer may read of one choice (the assembler's record of it)."""

    tokens: int
    """Engine tokens counted for the choice so far (usage)."""
    chars: int
    """Characters of text sent so far, echo included."""
    new_ids: list[int]
    """A stream's counted ids since its last text or finish chunk, when the renderer keeps
    ids (`keeps_output_ids`): the ids that chunk carries (vLLM's `return_token_ids`)."""
    counted_ids: list[int]
    """The counted ids, when the plan counts reasoning tokens (`reasoning_count`)."""
    finish_reason: str
    matched: MatchedStop
    """What a full response reports: the stop string, or the stop token id."""
    streamed_match: MatchedStop
    """What a stream reports: the stop string; None for a router token stop (docs/stops-and-finalize.md §3.9)."""
    weight_version: str | None
    """The engine's weight version at the choice's finish, when it named one (vLLM's)."""
    stop_reason: MatchedStop
    """vLLM's `stop_reason`, streaming or not: the stop string, the stop token id, None for the
    primary EOS or no stop (docs/stops-and-finalize.md §3.9)."""

    @property
    def prompt(self) -> Positions | None:
        """The engine's prompt logprobs, once its first delta brought them."""
        ...

    def full_text(self) -> str: ...


class EndpointRenderer(Protocol):
    @property
    def keeps_output_ids(self) -> bool:
        """The answer carries the generated ids (/generate's bodies, `return_token_ids`)."""
        ...

    def opening(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        """The chunks that open a choice's stream (role, echoed text), if any."""
        ...

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        """The chunk for `text`, which the choice just produced (already in `full_text`); b""
        when nothing is to be sent yet (an output parser holding markup, never with positions)."""
        ...

    def closing(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        """The chunks a finished choice sends before its finish chunk (what a parser held)."""
        ...

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        """The chunk that ends a finished choice."""
        ...

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        """What that finish chunk says, as data."""
        ...

    def usage_chunk(self, usage: Usage) -> bytes | None: ...

    def reported_usage(self, usage: Usage) -> Usage | None: ...

    def final_logprobs(
        self, index: int, positions: Positions, prompt: Positions | None
    ) -> RenderedLogprobs | None:
        """A non-streaming choice's logprobs (None when the client asked for none); `prompt`
        is its prompt's logprobs when the engine sent them."""
        ...

    def prompt_logprobs(self, prompt: Positions | None) -> PromptLogprobs | UnsetType:
        """vLLM's `prompt_logprobs` of a choice (UNSET when not asked)."""
        ...

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        """The non-streaming response."""
        ...
