"""I/O. The process's one asyncio event-loop thread, and the hand-offs between it and trio.

grpclib runs only on asyncio, so every gRPC call runs as a task on ONE asyncio loop in a
dedicated thread, shared by every user in the process (docs/architecture.md §4, measurements in
docs/ecosystem.md §1):

- `open_asyncio_bridge()` hands out the process's bridge, starting its thread on first use;
  when the last user leaves, every leftover task is cancelled and the thread is joined.
- `AsyncioBridge.run(async_fn, ...)` runs one coroutine and returns its result to trio. A trio
  cancel cancels the asyncio task and `run` waits until that task has finished, so whatever
  the task does on cancellation (grpclib: send RST_STREAM) is done when `Cancelled` is raised.
- `AsyncioBridge.start_soon(...)` starts a long task (a streamed call) that reports its outcome
  through a callback on the loop thread; its items travel through a `TrioHandoff`.
- `TrioHandoff` carries items from the loop thread into trio: a list plus at most ONE pending
  `TrioToken.run_sync_soon` wake-up, so a busy stream costs one trio callback per batch instead
  of one per item (docs/ecosystem.md §1: 17-19 µs/message against 26-28 µs with one callback each;
  this project's numbers are in bench/RESULTS.md, "gRPC backend throughput").

A callback given to `run_sync_soon` must never raise: that is a TrioInternalError which ends
the whole `trio.run`. Both of ours catch what they call, and tolerate a finished trio run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import outcome
import trio

logger = logging.getLogger(__name__)

T = TypeVar("T")
Item = TypeVar("Item")

LOOP_THREAD_NAME: Final = "smg-trio-asyncio"


class BridgeTask:
    """A task started with `start_soon`; `cancel()` may be called from any thread, repeatedly."""

    __slots__ = ("_bridge", "_cancel_requested", "_task")

    def __init__(self, bridge: AsyncioBridge) -> None:
        self._bridge = bridge
        self._task: asyncio.Task[Any] | None = None  # touched on the loop thread only
        self._cancel_requested = False

    def cancel(self) -> None:
        """Cancel the asyncio task (grpclib answers with RST_STREAM); its outcome still comes."""
        if not self._cancel_requested:
            self._cancel_requested = True
            self._bridge._call_soon(self._cancel_on_loop)

    def _cancel_on_loop(self) -> None:
        # FIFO callbacks: the task was created by an earlier callback, unless the bridge is
        # already closing, in which case shutdown cancels every task anyway.
        if self._task is not None:
            self._task.cancel()


@dataclass(frozen=True, slots=True)
class BridgeStatistics:
    running: bool
    """The loop thread is alive and accepts work."""
    users: int
    """`open_asyncio_bridge` blocks currently holding this bridge."""


class AsyncioBridge:
    """One asyncio loop in its own thread. Get it with `open_asyncio_bridge()`."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=LOOP_THREAD_NAME, daemon=True)
        self._lock = threading.Lock()  # orders `_closed` against scheduling onto the loop
        self._closed = False
        self._users = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def statistics(self) -> BridgeStatistics:
        return BridgeStatistics(running=not self._closed, users=self._users)

    def start_soon(
        self,
        async_fn: Callable[..., Awaitable[T]],
        *args: Any,
        on_done: Callable[[outcome.Outcome[T]], None],
    ) -> BridgeTask:
        """Start `async_fn(*args)` as a task on the loop; report its outcome to `on_done`.

        `on_done` runs ON THE LOOP THREAD, exactly once, even when the task is cancelled before
        it started; it must be quick and must not raise (push into a `TrioHandoff`). A
        cancelled task reports `Error(asyncio.CancelledError())`. Raises
        `trio.ClosedResourceError` if the bridge is shut down.
        """
        handle = BridgeTask(self)

        def report(task: asyncio.Task[T]) -> None:
            result: outcome.Outcome[T]
            if task.cancelled():
                result = outcome.Error(asyncio.CancelledError())
            elif (error := task.exception()) is not None:
                result = outcome.Error(error)
            else:
                result = outcome.Value(task.result())
            try:
                on_done(result)
            except Exception:  # a loop callback that raised would only be logged by asyncio
                logger.exception("an asyncio bridge completion callback raised")

        def create() -> None:
            task = self._loop.create_task(_as_coroutine(async_fn, *args))
            task.add_done_callback(report)
            handle._task = task

        if not self._call_soon(create):
            raise trio.ClosedResourceError("the asyncio bridge is shut down")
        return handle

    async def run(self, async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `async_fn(*args)` on the loop and return its result (or raise its exception).

        Cancelling the caller cancels the asyncio task and waits for it to finish (the
        coroutine must honour cancellation promptly, as grpclib does). If the bridge shuts
        down first, raises `trio.ClosedResourceError`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        waiter = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        raise_cancel: trio.lowlevel.RaiseCancelT | None = None
        resumed = False

        def resume(result: outcome.Outcome[T]) -> None:  # trio thread; must never raise
            nonlocal resumed
            if resumed:
                return
            resumed = True
            if isinstance(result, outcome.Error) and isinstance(
                result.error, asyncio.CancelledError
            ):
                if raise_cancel is not None:
                    result = outcome.capture(raise_cancel)
                else:
                    result = outcome.Error(
                        trio.ClosedResourceError("the asyncio bridge shut down during the call")
                    )
            trio.lowlevel.reschedule(waiter, result)

        def on_done(result: outcome.Outcome[T]) -> None:  # loop thread
            with contextlib.suppress(trio.RunFinishedError):  # else nobody is left to tell
                token.run_sync_soon(resume, result)

        task = self.start_soon(async_fn, *args, on_done=on_done)

        def abort(cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            nonlocal raise_cancel
            raise_cancel = cancel
            task.cancel()
            return trio.lowlevel.Abort.FAILED  # `resume` delivers once the task has finished

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    async def task_count(self) -> int:
        """Tasks alive on the loop, not counting the one asking (for leak checks in tests)."""

        async def count() -> int:
            return len(asyncio.all_tasks()) - 1

        return await self.run(count)

    # --- lifetime ---------------------------------------------------------------------------

    def _call_soon(self, callback: Callable[[], None]) -> bool:
        """Schedule `callback` on the loop thread; False once the bridge is shut down."""
        with self._lock:
            if self._closed:
                return False
            self._loop.call_soon_threadsafe(callback)
            return True

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            leftovers = asyncio.all_tasks(self._loop)
            if leftovers:
                logger.warning("asyncio bridge: cancelling %d leftover tasks", len(leftovers))
                for task in leftovers:
                    task.cancel()
                gathered = asyncio.gather(*leftovers, return_exceptions=True)
                self._loop.run_until_complete(gathered)
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _stop(self) -> None:
        """Stop the loop (leftover tasks are cancelled and reported) and join the thread."""
        with self._lock:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._thread.join)


async def _as_coroutine(async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await async_fn(*args)


class _SharedBridge:
    """The process's bridge and how many `open_asyncio_bridge` blocks hold it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bridge: AsyncioBridge | None = None

    def acquire(self) -> AsyncioBridge:
        with self.lock:
            if self.bridge is None:
                self.bridge = AsyncioBridge()
                self.bridge._thread.start()
            self.bridge._users += 1
            return self.bridge

    def release(self, bridge: AsyncioBridge) -> bool:
        """Drop one user; True if it was the last one (the caller then stops the bridge)."""
        with self.lock:
            bridge._users -= 1
            if bridge._users:
                return False
            if self.bridge is bridge:
                self.bridge = None  # a new user from now on starts a fresh bridge
            return True


_SHARED: Final = _SharedBridge()


@asynccontextmanager
async def open_asyncio_bridge() -> AsyncIterator[AsyncioBridge]:
    """The process's asyncio bridge, held for the duration of the block.

    The loop thread starts with the first holder and is stopped and joined (shielded) when
    the last holder leaves, so no thread outlives its owners.
    """
    bridge = _SHARED.acquire()
    try:
        yield bridge
    finally:
        if _SHARED.release(bridge):
            await bridge._stop()


@dataclass(slots=True)
class HandoffStatistics:
    """Counters of one `TrioHandoff` (written in trio only)."""

    batches: int = 0
    items: int = 0
    delivery_errors: int = 0


class TrioHandoff(Generic[Item]):
    """Items from any thread into trio, coalesced into batches.

    Create it in trio with the batch consumer `deliver`, which runs in trio (synchronously,
    from a `run_sync_soon` callback) with every item pushed since the previous batch, oldest
    first. `deliver` must be quick and must not block; an exception from it is logged and
    counted, never propagated (it would crash `trio.run`). `push` never blocks and never
    raises; after `close()`, or once the trio run has finished, pushed items are dropped.
    """

    __slots__ = ("_closed", "_deliver", "_items", "_lock", "_token", "_wake_pending", "stats")

    def __init__(self, deliver: Callable[[list[Item]], None]) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._deliver = deliver
        self._items: list[Item] = []
        self._lock = threading.Lock()
        self._wake_pending = False
        self._closed = False
        self.stats = HandoffStatistics()

    def push(self, item: Item) -> None:
        """Queue `item`; schedule a wake-up unless one is already pending. Any thread."""
        with self._lock:
            if self._closed:
                return
            self._items.append(item)
            if self._wake_pending:
                return
            self._wake_pending = True
        try:
            self._token.run_sync_soon(self._wake)
        except trio.RunFinishedError:
            self.close()

    def close(self) -> None:
        """Drop what is queued and everything pushed from now on. Any thread; idempotent."""
        with self._lock:
            self._closed = True
            self._items = []

    def _wake(self) -> None:
        """Runs in trio via `run_sync_soon`: hand over the batch. Never raises."""
        with self._lock:
            self._wake_pending = False
            batch, self._items = self._items, []
        if not batch:
            return
        self.stats.batches += 1
        self.stats.items += len(batch)
        try:
            self._deliver(batch)
        except Exception:
            self.stats.delivery_errors += 1
            logger.exception("a TrioHandoff consumer raised; %d items lost", len(batch))
