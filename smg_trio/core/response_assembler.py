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
- Usage counts the engine's tokens up to and including the token that stopped a choice (not the
  rest of a coalesced batch: what the engine made before the abort landed is not the client's),
  or the engine's own count when the engine finished it (docs/stops-and-finalize.md §3.10,
  as vLLM counts). Ids shown (`return_token_ids`, /generate) are the counted ones. With a
  reasoning parser (`plan.reasoning_count`) usage also says how many of each choice's counted
  ids were reasoning, summed (`core/reasoning_tokens.py`, docs/tools-and-reasoning.md §11).
- Logprobs (when asked) are held with their tokens and released with the text that completes
  them (`core/assembled_choice.py`); each token is then fed to the scanner alone, to know where
  its text ends.
- Prompt logprobs ride on a choice's first delta and never pass the scanner: the `prompt_logprobs`
  list goes in full responses, and a streamed completions echo carries the prompt's positions
  in its echo chunk. `echo` with max_tokens 0 (`plan.echo_only`) counts the engine's token for
  usage but shows only the prompt, as vLLM does.
- Every token id a choice received is kept (`received_ids`): a request whose worker failed
  mid-stream goes on from them on another worker, into this same assembler, whose scanners,
  detokenizers and counts simply continue (docs/resilience.md §9).
- A stream ends with `stream_end()`: the closing chunks plus each choice's finish and the usage
  as data, so no front end has to read its own chunks back.
- Chat with output parsers (tool calls, reasoning) gets the parsing renderer
  (`core/parsers/chat_output.py`, docs/tools-and-reasoning.md §4); every other request the plain
  one, so parsers cost nothing where they are not asked for.
Payloads are SSE `data:` bodies without framing, so SSE and WebSocket carry the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

import msgspec

from smg_trio.core.assembled_choice import AssembledChoice
from smg_trio.core.endpoint_renderers import renderer_for, response_id
from smg_trio.core.frontend_options import usage_with_details
from smg_trio.core.parsers.chat_output import ParsingChatRenderer
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.reasoning_tokens import reasoning_rule, reasoning_tokens
from smg_trio.core.render import FinishedChoice
from smg_trio.core.renderer_vocabulary import MatchedStop
from smg_trio.core.stops import Emit, Hold, ScanOutcome, Stop, StopScanner
from smg_trio.core.stream_end import StreamEnd
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta, TokenLogprob
from smg_trio.neutral.runtime import Endpoint
from smg_trio.wire.openai_responses import CompletionTokensDetails, Usage


class ResponseAssembler:
    """Turns one request's engine events into client payloads (streaming or not)."""

    def __init__(self, plan: GeneratePlan, tokenizer: TokenizerLike, *, created: int) -> None:
        self._stream = plan.stream
        # A batched completion counts every prompt once (as vLLM sums them).
        self._prompt_tokens = sum(len(prompt.ids) for prompt in plan.prompts)
        self._cached_tokens = 0
        self._cache_creation_tokens: int | None = None
        self._plan = plan
        self._renderer = (
            renderer_for(plan, tokenizer, created=created)
            # Chat with parsers gets the parsing chat renderer (docs/tools-and-reasoning.md §4).
            if plan.parsers is None or plan.endpoint is not Endpoint.CHAT
            else ParsingChatRenderer(plan, tokenizer, response_id(plan), created)
        )
        self._keeps_ids = self._renderer.keeps_output_ids
        self._tokenizer = tokenizer
        # Usage counts reasoning tokens (vLLM's rule); a chat stream's delta by delta.
        self._reasoning = reasoning_rule(plan)
        self._reasoning_tokens: int | None = None
        self._logprobs = plan.sampling.logprobs is not None
        self._echo_only = plan.echo_only
        self._visible_stop = plan.stop_spec.no_stop_trim
        self._eos_token_id = plan.stop_spec.eos_token_id
        self._interval = plan.stream_interval if plan.stream else 1
        self._choices = [
            AssembledChoice(
                StopScanner(plan.stop_spec, tokenizer), prompt.echo_text, stream=plan.stream
            )
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

    @property
    def usage(self) -> Usage:
        # A migrated request's engine saw a longer prompt: cached tokens never exceed ours.
        cached = min(self._cached_tokens, self._prompt_tokens)
        usage = Usage.of(self._prompt_tokens, self.completion_tokens, cached)
        usage = usage_with_details(self._plan, usage, cached, self._cache_creation_tokens)
        rule = self._reasoning
        if rule is None:
            return usage
        count = self._reasoning_tokens
        if count is None:
            # Per choice, as vLLM runs one parser per choice, summed over the choices.
            tokenizer = self._tokenizer
            count = sum(reasoning_tokens(rule, c.counted_ids, tokenizer) for c in self._choices)
            if self.done:  # final: the stream's end and the record ask for it both
                self._reasoning_tokens = count
        return msgspec.structs.replace(
            usage, completion_tokens_details=CompletionTokensDetails(count)
        )

    @property
    def choice_count(self) -> int:
        return len(self._choices)

    @property
    def finish_reasons(self) -> tuple[str, ...]:
        """The finish reason of every choice that finished, in choice order."""
        return tuple(c.finish_reason for c in self._choices if c.done)

    def received_ids(self) -> list[tuple[int, ...] | None]:
        """Per choice, every token id received so far, or None once the choice is over: what a
        migration continues from (core/continuation.py)."""
        return [None if c.done else tuple(c.received) for c in self._choices]

    def texts(self) -> tuple[str, ...]:
        """Every choice's text so far (echo included), in choice order."""
        return tuple(c.full_text() for c in self._choices)

    def on_events(self, events: Sequence[EngineEvent]) -> list[bytes]:
        """Take one batch of engine events; return the chunk payloads to send, in order. A
        non-streaming request gets none (its body is `response_body()`); events of a choice
        that already finished are ignored."""
        out: list[bytes] = []
        choices = self._choices
        for event in events:
            match event:
                case TokenDelta(choice_index=index, token_ids=token_ids):
                    choice = choices[index]
                    if event.prompt_logprobs is not None:
                        choice.prompt = event.prompt_logprobs
                    if choice.done:
                        continue
                    if self._echo_only:  # the engine's one token is never the client's text
                        self._count(choice, token_ids)
                        continue
                    if self._logprobs and event.logprobs is not None:
                        choice.received.extend(token_ids)
                        self._feed_positions(index, choice, token_ids, event.logprobs, out)
                    else:
                        self._feed(index, choice, token_ids, out)
                case ChoiceFinished(choice_index=index):
                    self._cached_tokens = max(self._cached_tokens, event.cached_tokens)
                    if event.cache_creation_tokens is not None:
                        self._cache_creation_tokens = max(
                            self._cache_creation_tokens or 0, event.cache_creation_tokens
                        )
                    choice = choices[index]
                    # Even after a router stop in the same batch: the step's weights made it.
                    choice.weight_version = event.weight_version
                    if choice.done:
                        continue
                    choice.tokens = max(choice.tokens, event.completion_tokens)
                    self._apply(index, choice, choice.scanner.finish(), event, out)
                case _:
                    assert_never(event)
        return out

    def on_tokens(self, index: int, token_ids: tuple[int, ...]) -> list[bytes]:
        """`on_events([TokenDelta(index, token_ids)])`, without the event: the fast lane
        (request/nursery.py) for the common batch, one choice's ids with no logprobs."""
        out: list[bytes] = []
        choice = self._choices[index]
        if choice.done:
            return out
        if self._echo_only:
            self._count(choice, token_ids)
            return out
        self._feed(index, choice, token_ids, out)
        return out

    def _feed(
        self, index: int, choice: AssembledChoice, token_ids: Sequence[int], out: list[bytes]
    ) -> None:
        """A delta's ids without logprobs through the choice's scanner."""
        choice.received.extend(token_ids)
        outcome = choice.scanner.feed(token_ids)
        if type(outcome) is Emit and not self._keeps_ids:  # the common case
            choice.tokens += len(token_ids)
            if self._reasoning is not None:
                choice.counted_ids.extend(token_ids)
            self._text(index, choice, outcome.text, out)
            return
        # Usage counts up to the stopping token, not the rest of the batch.
        if type(outcome) is Stop:
            token_ids = token_ids[: choice.scanner.consumed]
        self._count(choice, token_ids)
        self._apply(index, choice, outcome, None, out)

    def stream_end(self) -> StreamEnd:
        """After every choice finished: the closing chunks, and the finish and usage as data."""
        renderer, usage = self._renderer, self.usage
        usage_chunk = renderer.usage_chunk(usage)
        return StreamEnd(
            payloads=() if usage_chunk is None else (usage_chunk,),
            finish=tuple(
                renderer.reported_finish(i, c) for i, c in enumerate(self._choices) if c.done
            ),
            usage=renderer.reported_usage(usage),
        )

    def response_body(self) -> bytes:
        """The non-streaming response, once `done`."""
        renderer = self._renderer
        choices = [
            FinishedChoice(
                index=i,
                text=c.full_text(),
                finish_reason=c.finish_reason,
                completion_tokens=c.tokens,
                matched_stop=c.matched,
                stop_reason=c.stop_reason,
                output_ids=tuple(c.output_ids) if self._keeps_ids else None,
                logprobs=(
                    renderer.final_logprobs(i, c.released, c.prompt) if self._logprobs else None
                ),
                prompt_logprobs=renderer.prompt_logprobs(c.prompt),
                weight_version=c.weight_version,
            )
            for i, c in enumerate(self._choices)
        ]
        return renderer.body(self.usage, choices)

    def _count(self, choice: AssembledChoice, token_ids: Sequence[int]) -> None:
        """Usage counts these ids; a renderer that shows ids keeps them (none after a stop)."""
        choice.tokens += len(token_ids)
        if self._reasoning is not None:
            choice.counted_ids.extend(token_ids)
        if self._keeps_ids:
            choice.output_ids.extend(token_ids)
            if self._stream:
                choice.new_ids.extend(token_ids)

    def _feed_positions(
        self,
        index: int,
        choice: AssembledChoice,
        token_ids: Sequence[int],
        positions: Sequence[TokenLogprob],
        out: list[bytes],
    ) -> None:
        """Feed token by token, releasing each position once its text has gone out."""
        scanner = choice.scanner
        text = ""
        for token_id, position in zip(token_ids, positions, strict=True):
            outcome = scanner.feed((token_id,))
            self._count(choice, (token_id,))
            if type(outcome) is Stop:
                text += outcome.text
                emitted = choice.emitted + len(text)
                choice.release(emitted, final=True)
                if self._visible_stop:  # the stop's text (or token) is part of the output
                    choice.released.append(position)
                stop = Stop(text=text, matched=outcome.matched, token_id=outcome.token_id)
                self._apply(index, choice, stop, None, out)
                return
            if type(outcome) is Emit:
                text += outcome.text
            emitted = choice.emitted + len(text)
            decoded = choice.decoded = emitted + len(scanner.held_text)
            if decoded == emitted and not choice.pending:
                choice.released.append(position)  # the common case: its text is out
            else:
                choice.pending.append((position, decoded))
                choice.release(emitted, final=False)
        self._text(index, choice, text, out)

    def _apply(
        self,
        index: int,
        choice: AssembledChoice,
        outcome: ScanOutcome,
        engine_finish: ChoiceFinished | None,
        out: list[bytes],
    ) -> None:
        match outcome:
            case Emit(text=text):
                self._text(index, choice, text, out)
                if engine_finish is not None:
                    stop = engine_finish.stop_reason
                    self._finish(index, choice, engine_finish.finish_reason, stop, stop, stop, out)
            case Hold():
                if engine_finish is not None:
                    stop = engine_finish.stop_reason
                    self._finish(index, choice, engine_finish.finish_reason, stop, stop, stop, out)
            case Stop(text=text, matched=matched, token_id=token_id):
                self._text(index, choice, text, out)
                # Streaming chat omits matched_stop for token stops (docs/stops-and-finalize.md §3.9); a full
                # response reports the id that stopped the choice.
                final = matched if matched is not None else token_id
                # vLLM reports no stop_reason for its primary EOS, any other stop id as itself.
                eos = matched is None and token_id == self._eos_token_id
                reason = None if eos else final
                self._finish(index, choice, "stop", matched, final, reason, out)
            case _:
                assert_never(outcome)

    def _text(self, index: int, choice: AssembledChoice, text: str, out: list[bytes]) -> None:
        if not choice.started:
            self._open_choice(index, choice, out)
        if not text:
            return  # released positions wait for the next text or the finish chunk
        choice.parts.append(text)
        choice.chars += len(text)
        choice.emitted += len(text)
        if choice.pending:  # e.g. held text flushed at the engine's finish: its tokens go with it
            choice.release(choice.emitted, final=False)
        if not self._stream:
            return
        if self._interval > 1:
            # vLLM's --stream-interval: after the first text chunk, one chunk per `interval`
            # tokens; the held text goes out with the next chunk or before the finish.
            last = choice.chunked_tokens
            if last is not None and choice.tokens - last < self._interval:
                choice.unsent.append(text)
                return
            choice.chunked_tokens = choice.tokens
            if choice.unsent:
                choice.unsent.append(text)
                text = "".join(choice.unsent)
                choice.unsent = []
        self._render_text(index, choice, text, out)

    def _render_text(
        self, index: int, choice: AssembledChoice, text: str, out: list[bytes]
    ) -> None:
        released = choice.released
        chunk = self._renderer.text(index, text, choice, released)
        if chunk:  # b"": an output parser holds the text for now
            out.append(chunk)
            if choice.new_ids:  # the chunk carried them
                choice.new_ids = []
        if released:  # renderers never keep the list: an empty one is reused, not replaced
            choice.released = []

    def _open_choice(self, index: int, choice: AssembledChoice, out: list[bytes]) -> None:
        choice.started = True
        out.extend(self._renderer.opening(index, choice))

    def _finish(
        self,
        index: int,
        choice: AssembledChoice,
        reason: str,
        streamed_match: MatchedStop,
        final_match: MatchedStop,
        stop_reason: MatchedStop,
        out: list[bytes],
    ) -> None:
        choice.done = True
        choice.finish_reason = reason
        choice.matched = final_match
        choice.streamed_match = streamed_match
        choice.stop_reason = stop_reason
        self._open -= 1
        # Everything decoded has gone out now (flushed, or cut at a stop).
        choice.release(choice.emitted, final=True)
        if not self._stream:
            return
        if not choice.started:
            self._open_choice(index, choice, out)
        if choice.unsent:  # held by --stream-interval: never later than the finish
            self._render_text(index, choice, "".join(choice.unsent), out)
            choice.unsent = []
        out.extend(self._renderer.closing(index, choice))
        out.append(self._renderer.finish(index, choice, choice.released))
        choice.released = []
        choice.new_ids = []
