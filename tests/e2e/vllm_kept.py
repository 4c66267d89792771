"""Pure. The divergences from vLLM's own server that smg-trio keeps on purpose, each with its
reason (docs/real-engines.md, "Divergences kept on purpose", says why in prose).

The differential harness fails a case on any divergence not matched here. A rule is narrow: a
divergence path pattern, optionally only for some cases (by name) or one of our wires, and
optionally a test of the two values; a kept divergence is still written to the case's report
(SMG_TRIO_DIFF_DIR), under "kept", with its reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from tests.e2e.differential import MISSING, Divergence


@dataclass(frozen=True)
class Kept:
    reason: str
    path: re.Pattern[str]
    cases: frozenset[str] | None = None  # case names (vllm_cases.Case.name); None: every case
    wire: str | None = None  # "zmq" or "grpc"; None: both
    values: Callable[[Any, Any], bool] | None = None  # (vLLM's, ours): the divergence is this one

    def covers(self, case: str, wire: str, divergence: Divergence) -> bool:
        return (
            (self.cases is None or case in self.cases)
            and (self.wire is None or self.wire == wire)
            and self.path.fullmatch(divergence.path) is not None
            and (self.values is None or self.values(divergence.vllm, divergence.ours))
        )


def _cached_tokens_reported(vllm: Any, ours: Any) -> bool:
    """vLLM sends no details (it would only with --enable-prompt-tokens-details); we send them
    when the engine reported cached prefix tokens."""
    return vllm in (MISSING, None) and isinstance(ours, dict) and ours.get("cached_tokens", 0) > 0


PROMPT_LOGPROB_CASES: Final = frozenset(
    {
        "echo_logprobs_max_tokens_0-completions",
        "prompt_logprobs-completions",
        "echo_logprobs-completions",
    }
)

KEPT: Final = (
    Kept(
        "errors are in OpenAI's shape: type invalid_request_error, a string code, param naming "
        "the field (vLLM: type BadRequestError, code = the status, param null)",
        re.compile(r"\$\.error\.(type|code|param)"),
    ),
    Kept(
        "usage.prompt_tokens_details is sent when the engine reported cached prefix tokens",
        re.compile(r"\$\.usage\.prompt_tokens_details"),
        values=_cached_tokens_reported,
    ),
    Kept(
        "a hidden stop string's own tokens get no logprobs (docs/stops-and-finalize.md §3.10a)",
        re.compile(r"\$\.choices\[\d+\]\.logprobs(\.content)?\.length"),
        cases=frozenset({"logprobs_with_stop-chat"}),
    ),
    Kept(
        "prompt logprobs have no path over vLLM's gRPC wire yet: a 400 naming the field",
        re.compile(r"status|\$|\[DONE\]"),
        cases=PROMPT_LOGPROB_CASES,
        wire="grpc",
    ),
    Kept(
        "chat echo's prompt_logprobs (vLLM adds them to any echo) have no path over gRPC yet; "
        "the echo itself is honoured",
        re.compile(r"\$\.prompt_logprobs"),
        cases=frozenset({"echo-chat"}),
        wire="grpc",
    ),
)


def split_kept(
    case: str, wire: str, divergences: list[Divergence]
) -> tuple[list[Divergence], list[tuple[Divergence, str]]]:
    """(the divergences no rule keeps, the kept ones with their reasons)."""
    unexplained: list[Divergence] = []
    kept: list[tuple[Divergence, str]] = []
    for divergence in divergences:
        rule = next((k for k in KEPT if k.covers(case, wire, divergence)), None)
        if rule is None:
            unexplained.append(divergence)
        else:
            kept.append((divergence, rule.reason))
    return unexplained, kept
