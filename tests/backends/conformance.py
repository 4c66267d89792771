"""A conformance suite every Backend must pass, against a real engine behind real sockets.

A backend test module provides an `EngineUnderTest` (a running engine, the backend connected to
it, and the engine's own view: counters, kill, pause) and runs each `check_*` coroutine below
with a fresh backend. The `HARMING_CHECKS` destroy their engine, so each gets one of its own;
the others may share one engine per runtime where the wire allows (gRPC: an engine serves any
client; a ZMQ engine handshakes once, with one frontend, as vLLM's does). Sharing must not let
one check see another's state, so `run_check` asserts that each check leaves nothing in flight,
on the backend and in the engine; counters are compared as deltas. The engine must generate
deterministically for greedy requests and count what it does (`requests_added`,
`abort_ids_received`, `requests_aborted`, `requests_active`, `tokens_generated`,
`tokens_after_abort`), as our reference engines do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import trio

from smg_trio.backends.base import Backend
from smg_trio.core.finalize import Finalized, WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.generation import Generation, Greedy, StopRules
from smg_trio.errors import EngineDead
from smg_trio.model.folder import demo_model_path
from smg_trio.neutral.events import ChoiceFinished, EngineEvent, TokenDelta
from smg_trio.neutral.runtime import Endpoint
from smg_trio.neutral.sampling import SamplingParams

ABORT_DEADLINE_S = 0.05
"""Leaving a stream must get the ABORT to the engine within this (the brief's 50 ms)."""
PROMPT: tuple[int, ...] = (300, 301, 302, 303, 304)


class EngineUnderTest(Protocol):
    """A running engine, the backend connected to it, and the engine-side view."""

    @property
    def backend(self) -> Backend: ...

    @property
    def watchdog_period_s(self) -> float: ...

    async def counters(self) -> Mapping[str, int]:
        """The engine's own counters (totals since it started, and gauges)."""
        ...

    def kill(self) -> None:
        """SIGKILL the engine: it sends nothing more, not even a dead sentinel."""
        ...

    def pause(self) -> None:
        """SIGSTOP the engine: it stays connected and says nothing."""
        ...


EngineFactory = Callable[[], AbstractAsyncContextManager[EngineUnderTest]]


def make_request(
    backend: Backend,
    *,
    max_tokens: int,
    n: int = 1,
    seed: int | None = None,
    greedy: bool = True,
    ignore_eos: bool = True,
    request_id: str = "req",
    prompt: tuple[int, ...] = PROMPT,
) -> Finalized:
    """A request finalized for `backend`'s runtime and wire, as the request layer would."""
    plan = GeneratePlan(
        request_id=request_id,
        endpoint=Endpoint.GENERATE,
        model="m",
        prompt_ids=prompt,
        sampling=SamplingParams(
            temperature=0.0 if greedy else 1.0,
            seed=seed,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
        ),
        n=n,
    )
    return finalize(plan, WorkerTarget(runtime=backend.runtime, wire=backend.wire), None)


async def collect(backend: Backend, finalized: Finalized) -> list[EngineEvent]:
    async with backend.open_stream(finalized) as events:
        return [event async for event in events]


def tokens_of(events: list[EngineEvent], choice: int = 0) -> list[int]:
    return [
        token
        for event in events
        if isinstance(event, TokenDelta) and event.choice_index == choice
        for token in event.token_ids
    ]


def finishes_of(events: list[EngineEvent]) -> dict[int, ChoiceFinished]:
    finishes = [event for event in events if isinstance(event, ChoiceFinished)]
    by_choice = {finish.choice_index: finish for finish in finishes}
    assert len(by_choice) == len(finishes), "a choice finished twice"
    return by_choice


async def wait_for_counters(
    engine: EngineUnderTest, predicate: Callable[[Mapping[str, int]], bool], within_s: float
) -> Mapping[str, int]:
    """Poll the engine's counters until `predicate` holds; fail after `within_s`."""
    with trio.fail_after(within_s):
        while True:
            counters = await engine.counters()
            if predicate(counters):
                return counters
            await trio.sleep(0.002)


# --- the checks --------------------------------------------------------------------------


async def check_ready_and_info(engine: EngineUnderTest) -> None:
    statistics = engine.backend.statistics()
    assert statistics.ready
    assert (statistics.max_model_len or 0) > len(PROMPT)
    assert statistics.open_streams == 0
    assert statistics.in_flight == 0
    assert all(status.ready for status in statistics.engines)


async def check_stream_to_completion(engine: EngineUnderTest) -> None:
    backend = engine.backend
    before = await engine.counters()
    events = await collect(backend, make_request(backend, max_tokens=12))
    after = await engine.counters()
    tokens = tokens_of(events)
    assert len(tokens) == 12
    finish = finishes_of(events)[0]
    assert isinstance(events[-1], ChoiceFinished)
    assert (finish.finish_reason, finish.completion_tokens) == ("length", 12)
    assert finish.prompt_tokens == len(PROMPT)
    assert after["tokens_generated"] - before["tokens_generated"] == 12
    assert after["requests_added"] - before["requests_added"] == 1
    assert after["abort_ids_received"] == before["abort_ids_received"]  # finished: no abort
    # Greedy is deterministic: the same request generates the same tokens.
    again = await collect(backend, make_request(backend, max_tokens=12, request_id="again"))
    assert tokens_of(again) == tokens
    assert backend.statistics().in_flight == 0


async def check_a_waiting_request_is_stepped_by_the_reader(engine: EngineUnderTest) -> None:
    """docs/performance.md §2, inline steps: while the request waits, the backend's reader runs
    its step on each batch; the finish still wakes it, and no token is lost or repeated."""
    backend = engine.backend
    consumer = trio.lowlevel.current_task()
    tokens: list[int] = []
    by_reader: list[bool] = []

    def step(batch: Sequence[EngineEvent]) -> bool:
        by_reader.append(trio.lowlevel.current_task() is not consumer)
        tokens.extend(t for e in batch if isinstance(e, TokenDelta) for t in e.token_ids)
        return True

    async with backend.open_stream(make_request(backend, max_tokens=20)) as events:
        events.consume_inline(step)
        async for batch in events.batches():
            step(batch)
    assert tokens == expected_greedy_tokens(PROMPT, 20)
    # The request waits from the moment the stream opens: the reader steps every batch but
    # the one that ends the stream, which wakes the request.
    assert by_reader.count(True) >= 1, by_reader
    assert by_reader.count(False) <= 2, by_reader


async def check_two_choices_interleave(engine: EngineUnderTest) -> None:
    backend = engine.backend
    finalized = make_request(backend, max_tokens=24, n=2, seed=7, greedy=False)
    seen_before_first_finish: set[int] = set()
    events: list[EngineEvent] = []
    async with backend.open_stream(finalized) as stream:
        async for event in stream:
            events.append(event)
            if not finishes_of(events):
                seen_before_first_finish.add(event.choice_index)
    finishes = finishes_of(events)
    assert sorted(finishes) == [0, 1]
    for choice in (0, 1):
        assert len(tokens_of(events, choice)) == 24
        assert finishes[choice].completion_tokens == 24
        last_delta = max(
            i
            for i, e in enumerate(events)
            if isinstance(e, TokenDelta) and e.choice_index == choice
        )
        assert last_delta < events.index(finishes[choice])
    assert seen_before_first_finish == {0, 1}, "the two choices did not interleave"
    assert tokens_of(events, 0) != tokens_of(events, 1), "seed + i should differ per choice"


async def _assert_aborted_promptly(engine: EngineUnderTest, left_at: float, before: int) -> None:
    counters = await wait_for_counters(
        engine, lambda c: c["abort_ids_received"] > before, within_s=2.0
    )
    elapsed = trio.current_time() - left_at
    assert elapsed < ABORT_DEADLINE_S, f"ABORT reached the engine after {elapsed * 1000:.1f} ms"
    assert counters["abort_ids_received"] == before + 1
    assert counters["requests_active"] == 0
    generated = counters["tokens_generated"]
    await trio.sleep(0.05)
    later = await engine.counters()
    assert later["tokens_generated"] == generated, "the engine kept generating"
    assert later["tokens_after_abort"] == 0
    assert engine.backend.statistics().in_flight == 0


async def check_break_aborts(engine: EngineUnderTest) -> None:
    backend = engine.backend
    before = (await engine.counters())["abort_ids_received"]
    async with backend.open_stream(make_request(backend, max_tokens=100_000)) as stream:
        received = 0
        async for event in stream:
            assert isinstance(event, TokenDelta)
            received += len(event.token_ids)
            if received >= 3:
                break
    await _assert_aborted_promptly(engine, trio.current_time(), before)


async def check_cancel_aborts(engine: EngineUnderTest) -> None:
    backend = engine.backend
    before = (await engine.counters())["abort_ids_received"]
    got_tokens = trio.Event()

    async def consume(cancel_scope: trio.CancelScope) -> None:
        with cancel_scope:
            async with backend.open_stream(make_request(backend, max_tokens=100_000)) as stream:
                async for _ in stream:
                    got_tokens.set()

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume, scope)
        await got_tokens.wait()
        scope.cancel()
    await _assert_aborted_promptly(engine, trio.current_time(), before)


async def _assert_dies(engine: EngineUnderTest, harm: Callable[[], None]) -> None:
    backend = engine.backend
    period = engine.watchdog_period_s
    async with backend.open_stream(make_request(backend, max_tokens=100_000)) as stream:
        iterator = stream.__aiter__()
        await iterator.__anext__()  # the engine is generating
        harm()
        harmed_at = trio.current_time()
        try:
            with trio.fail_after(period * 1.5 + 1.0):
                async for _ in iterator:
                    pass
        except EngineDead:
            pass
        else:
            raise AssertionError("the stream ended normally after the engine was harmed")
    elapsed = trio.current_time() - harmed_at
    assert elapsed <= period * 1.5, f"EngineDead after {elapsed:.2f} s, watchdog {period} s"
    statistics = backend.statistics()
    assert not statistics.ready
    assert statistics.in_flight == 0
    assert all(status.dead_reason for status in statistics.engines)


async def check_killed_engine_fails_streams(engine: EngineUnderTest) -> None:
    await _assert_dies(engine, engine.kill)


async def check_silent_engine_fails_streams(engine: EngineUnderTest) -> None:
    await _assert_dies(engine, engine.pause)


Check = Callable[[EngineUnderTest], Awaitable[None]]

CHECKS: tuple[Check, ...] = (
    check_ready_and_info,
    check_stream_to_completion,
    check_two_choices_interleave,
    check_a_waiting_request_is_stepped_by_the_reader,
    check_break_aborts,
    check_cancel_aborts,
    check_killed_engine_fails_streams,
    check_silent_engine_fails_streams,
)
HARMING_CHECKS: frozenset[Check] = frozenset(
    {check_killed_engine_fails_streams, check_silent_engine_fails_streams}
)
"""The checks that leave their engine dead: never run one on a shared engine."""
TIMED_CHECKS: frozenset[Check] = frozenset({check_break_aborts, check_cancel_aborts})
"""The checks bound by ABORT_DEADLINE_S of real time: a test file marks their runs serial, so
they run alone and not among other tests' processes (docs/architecture.md §8.1)."""
SHARABLE_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if c not in HARMING_CHECKS)


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


FD_SETTLE_S = 1.0
"""How long a close already under way may take to show (a gRPC channel's socket is closed by
the asyncio bridge's thread, an engine's pipes by the kernel when it is reaped)."""


FD_POLL_S = 0.01


def open_fds() -> dict[int, str]:
    """Each open descriptor of this process and what it refers to."""
    targets = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own, gone once listed
            targets[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return targets


async def assert_no_fd_left(before: dict[int, str]) -> None:
    """No descriptor beyond `before` stays open; names the ones that do."""
    for _ in range(round(FD_SETTLE_S / FD_POLL_S)):  # nothing to wait on but the count
        if len(open_fds()) <= len(before):
            break
        await trio.sleep(FD_POLL_S)
    now = open_fds()
    new = {fd: target for fd, target in now.items() if before.get(fd) != target}
    assert len(now) <= len(before), f"the backend or engine harness leaked descriptors: {new}"


def task_count() -> int:
    """Every task in this trio run, counted from the root."""

    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(child) for n in task.child_nurseries for child in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


async def assert_nothing_left_in_flight(engine: EngineUnderTest, *, engine_lives: bool) -> None:
    """What makes checks on a shared engine independent: the backend tracks no request, and a
    live engine is back to no active request (it may still be retiring one, hence the bound)."""
    statistics = engine.backend.statistics()
    assert (statistics.in_flight, statistics.open_streams) == (0, 0)
    if engine_lives:
        await wait_for_counters(engine, lambda c: c["requests_active"] == 0, within_s=1.0)


async def run_check(
    factory: EngineFactory, check: Check, *, engine_lives: bool = True, timeout_s: float = 30.0
) -> None:
    """Run one check on a fresh backend; afterwards nothing may be in flight, and no task and
    no file descriptor may be left. `engine_lives=False`: the check ends its engine."""
    fds, tasks = open_fds(), task_count()
    with trio.fail_after(timeout_s):
        async with factory() as engine:
            await engine.backend.wait_ready()
            await check(engine)
            await assert_nothing_left_in_flight(engine, engine_lives=engine_lives)
    assert task_count() == tasks, "the backend left tasks running"
    await assert_no_fd_left(fds)


def expected_greedy_tokens(prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    """What every reference engine generates for a greedy ignore_eos request on the demo
    model, computed here from the same generation source."""
    model = load_engine_model(demo_model_path())
    generation = Generation(
        model.source,
        prompt,
        Greedy(),
        StopRules(max_tokens=max_tokens, max_model_len=model.max_model_len),
    )
    return [generation.step().token_id for _ in range(max_tokens)]
