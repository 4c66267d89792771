"""Pure. One choice of a response being assembled (`core/response_assembler.py`): its text so
far, the ids counted and received, how it finished, and its logprob positions.

Logprobs (when asked) are held with their tokens: a token's position waits in `pending` until
the text that completes it has gone out, then moves to `released` (what the next chunk
carries), so tokens held back by the stop scanner carry their logprobs when their text goes
out. At a hidden stop only tokens whose whole text went out are released: a stop string's own
tokens never appear (nor the token where it began), nor a hidden stop token; a visible stop's
tokens do.
"""

from __future__ import annotations

from smg_trio.core.renderer_vocabulary import MatchedStop
from smg_trio.core.stops import StopScanner
from smg_trio.neutral.events import TokenLogprob

# A token position waiting for its text: its logprobs, and where its text ends in the choice's
# decoded output (characters, echo excluded).
_Pending = tuple[TokenLogprob, int]


class AssembledChoice:
    """One choice's progress as the assembler records it (a `renderer_vocabulary.ChoiceProgress`)."""

    __slots__ = (
        "chars",
        "chunked_tokens",
        "counted_ids",
        "decoded",
        "done",
        "emitted",
        "finish_reason",
        "matched",
        "new_ids",
        "output_ids",
        "parts",
        "pending",
        "prompt",
        "received",
        "released",
        "scanner",
        "started",
        "stop_reason",
        "streamed_match",
        "tokens",
        "unsent",
        "weight_version",
    )

    def __init__(self, scanner: StopScanner, echo: str | None, *, stream: bool) -> None:
        self.scanner = scanner
        self.parts: list[str] = [echo] if echo else []  # the echoed prompt/message first
        self.chars = len(echo) if echo else 0
        self.output_ids: list[int] = []  # counted ids, when the renderer shows them
        self.new_ids: list[int] = []  # and, streaming, those not in a chunk yet
        self.received: list[int] = []  # every id the engine sent it (what a migration re-sends)
        self.counted_ids: list[int] = []  # the counted ids, when usage counts reasoning in them
        self.tokens = 0
        self.started = not stream  # only a stream opens its choices with a chunk
        self.done = False
        self.finish_reason = ""
        self.matched: MatchedStop = None
        self.streamed_match: MatchedStop = None
        self.stop_reason: MatchedStop = None
        self.weight_version: str | None = None  # the engine's, from its finish (vLLM's)
        self.emitted = 0  # generated characters sent (echo excluded)
        self.decoded = 0  # generated characters decoded (sent + held by the scanner)
        self.pending: list[_Pending] = []
        self.released: list[TokenLogprob] = []  # released positions not yet in a chunk
        self.prompt: tuple[TokenLogprob, ...] | None = None  # the engine's prompt logprobs
        # --stream-interval: text held for the next chunk, and `tokens` when the last text
        # chunk went out (None: none yet, so the first text is never held).
        self.unsent: list[str] = []
        self.chunked_tokens: int | None = None

    def full_text(self) -> str:
        return "".join(self.parts)

    def release(self, emitted: int, *, final: bool) -> None:
        """Move pending positions whose whole text is out (`emitted` characters) to `released`.

        Ends never decrease, so those are a prefix. At a stop or finish (`final`) the rest are
        dropped: they are a hidden stop's tokens (one whose text only partly went out began
        the stop).
        """
        pending = self.pending
        if not pending:
            return
        count = len(pending)
        if pending[-1][1] > emitted:
            count = 0
            while pending[count][1] <= emitted:
                count += 1
        self.released.extend([p[0] for p in pending[:count]])
        if final:
            pending.clear()
        else:
            del pending[:count]
