"""Pure. The OpenAI chat and completions `EndpointRenderer`s: their chunks, finishes, usage and
non-streaming bodies (spliced by `core.render`), and logprobs formatted by `core.logprobs`.

With `stream_options.continuous_usage_stats` every chunk of a choice carries usage with that
choice's tokens so far (and its own prompt's length), as vLLM's server sends it. With vLLM's
`return_token_ids` the prompt's ids go on a choice's first chunk (chat: its role chunk, at the
top level; completions: in the choice) and each later chunk carries the ids it stands for; a
full response has them once per choice (chat: the prompt's at the top level). A chat plan with
output parsers gets `parsers/chat_output.ParsingChatRenderer`, a `ChatRenderer` that parses
first; as vLLM's, it shows no generated ids when `include_reasoning: false` hides reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.core.logprobs import LogprobFormatter, TokenStrings, prompt_logprobs
from smg_trio.core.openai_bodies import chat_completion, completion
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.reasoning_progress import ReasoningProgress
from smg_trio.core.reasoning_tokens import reasoning_rule
from smg_trio.core.render import (
    ChatStreamRenderer,
    CompletionStreamRenderer,
    FinishedChoice,
    TokenIds,
)
from smg_trio.core.renderer_vocabulary import ChoiceProgress, Positions, RenderedLogprobs
from smg_trio.core.stream_end import ChoiceFinish
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.wire.openai_responses import (
    ChoiceLogprobs,
    CompletionLogprobs,
    CompletionTokensDetails,
    PromptLogprobs,
    Usage,
)


class _OpenAIRenderer:
    """What chat and completions share: logprob formatting and continuous usage."""

    __slots__ = (
        "_contexts",
        "_continuous",
        "_created",
        "_formatter",
        "_id",
        "_model",
        "_prompt_strings",
        "_prompt_tokens",
        "_reasoning",
        "_reasoning_so_far",
        "_tokenizer",
        "keeps_output_ids",
    )

    def __init__(
        self, plan: GeneratePlan, tokenizer: TokenizerLike, request_id: str, created: int
    ) -> None:
        self._id, self._created, self._model = request_id, created, plan.model
        # Per choice, its prompt's length (choice i * n + j answers prompt i).
        self._prompt_tokens = tuple(len(p.ids) for p in plan.prompts for _ in range(plan.n))
        self.keeps_output_ids = plan.return_token_ids  # the generated ids are shown
        width = plan.sampling.logprobs
        self._formatter = (
            None if width is None else LogprobFormatter(tokenizer, width, as_ids=plan.tokens_as_ids)
        )
        self._continuous = plan.include_usage and plan.continuous_usage
        # Continuous usage counts each choice's reasoning so far, as vLLM does.
        self._reasoning = reasoning_rule(plan) if self._continuous else None
        self._tokenizer = tokenizer
        self._reasoning_so_far: dict[int, ReasoningProgress] = {}  # per choice, as it streams
        asked = plan.sampling.prompt_logprobs is not None
        self._prompt_strings = TokenStrings(tokenizer) if asked else None
        # Per streamed choice, its last sampled ids: a byte-level token's logprob string is
        # completed by the tokens before it (core/logprobs.py).
        self._contexts: dict[int, list[int]] = {}

    def closing(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        return ()

    def prompt_logprobs(self, prompt: Positions | None) -> PromptLogprobs | UnsetType:
        if self._prompt_strings is None or prompt is None:
            return UNSET
        return prompt_logprobs(self._prompt_strings, prompt)

    def _context(self, index: int) -> list[int]:
        context = self._contexts.get(index)
        if context is None:
            context = self._contexts[index] = []
        return context

    def _running_usage(self, index: int, choice: ChoiceProgress | None) -> Usage | None:
        """Continuous usage: the choice's tokens so far (None: before any, as the role chunk)."""
        if not self._continuous:
            return None
        usage = Usage.of(self._prompt_tokens[index], 0 if choice is None else choice.tokens)
        rule = self._reasoning
        if rule is None:
            return usage
        if choice is None:
            count = 0
        else:
            progress = self._reasoning_so_far.get(index)
            if progress is None:
                progress = self._reasoning_so_far[index] = ReasoningProgress(rule, self._tokenizer)
            count = progress.count(choice.counted_ids)
        return msgspec.structs.replace(
            usage, completion_tokens_details=CompletionTokensDetails(count)
        )

    def _new_ids(self, choice: ChoiceProgress) -> TokenIds:
        """A chunk's `token_ids`: the choice's ids since its last chunk, when shown."""
        return choice.new_ids if self.keeps_output_ids else None


class ChatRenderer(_OpenAIRenderer):
    """`chat.completion.chunk`s: a role chunk, content chunks, a finish chunk per choice."""

    __slots__ = ("_chunks", "_echo", "_prompt_ids", "_role")

    def __init__(
        self, plan: GeneratePlan, tokenizer: TokenizerLike, request_id: str, created: int
    ) -> None:
        super().__init__(plan, tokenizer, request_id, created)
        self._echo = plan.echo_text
        self._role = plan.response_role
        self._prompt_ids = plan.prompt_ids if plan.return_token_ids else None
        if plan.parsers is not None and not plan.parsers.include_reasoning:
            self.keeps_output_ids = False  # vLLM's: the ids would show the hidden reasoning
        self._chunks = ChatStreamRenderer(
            request_id=request_id,
            created=created,
            model=plan.model,
            include_usage=plan.include_usage,
        )

    def _logprobs(self, index: int, positions: Positions) -> ChoiceLogprobs | None:
        if self._formatter is None or not positions:
            return None
        return self._formatter.chat(positions, self._context(index))

    def opening(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        usage = self._running_usage(index, None)
        role = self._chunks.role(index, usage, self._prompt_ids, self._role)
        if not self._echo:
            return (role,)
        # vLLM streams the echoed last message as its own content chunk after the role.
        return role, self._chunks.content(index, self._echo, None, usage)

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        logprobs = None
        if self._formatter is not None and positions:
            # The per-token path: spliced.
            logprobs = self._formatter.chat_json(positions, self._context(index))
        usage = self._running_usage(index, choice) if self._continuous else None
        return self._chunks.content(index, text, logprobs, usage, self._new_ids(choice))

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        return self._chunks.finish(
            index,
            choice.finish_reason,
            choice.streamed_match,
            self._logprobs(index, positions),
            self._running_usage(index, choice),
            choice.stop_reason,
            self._new_ids(choice),
        )

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        return ChoiceFinish(index, choice.finish_reason, choice.streamed_match)

    def usage_chunk(self, usage: Usage) -> bytes | None:
        return self._chunks.usage(usage)

    def reported_usage(self, usage: Usage) -> Usage | None:
        return usage if self._chunks.include_usage else None

    def final_logprobs(
        self, index: int, positions: Positions, prompt: Positions | None
    ) -> RenderedLogprobs | None:
        return None if self._formatter is None else self._formatter.chat(positions)

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        return chat_completion(
            request_id=self._id,
            created=self._created,
            model=self._model,
            usage=usage,
            choices=choices,
            prompt_token_ids=self._prompt_ids,
            role=self._role,
        )


class CompletionRenderer(_OpenAIRenderer):
    """`text_completion` chunks: the echoed prompt first when asked, then text, then finish."""

    __slots__ = ("_chunks", "_echoes", "_first_ids", "_plain", "_prompt_ids", "_shifts")

    def __init__(
        self, plan: GeneratePlan, tokenizer: TokenizerLike, request_id: str, created: int
    ) -> None:
        super().__init__(plan, tokenizer, request_id, created)
        # Each choice opens with its own prompt's echo (choice i * n + j echoes prompt i).
        self._echoes = tuple(prompt.echo_text for prompt in plan.prompts for _ in range(plan.n))
        self._first_ids = tuple(prompt.ids[0] for prompt in plan.prompts for _ in range(plan.n))
        # Per choice its prompt's ids, sent once by a stream (then None): with `return_token_ids`,
        # and on a streamed echo whether asked or not, as vLLM's server sends them.
        self._prompt_ids: list[TokenIds] | None = None
        if plan.return_token_ids or (plan.stream and plan.echo_text is not None):
            self._prompt_ids = [prompt.ids for prompt in plan.prompts for _ in range(plan.n)]
        # Per choice: how far an echo's token strings run past its text (vLLM's offsets continue
        # from the prompt's token strings, which can differ from the text, e.g. a BOS).
        self._shifts = [0] * len(self._echoes)
        self._chunks = CompletionStreamRenderer(
            request_id=request_id,
            created=created,
            model=plan.model,
            include_usage=plan.include_usage,
        )
        # No logprobs, continuous usage or ids ever in a text chunk: `text` is the splice alone.
        self._plain = self._formatter is None and not self._continuous and self._prompt_ids is None

    def _logprobs(self, index: int, positions: Positions, offset: int) -> CompletionLogprobs | None:
        if self._formatter is None or not positions:
            return None
        return self._formatter.completion(positions, offset, self._context(index))

    def opening(self, index: int, choice: ChoiceProgress) -> tuple[bytes, ...]:
        echo = self._echoes[index]
        if not echo:
            return ()
        logprobs = None
        if self._formatter is not None and choice.prompt is not None:  # echo + logprobs
            logprobs = self._formatter.echoed_completion(self._first_ids[index], choice.prompt, ())
            last = logprobs.tokens[-1]
            self._shifts[index] = logprobs.text_offset[-1] + len(last) - len(echo)
        usage = self._running_usage(index, None)
        return (self._chunks.text(index, echo, logprobs, usage, self._stream_ids(index, None)),)

    def text(self, index: int, text: str, choice: ChoiceProgress, positions: Positions) -> bytes:
        if self._plain:  # the per-token path
            return self._chunks.plain_text(index, text)
        offset = choice.chars - len(text) + self._shifts[index]
        logprobs = self._logprobs(index, positions, offset)
        usage = self._running_usage(index, choice)
        return self._chunks.text(index, text, logprobs, usage, self._stream_ids(index, choice))

    def _stream_ids(self, index: int, choice: ChoiceProgress | None) -> tuple[TokenIds, TokenIds]:
        """A chunk's (`prompt_token_ids`, `token_ids`): the prompt's on the choice's first."""
        if self._prompt_ids is None:
            return None, None
        prompt, self._prompt_ids[index] = self._prompt_ids[index], None
        if not self.keeps_output_ids:
            return prompt, None
        return prompt, () if choice is None else choice.new_ids

    def finish(self, index: int, choice: ChoiceProgress, positions: Positions) -> bytes:
        return self._chunks.finish(
            index,
            choice.finish_reason,
            logprobs=self._logprobs(index, positions, choice.chars + self._shifts[index]),
            usage=self._running_usage(index, choice),
            stop_reason=choice.stop_reason,
            ids=self._stream_ids(index, choice),
        )

    def reported_finish(self, index: int, choice: ChoiceProgress) -> ChoiceFinish:
        return ChoiceFinish(index, choice.finish_reason, None)  # chunks carry no matched_stop

    def usage_chunk(self, usage: Usage) -> bytes | None:
        return self._chunks.usage(usage)

    def reported_usage(self, usage: Usage) -> Usage | None:
        return usage if self._chunks.include_usage else None

    def final_logprobs(
        self, index: int, positions: Positions, prompt: Positions | None
    ) -> RenderedLogprobs | None:
        if self._formatter is None:
            return None
        if self._echoes[index] is not None and prompt is not None:  # echo: the prompt's first
            return self._formatter.echoed_completion(self._first_ids[index], prompt, positions)
        # Offsets count from the start of the generated text (vLLM's non-streaming rule).
        return self._formatter.completion(positions, 0)

    def body(self, usage: Usage, choices: Sequence[FinishedChoice]) -> bytes:
        return completion(
            request_id=self._id,
            created=self._created,
            model=self._model,
            usage=usage,
            choices=choices,
            prompt_token_ids=self._prompt_ids if self.keeps_output_ids else None,
        )
