"""Pure. The router's stop scanner: engine token ids in, client text and the stop decision out.

Theory of operation
-------------------
A `StopScanner` enforces one choice's `StopSpec` (docs/stops-and-finalize.md §3.4-§3.7) on the
engine's output ids. `feed(ids)` handles one engine message; each id, in order:

1. **Token stops** are checked before decoding. A hidden stop id is never decoded; a visible one
   (`no_stop_trim`) adds its own text under the request's skip-special setting. Either way the
   stream ends there: held text is released and the detokenizer is flushed (partial UTF-8 becomes
   U+FFFD, our end-of-stream rule), and that released text is still searched for string stops.
2. Otherwise the `Detokenizer` turns the id into text that is safe to emit (possibly "").
3. **String stops** (non-empty ones; none → token-only fast path, nothing is ever held): the new
   text is appended to `held` and searched; on no match, the text that cannot begin a stop is
   emitted and the rest stays held. The first `min_tokens` tokens' text is never searched, as
   vLLM's detokenizer checks stops only beyond min_tokens: it is held back only as far as a stop
   ending in a later token could begin in it (docs/stops-and-finalize.md §3).

Invariants (what the tests check):
- I1 `held` is the longest suffix of the decoded text that is a proper prefix of some stop: never
  longer than the longest stop minus one character. Text that cannot begin a stop goes out at
  once (smg holds a fixed window of `max stop bytes` instead; the concatenation is the same).
- I2 `held` never contains a whole stop, so a new match ends inside the new text and starts no
  earlier than `len(held) - len(stop) + 1`: the search covers `held + new` only, and the cost per
  token does not depend on how long the output already is.
- I3 Selection: the match with the earliest end; among matches ending together, the longest
  (standard Aho-Corasick semantics; the order of the stop list is irrelevant). Searching after
  every token makes a stop completed by an earlier token win over one completed later.
- I4 The text before the match is emitted. A hidden stop's text never is; a visible stop's text
  is, and whatever follows it in that token is discarded.
- I5 After a stop the scanner is inert: the remaining ids of the batch and of later batches are
  never decoded (`feed` keeps answering the same `Stop` with empty text).
- I6 So no emitted text ever contains a stop string, except a visible stop at its very end.

Cost: per token, two `str.find` calls per stop over `held + new` (and none to detect a stop
longer than that text). A regex alternation was measured ~2.5x faster per token with 4 stops but
costs ~0.2 ms to compile per new stop set, as much as a few hundred tokens of scanning; a handful
of stops is the common case, so plain `find` it is (bench/pipeline/core_pipeline.py).

End of stream (`finish`): the held partial stop (e.g. "EN" of "END") is ordinary text and is
emitted, followed by the detokenizer's incomplete bytes as U+FFFD (smg drops them silently).
Both are searched first: a held character that only now decodes may complete a stop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, TypeAlias

import msgspec

from smg_trio.core.detokenize import Detokenizer
from smg_trio.core.plan import StopSpec
from smg_trio.core.tokenizer import TokenizerLike


class Emit(msgspec.Struct, frozen=True):
    """Send `text` to the client; the choice goes on."""

    text: str


class Hold(msgspec.Struct, frozen=True):
    """Nothing to send yet (text may be held back as a possible stop prefix)."""


HOLD: Final = Hold()


class Stop(msgspec.Struct, frozen=True, kw_only=True):
    """The choice stopped: send `text` (possibly ""), then finish with reason "stop".

    `matched` is the stop string that matched; None for a token stop, whose id is `token_id`
    (streaming omits matched_stop for token stops; a non-streaming response may report the
    engine's instead — docs/stops-and-finalize.md §3.9).
    """

    text: str
    matched: str | None = None
    token_id: int | None = None


ScanOutcome: TypeAlias = Emit | Hold | Stop

# One stop string, ready for the search: (stop, its length, its first character).
_Pattern: TypeAlias = tuple[str, int, str]


class StopScanner:
    """Detokenize one choice's output ids and enforce its stops (see the module docstring)."""

    __slots__ = (
        "_detokenizer",
        "_held",
        "_longest",
        "_patterns",
        "_skip_special_tokens",
        "_stop",
        "_stop_token_ids",
        "_tokenizer",
        "_unchecked",
        "_visible",
        "consumed",
    )

    def __init__(self, spec: StopSpec, tokenizer: TokenizerLike) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = spec.skip_special_tokens
        self._visible = spec.no_stop_trim
        self._detokenizer = Detokenizer(tokenizer, skip_special_tokens=spec.skip_special_tokens)
        self._stop_token_ids = frozenset(spec.token_ids)
        # Empty strings would match everywhere; smg ignores them, so do we.
        self._patterns: tuple[_Pattern, ...] = tuple(
            (stop, len(stop), stop[0]) for stop in dict.fromkeys(spec.strings) if stop
        )
        self._longest = max((length for _, length, _ in self._patterns), default=0)
        self._unchecked = spec.min_tokens  # tokens left whose text no string stop may end in
        self._held = ""
        self._stop: Stop | None = None  # once stopped: the inert outcome repeated by `feed`
        self.consumed = 0
        """Ids of the last `feed` call taken up to and including the one that stopped."""

    @property
    def is_stopped(self) -> bool:
        return self._stop is not None

    @property
    def matched_stop(self) -> str | None:
        """The stop string that stopped this choice; None for a token stop or no stop."""
        return None if self._stop is None else self._stop.matched

    @property
    def stop_token_id(self) -> int | None:
        """The stop token that stopped this choice; None for a string stop or no stop."""
        return None if self._stop is None else self._stop.token_id

    @property
    def held_text(self) -> str:
        """Decoded text withheld because it may begin a stop string."""
        return self._held

    def feed(self, token_ids: Iterable[int]) -> ScanOutcome:
        """Process one engine message's ids in order, up to the first stop.

        Returns the text they release (`Emit`), nothing yet (`Hold`), or the stop with the text
        before it (`Stop`). Once stopped, returns the same `Stop` with empty text.
        """
        if self._stop is not None:
            return self._stop
        step = self._detokenizer.step
        stop_token_ids = self._stop_token_ids
        searching = bool(self._patterns)
        unchecked = self._unchecked  # a local: this loop runs once per generated token
        out = ""
        position = 0  # a counter, not enumerate(): most calls carry one id, and that is cheaper
        for token_id in token_ids:
            position += 1
            if token_id in stop_token_ids:
                self.consumed = position
                return self._stop_on_token(token_id, out)
            text = step(token_id)
            if unchecked:
                unchecked -= 1
                self._unchecked = unchecked
                out += self._hold_tail(text) if searching else text
                continue
            if not text:
                continue
            if not searching:
                out += text
                continue
            result = self._scan(text, False)
            if isinstance(result, Stop):
                self.consumed = position
                return self._stopped(out, result)
            out += result
        return Emit(out) if out else HOLD

    def finish(self) -> ScanOutcome:
        """End of stream: release held text and partial bytes (as U+FFFD).

        Usually `Emit` or `Hold`; a `Stop` when the released text completes a stop string.
        Once stopped, returns the same `Stop` with empty text.
        """
        if self._stop is not None:
            return self._stop
        if self._unchecked:  # ended within min_tokens: nothing may match
            text, self._held = self._held + self._detokenizer.flush(), ""
            return Emit(text) if text else HOLD
        result = self._scan(self._detokenizer.flush(), True)
        if isinstance(result, Stop):
            return self._stopped("", result)
        return Emit(result) if result else HOLD

    def _stop_on_token(self, token_id: int, out: str) -> Stop:
        released = self._scan(self._detokenizer.flush(), True)
        if isinstance(released, Stop):
            return self._stopped(out, released)
        text = out + released
        if self._visible:
            text += self._tokenizer.decode(
                (token_id,), skip_special_tokens=self._skip_special_tokens
            )
        return self._stopped("", Stop(text=text, token_id=token_id))

    def _hold_tail(self, new: str) -> str:
        """Within min_tokens: emit all but the tail a later stop could still begin in."""
        buf = self._held + new
        keep = min(len(buf), self._longest - 1)
        self._held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]

    def _stopped(self, out: str, stop: Stop) -> Stop:
        self._held = ""
        self._stop = Stop(text="", matched=stop.matched, token_id=stop.token_id)
        return Stop(text=out + stop.text, matched=stop.matched, token_id=stop.token_id)

    def _scan(self, new: str, final: bool) -> str | Stop:
        """Append `new` to the held text; return the match, or the text now safe to emit.

        With `final` (end of stream) nothing is held back.
        """
        held = self._held
        if held:
            buf = held + new
            n_held = len(held)
        else:
            buf = new
            n_held = 0
        size = len(buf)
        match_start = match_end = -1
        matched = ""
        keep = 0
        for stop, length, first in self._patterns:
            # I2: a new match ends in `new`; search only where one can start (and fit).
            if length <= size:
                start = n_held - length + 1
                at = buf.find(stop, start if start > 0 else 0)
            else:
                at = -1
            if at >= 0:
                end = at + length
                # I3: earliest end; at equal ends the longer stop (it starts earlier).
                if match_end < 0 or end < match_end or (end == match_end and at < match_start):
                    match_start, match_end, matched = at, end, stop
                continue
            # I1: the longest suffix of `buf` that is a proper prefix of this stop, if longer
            # than what another stop already holds.
            lowest = size - length + 1
            at = buf.find(first, lowest if lowest > 0 else 0, size - keep)
            while at >= 0:
                if stop.startswith(buf[at:]):
                    keep = size - at
                    break
                at = buf.find(first, at + 1, size - keep)
        if match_end >= 0:
            self._held = ""
            return Stop(text=buf[: match_end if self._visible else match_start], matched=matched)
        if final or not keep:
            self._held = ""
            return buf
        self._held = buf[size - keep :]
        return buf[: size - keep]
