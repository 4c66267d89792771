"""refuse_unsupported: what a worker's capability row says its engine cannot take is a 400
naming the field, the first in a fixed order (core/unsupported.py, docs/stops-and-finalize.md
§1.3 step 2)."""

from __future__ import annotations

import msgspec
import pytest

from smg_trio.core.plan import GeneratePlan
from smg_trio.core.unsupported import refuse_unsupported
from smg_trio.errors import ClientError
from smg_trio.neutral.capabilities import (
    SUPPORTED_PAIRS,
    BadWords,
    StringStops,
    capabilities_of,
)
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import ConstraintKind, SamplingParams


def plan(n: int = 1, **sampling: object) -> GeneratePlan:
    return GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.CHAT,
        model="m",
        prompt_ids=(1, 2),
        sampling=msgspec.convert({"max_tokens": 8, **sampling}, SamplingParams),
        n=n,
    )


def refused_param(p: GeneratePlan, runtime: Runtime, wire: Wire) -> str | None:
    try:
        refuse_unsupported(p, capabilities_of(runtime, wire))
    except ClientError as exc:
        return f"{exc.status} {exc.param}"
    return None


def test_the_first_field_the_engine_cannot_take_is_the_one_named() -> None:
    everything = plan(min_tokens=2, stop=["x"], bad_words=["y"], logit_bias=[[5, 1.0]])
    assert refused_param(everything, Runtime.MLX, Wire.GRPC) == "400 min_tokens"
    assert refused_param(everything, Runtime.TRTLLM, Wire.GRPC) == "400 logit_bias"
    assert refused_param(everything, Runtime.SGLANG, Wire.GRPC) == "400 bad_words"
    assert refused_param(plan(stop=["x"]), Runtime.MLX, Wire.GRPC) == "400 stop"


@pytest.mark.parametrize(("runtime", "wire"), sorted(SUPPORTED_PAIRS, key=str))
def test_each_row_refuses_exactly_what_it_says(runtime: Runtime, wire: Wire) -> None:
    caps = capabilities_of(runtime, wire)
    checks = [
        (plan(stop=["x"]), caps.string_stops is not StringStops.REFUSED),
        (plan(min_tokens=1), caps.min_tokens),
        (plan(logit_bias=[[5, 1.0]]), caps.logit_bias),
        (plan(allowed_token_ids=[5]), caps.allowed_token_ids),
        (plan(bad_words=["x"]), caps.bad_words is not BadWords.REFUSED),
        (plan(n=2, temperature=0.0), caps.greedy_n),
        (plan(logprobs=2), caps.top_logprobs),
        (plan(top_k=500), caps.top_k_below is None),
        (plan(repetition_penalty=3.0), caps.max_repetition_penalty is None),
    ]
    for kind in ConstraintKind:
        constraint = {"kind": kind, "param": "p", "text": "a", "choices": ["a"]}
        checks.append((plan(constraint=constraint), caps.accepts(kind)))
        after = {**constraint, "after_reasoning": True}
        checks.append(
            (plan(constraint=after), caps.accepts(kind) and caps.constraint_after_reasoning)
        )
    for p, honoured in checks:
        assert (refused_param(p, runtime, wire) is None) == honoured, (p.sampling, p.n)
