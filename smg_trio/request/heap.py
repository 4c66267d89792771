"""I/O. Handing freed heap memory back to the operating system (glibc's allocator).

After a large request the gateway's RSS stayed near its peak (docs/limits.md §2): the memory was
free inside the process, not in use. Two glibc behaviours keep it:

- Large blocks (request bodies, decoded prompts, templated text) are `mmap`ed only above a
  threshold that glibc raises to the size of the last large block freed (up to 32 MB), so after
  the first 8 MB body every later one lives in the heap and stays there when freed.
  `pin_mmap_threshold` fixes the threshold at 1 MB: a block that large is its own mapping and
  goes back to the system the moment it is freed.
- Many small blocks (a tokenizer's per-token records) leave free space scattered through the
  heap and the worker threads' arenas, which only `malloc_trim` returns.
  `release_free_heap` calls it; the gateway does so after a request whose body was large, on a
  worker thread, one trim at a time (`HeapReleaser`).

Elsewhere (musl, macOS) both are no-ops: the functions are looked up once, and absent is fine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Final

import trio

logger = logging.getLogger(__name__)

# glibc's mallopt parameter number (malloc.h).
M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_BYTES: Final = 1024 * 1024
# After a request whose body was at least this large, the freed heap is handed back to the
# system (`HeapReleaser`; docs/limits.md §2). Per request, never per token.
RELEASE_HEAP_AFTER_BYTES: Final = 1024 * 1024


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - present on glibc only
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_LIBC: Final = _glibc()


def pin_mmap_threshold() -> bool:
    """Allocate blocks of 1 MB and more as their own mappings; True if the allocator took it."""
    if _LIBC is None:
        return False
    taken = bool(_LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not taken:
        logger.warning("mallopt(M_MMAP_THRESHOLD) was refused; large blocks stay in the heap")
    return taken


def release_free_heap() -> None:
    """Return the heap's free pages to the system (glibc `malloc_trim(0)`); a blocking call."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class HeapReleaser:
    """`release_free_heap` off the event loop, one trim at a time (the gateway's one)."""

    def __init__(self) -> None:
        self._lock = trio.Lock()
        self._wanted = False

    async def release(self) -> None:
        """Hand the freed heap back to the system (`release_free_heap`), off the loop."""
        # One trim at a time; a request ending during a trim asks for one more after it, so
        # the last large request of a burst is always followed by a trim.
        self._wanted = True
        if self._lock.locked():
            return
        # Shielded and bounded (at most two trims of milliseconds each, off the event loop).
        with trio.CancelScope(shield=True):
            async with self._lock:
                for _ in range(2):
                    if not self._wanted:
                        break
                    self._wanted = False
                    await trio.to_thread.run_sync(release_free_heap)
