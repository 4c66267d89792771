"""Pure. One process-wide budget for the memory requests hold while in flight (docs/limits.md §4).

What a request holds before an engine sees it grows with what the client sent: its body, and
its prompt's token ids. Each request reserves those bytes from one shared `MemoryBudget` (the
body as it is read, or as its `content-length` declares it, before a byte is read; the prompt
ids once prepared) and gives them back when it ends. A request that would take the budget past
its limit is refused with 429 `memory_budget_exceeded` and a `Retry-After`, before it costs
more; the process never grows past the limit on their account.

A request is always admitted when nothing else is in flight, so a limit smaller than one
large body slows the gateway to one such request at a time instead of refusing it forever.

This is not the concurrency admission queue (routing/): that one bounds how many requests run;
this one bounds how many bytes they hold.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Final

from smg_trio.errors import ClientError

# The default budget is this fraction of the machine's physical memory.
DEFAULT_FRACTION: Final = 0.25
# What one prompt token id costs while a request holds it: a tuple slot and an int object.
BYTES_PER_PROMPT_TOKEN: Final = 40
RETRY_AFTER_S: Final = 1


class MemoryBudgetExceeded(ClientError):
    """429: the requests in flight already hold the memory this one would need."""

    def __init__(self, wanted: int, limit: int) -> None:
        super().__init__(
            f"the gateway is holding its memory budget ({limit // (1024 * 1024)} MiB) for the "
            f"requests in flight; this one needs {wanted} bytes more. Retry shortly.",
            status=429,
            code="memory_budget_exceeded",
        )
        self.retry_after_s = RETRY_AFTER_S


def default_budget_bytes() -> int:
    """A quarter of the machine's physical memory (1 GiB when the system cannot say)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1024**3
    return int(total * DEFAULT_FRACTION)


def memory_budget(limit_mb: int | None) -> MemoryBudget:
    """The budget `--memory-budget-mb` asks for; None: `default_budget_bytes()`."""
    return MemoryBudget(default_budget_bytes() if limit_mb is None else limit_mb * 1024 * 1024)


def prompt_bytes(prompts: Sequence[Sequence[int]]) -> int:
    """What holding these prompts' token ids costs (BYTES_PER_PROMPT_TOKEN each)."""
    return BYTES_PER_PROMPT_TOKEN * sum(len(ids) for ids in prompts)


class MemoryBudget:
    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"a memory budget must be positive, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self.in_flight_bytes = 0

    def reserve(self, size: int = 0) -> Reservation:
        """A reservation of `size` bytes, to be used as a context manager (released on exit)."""
        reservation = Reservation(self)
        reservation.grow(size)
        return reservation

    def _take(self, size: int, held_by_caller: int) -> None:
        others = self.in_flight_bytes - held_by_caller
        if others > 0 and self.in_flight_bytes + size > self.limit_bytes:
            raise MemoryBudgetExceeded(size, self.limit_bytes)
        self.in_flight_bytes += size


class Reservation:
    """Bytes one request holds from a `MemoryBudget`; `grow` may raise MemoryBudgetExceeded."""

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget
        self.bytes = 0

    def grow(self, size: int) -> None:
        if size <= 0:
            return
        self._budget._take(size, self.bytes)
        self.bytes += size

    def release(self) -> None:
        self._budget.in_flight_bytes -= self.bytes
        self.bytes = 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
