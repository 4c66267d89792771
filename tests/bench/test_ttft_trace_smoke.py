"""`python -m bench ttft_trace` still runs end to end at a tiny size: every step of one
stream's first token is stamped for every request, and the gateway's functions are put back
afterwards (the trace wraps them in its own process only)."""

from __future__ import annotations

import trio

from bench.ttft_trace import STAGES, trace
from smg_trio import gateway as gateway_module

REQUESTS = 3


async def test_three_requests_stamp_every_step_and_leave_the_gateway_unwrapped() -> None:
    handle = gateway_module.Gateway.handle
    with trio.fail_after(30):
        steps = await trace(REQUESTS, step_ms=0.0, output_tokens=4)
    assert list(steps) == list(STAGES[1:])
    for stage, values in steps.items():
        assert len(values) == REQUESTS, stage
    # Each step after the engine's answer comes after the one before it.
    for stage in ("chunk", "written", "first_byte"):
        assert all(value >= 0 for value in steps[stage]), (stage, steps[stage])
    assert gateway_module.Gateway.handle is handle
