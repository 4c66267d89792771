"""Pure. One request's client output, assembled from engine events choice by choice.

`ResponseAssembler` owns a `StopScanner` per choice and the endpoint's renderer. The request
layer feeds it engine events and sends whatever payloads it returns; it decides nothing itself.

- A router-side stop ends the choice at once: the text before the stop, then its finish chunk
  (finish "stop"; matched_stop is the string, absent in streaming chat for a token stop). The
  engine's later tokens and its finish for that choice are ignored. When every choice is done,
  `done` is true and the caller leaves the backend stream, which aborts what the engine is
  still generating (smg drains instead; we do not spend engine time on discarded tokens).
- An engine finish flushes the scanner (a held partial stop is ordinary text; a stop completed
  by the flush still wins) and reports the engine's reason and, when the router did not stop,
  its stop reason.
- Usage counts the engine's tokens up to and including the message that stopped a choice, or
  the engine's own count when the engine finished it (spec §3.10, vLLM-shaped streams).
Payloads are SSE `data:` bodies without framing, so SSE and WebSocket carry the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from smg_trio.core.plan import GeneratePlan
from smg_trio.core.render import (
    ChatStreamRenderer,
    CompletionStreamRenderer,
    FinishedChoice,
    GenerateStreamRenderer,
    chat_completion,
    completion,
    generate_response,
)
from smg_trio.core.stops import Emit, Hold, ScanOutcome, Stop, StopScanner
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.neutral.runtime import Endpoint

MatchedStop = str | int | None


class _Choice:
    __slots__ = ("done", "finish_reason", "matched", "output_ids", "parts", "scanner", "tokens")

    def __init__(self, scanner: StopScanner) -> None:
        self.scanner = scanner
        self.parts: list[str] = []
        self.output_ids: list[int] = []
        self.tokens = 0
        self.done = False
        self.finish_reason = ""
        self.matched: MatchedStop = None


def response_id(plan: GeneratePlan) -> str:
    """The id clients see: OpenAI's prefixes for chat and completions, the rid for /generate."""
    match plan.endpoint:
        case Endpoint.CHAT:
            return f"chatcmpl-{plan.request_id}"
        case Endpoint.COMPLETION:
            return f"cmpl-{plan.request_id}"
        case Endpoint.GENERATE:
            return plan.request_id
        case _:
            assert_never(plan.endpoint)


class ResponseAssembler:
    """Turns one request's engine events into client payloads (streaming or not)."""

    def __init__(self, plan: GeneratePlan, tokenizer: TokenizerLike, *, created: int) -> None:
        self._plan = plan
        self._created = created
        self._id = response_id(plan)
        self._choices = [_Choice(StopScanner(plan.stop_spec, tokenizer)) for _ in range(plan.n)]
        self._open = plan.n
        self._chat = ChatStreamRenderer(
            request_id=self._id, created=created, model=plan.model, include_usage=plan.include_usage
        )
        self._completion = CompletionStreamRenderer(
            request_id=self._id, created=created, model=plan.model, include_usage=plan.include_usage
        )
        self._generate = GenerateStreamRenderer(
            request_id=self._id, prompt_tokens=len(plan.prompt_ids), n=plan.n
        )
        self._started = [False] * plan.n

    @property
    def done(self) -> bool:
        """Every choice has finished (router stop or engine finish)."""
        return self._open == 0

    @property
    def completion_tokens(self) -> int:
        return sum(c.tokens for c in self._choices)

    def on_tokens(self, index: int, token_ids: Sequence[int]) -> list[bytes]:
        choice = self._choices[index]
        if choice.done:
            return []
        choice.tokens += len(token_ids)
        outcome = choice.scanner.feed(token_ids)
        if self._plan.endpoint is Endpoint.GENERATE:
            choice.output_ids.extend(token_ids)
        return self._apply(index, choice, outcome, engine_reason=None, engine_stop=None)

    def on_engine_finished(
        self,
        index: int,
        finish_reason: str,
        stop_reason: int | str | None,
        completion_tokens: int,
    ) -> list[bytes]:
        choice = self._choices[index]
        if choice.done:
            return []
        choice.tokens = max(choice.tokens, completion_tokens)
        return self._apply(
            index,
            choice,
            choice.scanner.finish(),
            engine_reason=finish_reason,
            engine_stop=stop_reason,
        )

    def closing_payloads(self) -> list[bytes]:
        """After every choice finished: the usage chunk when the client asked for it."""
        if not self._plan.stream:
            return []
        prompt = len(self._plan.prompt_ids)
        match self._plan.endpoint:
            case Endpoint.CHAT:
                usage = self._chat.usage(prompt, self.completion_tokens)
            case Endpoint.COMPLETION:
                usage = self._completion.usage(prompt, self.completion_tokens)
            case Endpoint.GENERATE:
                usage = None
            case _:
                assert_never(self._plan.endpoint)
        return [] if usage is None else [usage]

    def response_body(self) -> bytes:
        """The non-streaming response, once `done`."""
        choices = [
            FinishedChoice(
                index=i,
                text=self._full_text(c),
                finish_reason=c.finish_reason,
                completion_tokens=c.tokens,
                matched_stop=c.matched,
                output_ids=tuple(c.output_ids)
                if self._plan.endpoint is Endpoint.GENERATE
                else None,
            )
            for i, c in enumerate(self._choices)
        ]
        prompt = len(self._plan.prompt_ids)
        rid, created, model = self._id, self._created, self._plan.model
        match self._plan.endpoint:
            case Endpoint.CHAT:
                return chat_completion(
                    request_id=rid,
                    created=created,
                    model=model,
                    prompt_tokens=prompt,
                    choices=choices,
                )
            case Endpoint.COMPLETION:
                return completion(
                    request_id=rid,
                    created=created,
                    model=model,
                    prompt_tokens=prompt,
                    choices=choices,
                )
            case Endpoint.GENERATE:
                return generate_response(request_id=self._id, prompt_tokens=prompt, choices=choices)
            case _:
                assert_never(self._plan.endpoint)

    def _full_text(self, choice: _Choice) -> str:
        text = "".join(choice.parts)
        if self._plan.echo_text is not None:
            return self._plan.echo_text + text
        return text

    def _apply(
        self,
        index: int,
        choice: _Choice,
        outcome: ScanOutcome,
        *,
        engine_reason: str | None,
        engine_stop: int | str | None,
    ) -> list[bytes]:
        match outcome:
            case Emit(text=text):
                out = self._text(index, choice, text)
                if engine_reason is not None:
                    out += self._finish(index, choice, engine_reason, engine_stop, engine_stop)
                return out
            case Hold():
                if engine_reason is None:
                    return []
                return self._finish(index, choice, engine_reason, engine_stop, engine_stop)
            case Stop(text=text, matched=matched, token_id=token_id):
                out = self._text(index, choice, text)
                # Streaming chat omits matched_stop for token stops (spec §3.9); a full
                # response reports the id that stopped the choice.
                streamed = matched
                final: MatchedStop = matched if matched is not None else token_id
                return out + self._finish(index, choice, "stop", streamed, final)
            case _:
                assert_never(outcome)

    def _text(self, index: int, choice: _Choice, text: str) -> list[bytes]:
        out: list[bytes] = []
        if self._plan.stream and not self._started[index]:
            self._started[index] = True
            out.extend(self._opening(index))
        if not text:
            return out
        choice.parts.append(text)
        if not self._plan.stream:
            return out
        match self._plan.endpoint:
            case Endpoint.CHAT:
                out.append(self._chat.content(index, text))
            case Endpoint.COMPLETION:
                out.append(self._completion.text(index, text))
            case Endpoint.GENERATE:
                out.append(self._generate.chunk(index, self._full_text(choice), choice.tokens))
            case _:
                assert_never(self._plan.endpoint)
        return out

    def _opening(self, index: int) -> list[bytes]:
        match self._plan.endpoint:
            case Endpoint.CHAT:
                return [self._chat.role(index)]
            case Endpoint.COMPLETION:
                echo = self._plan.echo_text
                return [self._completion.text(index, echo)] if echo else []
            case Endpoint.GENERATE:
                return []
            case _:
                assert_never(self._plan.endpoint)

    def _finish(
        self,
        index: int,
        choice: _Choice,
        reason: str,
        streamed_match: MatchedStop,
        final_match: MatchedStop,
    ) -> list[bytes]:
        choice.done = True
        choice.finish_reason = reason
        choice.matched = final_match
        self._open -= 1
        if not self._plan.stream:
            return []
        out = [] if self._started[index] else self._opening(index)
        self._started[index] = True
        match self._plan.endpoint:
            case Endpoint.CHAT:
                out.append(self._chat.finish(index, reason, streamed_match))
            case Endpoint.COMPLETION:
                out.append(self._completion.finish(index, reason))
            case Endpoint.GENERATE:
                out.append(
                    self._generate.chunk(
                        index,
                        self._full_text(choice),
                        choice.tokens,
                        finish_reason=reason,
                        matched_stop=final_match,
                    )
                )
            case _:
                assert_never(self._plan.endpoint)
        return out
