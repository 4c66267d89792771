"""Pure. What a request lets the reference engines' fake model say: `logit_bias`,
`allowed_token_ids` and bad words, applied to each drawn token the way a real engine's logits
processors would change its choice, deterministically (docs/request-fields.md §5).

The fake model has no logits, so each rule says how it changes the token `Generation` drew:

- A bias of +100 or more forces its id (vLLM adds the bias to the logits: +100 outweighs any
  real logit, so greedy and sampling alike pick it). Several such ids: the highest bias, then
  the lowest id, that is still permitted.
- A bias of -100 or less bans its id (its probability becomes negligible).
- A smaller positive bias `b` replaces the drawn token by its id with probability `b / 100`; a
  smaller negative one redraws its id, when drawn, with probability `-b / 100`. The draws come
  from the request's own seeded `random.Random`, so a greedy request stays one fixed stream.
- `allowed_token_ids`: a drawn id outside the set is replaced by one from the set (vLLM masks
  every other id, EOS included, so such a request ends only by length or an allowed stop id).
- Bad words (vLLM's `_bad_words_token_ids`): a word's last id is banned whenever the output so
  far ends with the rest of the word, so the word never completes; a one-token word is banned
  always.
- A `script` (a choice constraint's tokens then EOS, `engines.choice_script`) is said as is,
  except where min_tokens masks its EOS. With `script_after` (the reasoning's end marker,
  `engines.reasoning_gate`) it starts only after the output has said that marker: the
  reasoning before it is free, as vLLM leaves it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from smg_trio.engines.reasoning_gate import end_after

FORCING_BIAS: Final = 100.0
REDRAW_TRIES: Final = 16  # bans are tiny next to a vocabulary: a few redraws almost always do


@dataclass(frozen=True)
class TokenRules:
    forced: tuple[int, ...] = ()  # bias >= +100, in the order they win
    banned: frozenset[int] = frozenset()  # bias <= -100
    soft_bias: tuple[tuple[int, float], ...] = ()  # (id, bias) with |bias| < 100, by id
    allowed: frozenset[int] | None = None
    bad_words: tuple[tuple[int, ...], ...] = ()
    script: tuple[int, ...] = ()  # a choice's tokens then EOS (engines.choice_script)
    script_after: tuple[int, ...] = ()  # the script waits for this marker (reasoning_gate)

    @classmethod
    def of(
        cls,
        *,
        logit_bias: Mapping[int, float] | None = None,
        allowed_token_ids: Iterable[int] | None = None,
        bad_words: Iterable[Sequence[int]] = (),
        script: Sequence[int] = (),
        script_after: Sequence[int] = (),
    ) -> TokenRules:
        bias = dict(logit_bias or {})
        forced = sorted(
            (t for t, b in bias.items() if b >= FORCING_BIAS), key=lambda t: (-bias[t], t)
        )
        return cls(
            forced=tuple(forced),
            banned=frozenset(t for t, b in bias.items() if b <= -FORCING_BIAS),
            soft_bias=tuple(
                sorted((t, b) for t, b in bias.items() if -FORCING_BIAS < b < FORCING_BIAS and b)
            ),
            allowed=None if allowed_token_ids is None else frozenset(allowed_token_ids),
            bad_words=tuple(tuple(word) for word in bad_words if word),
            script=tuple(script),
            script_after=tuple(script_after) if script else (),
        )

    @property
    def trivial(self) -> bool:
        return self == NO_TOKEN_RULES

    def _script_position(self, output_ids: Sequence[int]) -> int:
        """Where the next token falls in the script; -1 while it waits for its marker."""
        if not self.script_after:
            return len(output_ids)
        start = end_after(output_ids, self.script_after, 0)
        return -1 if start is None else len(output_ids) - start

    def forbidden(self, output_ids: Sequence[int]) -> set[int]:
        """Ids the next position may not take: the banned ones and each bad word's completion."""
        forbidden = set(self.banned)
        for word in self.bad_words:
            prefix = word[:-1]
            if (
                len(output_ids) >= len(prefix)
                and tuple(output_ids[len(output_ids) - len(prefix) :]) == prefix
            ):
                forbidden.add(word[-1])
        return forbidden

    def choose(
        self,
        drawn: int,
        output_ids: Sequence[int],
        masked: frozenset[int],
        rng: random.Random,
        ordinary_ids: Sequence[int],
    ) -> int:
        """The id the next position takes instead of `drawn` (`masked`: min_tokens' stop ids)."""
        position = self._script_position(output_ids)
        if 0 <= position < len(self.script) and self.script[position] not in masked:
            return self.script[position]  # a grammar leaves one way on: other rules cannot act
        forbidden = self.forbidden(output_ids) | masked
        allowed = self.allowed

        def permitted(token_id: int) -> bool:
            return token_id not in forbidden and (allowed is None or token_id in allowed)

        for token_id in self.forced:
            if permitted(token_id):
                return token_id
        for token_id, bias in self.soft_bias:
            if bias > 0 and permitted(token_id) and rng.random() < bias / FORCING_BIAS:
                return token_id
        drawn_bias = dict(self.soft_bias).get(drawn, 0.0)
        redraw = drawn_bias < 0 and rng.random() < -drawn_bias / FORCING_BIAS
        if permitted(drawn) and not redraw:
            return drawn
        pool = ordinary_ids if allowed is None else sorted(allowed)
        for _ in range(REDRAW_TRIES):
            token_id = rng.choice(pool)
            if permitted(token_id) and token_id != drawn:
                return token_id
        choices = [t for t in pool if permitted(t)]
        if not choices:
            raise ValueError("logit_bias, allowed_token_ids and bad words leave no token to say")
        return rng.choice(choices)


NO_TOKEN_RULES: Final = TokenRules()
