"""Pure. One request's client output, assembled from batches of engine events choice by choice.

`ResponseAssembler` owns a `StopScanner` per choice and the endpoint's renderer (picked once, in
the constructor). The request layer hands it each batch of engine events as the backend stream
yields it and sends whatever chunk payloads it returns; it decides nothing itself.

- A router-side stop ends the choice at once: the text before the stop, then its finish chunk
  (finish "stop"; matched_stop is the string, absent in streaming chat for a token stop). The
  engine's later tokens and its finish for that choice are ignored. When every choice is done,
  `done` is true and the caller leaves the backend stream, which aborts what the engine is
  still generating (smg drains instead; we do not spend engine time on discarded tokens).
- An engine finish flushes the scanner (a held partial stop is ordinary text; a stop completed
  by the flush still wins) and reports the engine's reason and, when the router did not stop,
  its stop reason.
- Usage counts the engine's tokens up to and including the message that stopped a choice, or
  the engine's own count when the engine finished it (docs/stops-and-finalize.md §3.10, vLLM-shaped streams).
- A stream ends with `stream_end()`: the closing chunks plus each choice's finish and the usage
  as data, so no front end has to read its own chunks back.
Payloads are SSE `data:` bodies without framing, so SSE and WebSocket carry the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from smg_trio.core.endpoint_renderers import MatchedStop, renderer_for
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.render import FinishedChoice
from smg_trio.core.stops import Emit, Hold, ScanOutcome, Stop, StopScanner
from smg_trio.core.stream_end import StreamEnd
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta


class _Choice:
    """One choice's progress (an `endpoint_renderers.ChoiceProgress`)."""

    __slots__ = (
        "done",
        "finish_reason",
        "matched",
        "output_ids",
        "parts",
        "scanner",
        "started",
        "streamed_match",
        "tokens",
    )

    def __init__(self, scanner: StopScanner, echo: str | None, *, stream: bool) -> None:
        self.scanner = scanner
        self.parts: list[str] = [echo] if echo else []  # a completion's echoed prompt first
        self.output_ids: list[int] = []
        self.tokens = 0
        self.started = not stream  # only a stream opens its choices with a chunk
        self.done = False
        self.finish_reason = ""
        self.matched: MatchedStop = None
        self.streamed_match: MatchedStop = None

    def full_text(self) -> str:
        return "".join(self.parts)


class ResponseAssembler:
    """Turns one request's engine events into client payloads (streaming or not)."""

    def __init__(self, plan: GeneratePlan, tokenizer: TokenizerLike, *, created: int) -> None:
        self._stream = plan.stream
        # A batched completion counts every prompt once (as vLLM sums them).
        self._prompt_tokens = sum(len(prompt.ids) for prompt in plan.prompts)
        self._renderer = renderer_for(plan, created=created)
        self._keeps_ids = self._renderer.keeps_output_ids
        self._choices = [
            _Choice(StopScanner(plan.stop_spec, tokenizer), prompt.echo_text, stream=plan.stream)
            for prompt in plan.prompts
            for _ in range(plan.n)
        ]
        self._open = len(self._choices)

    @property
    def done(self) -> bool:
        """Every choice has finished (router stop or engine finish)."""
        return self._open == 0

    @property
    def completion_tokens(self) -> int:
        return sum(c.tokens for c in self._choices)

    def on_events(self, events: Sequence[EngineEvent]) -> list[bytes]:
        """Take one batch of engine events; return the chunk payloads to send, in order.

        A non-streaming request gets no payloads (its body is `response_body()`). Events of a
        choice that already finished are ignored.
        """
        out: list[bytes] = []
        choices = self._choices
        for event in events:
            match event:
                case TokenDelta(choice_index=index, token_ids=token_ids):
                    choice = choices[index]
                    if choice.done:
                        continue
                    choice.tokens += len(token_ids)
                    if self._keeps_ids:
                        choice.output_ids.extend(token_ids)
                    outcome = choice.scanner.feed(token_ids)
                    if type(outcome) is Emit:  # the common case, ahead of the general match
                        self._text(index, choice, outcome.text, out)
                    else:
                        self._apply(index, choice, outcome, None, out)
                case ChoiceFinished(choice_index=index):
                    choice = choices[index]
                    if choice.done:
                        continue
                    choice.tokens = max(choice.tokens, event.completion_tokens)
                    self._apply(index, choice, choice.scanner.finish(), event, out)
                case _:
                    assert_never(event)
        return out

    def stream_end(self) -> StreamEnd:
        """After every choice finished: the closing chunks, and the finish and usage as data."""
        renderer, prompt, completion = self._renderer, self._prompt_tokens, self.completion_tokens
        usage_chunk = renderer.usage_chunk(prompt, completion)
        return StreamEnd(
            payloads=() if usage_chunk is None else (usage_chunk,),
            finish=tuple(
                renderer.reported_finish(i, c) for i, c in enumerate(self._choices) if c.done
            ),
            usage=renderer.reported_usage(prompt, completion),
        )

    def response_body(self) -> bytes:
        """The non-streaming response, once `done`."""
        choices = [
            FinishedChoice(
                index=i,
                text=c.full_text(),
                finish_reason=c.finish_reason,
                completion_tokens=c.tokens,
                matched_stop=c.matched,
                output_ids=tuple(c.output_ids) if self._keeps_ids else None,
            )
            for i, c in enumerate(self._choices)
        ]
        return self._renderer.body(self._prompt_tokens, choices)

    def _apply(
        self,
        index: int,
        choice: _Choice,
        outcome: ScanOutcome,
        engine_finish: ChoiceFinished | None,
        out: list[bytes],
    ) -> None:
        match outcome:
            case Emit(text=text):
                self._text(index, choice, text, out)
                if engine_finish is not None:
                    stop = engine_finish.stop_reason
                    self._finish(index, choice, engine_finish.finish_reason, stop, stop, out)
            case Hold():
                if engine_finish is not None:
                    stop = engine_finish.stop_reason
                    self._finish(index, choice, engine_finish.finish_reason, stop, stop, out)
            case Stop(text=text, matched=matched, token_id=token_id):
                self._text(index, choice, text, out)
                # Streaming chat omits matched_stop for token stops (docs/stops-and-finalize.md §3.9); a full
                # response reports the id that stopped the choice.
                final = matched if matched is not None else token_id
                self._finish(index, choice, "stop", matched, final, out)
            case _:
                assert_never(outcome)

    def _text(self, index: int, choice: _Choice, text: str, out: list[bytes]) -> None:
        if not choice.started:
            self._open_choice(index, choice, out)
        if text:
            choice.parts.append(text)
            if self._stream:
                out.append(self._renderer.text(index, text, choice))

    def _open_choice(self, index: int, choice: _Choice, out: list[bytes]) -> None:
        choice.started = True
        opening = self._renderer.opening(index)
        if opening is not None:
            out.append(opening)

    def _finish(
        self,
        index: int,
        choice: _Choice,
        reason: str,
        streamed_match: MatchedStop,
        final_match: MatchedStop,
        out: list[bytes],
    ) -> None:
        choice.done = True
        choice.finish_reason = reason
        choice.matched = final_match
        choice.streamed_match = streamed_match
        self._open -= 1
        if not self._stream:
            return
        if not choice.started:
            self._open_choice(index, choice, out)
        out.append(self._renderer.finish(index, choice))
