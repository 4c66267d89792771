"""I/O. How the gateway's ZMQ contexts and socket monitors end: always, and within a bound
(docs/resilience.md §1).

- `open_zmq_context()`: a fresh context (never the global one) for the block. Every socket is
  closed, linger 0, by the task that owns it, before the block ends. Leaving closes whatever
  is still open (linger 0) and logs it by type (zmq_leftovers.py): each one is a socket that
  outlived its owner.
  Then `zmq_ctx_term` runs on a thread of its own for at most `TERM_BOUND_S`. It waits for
  libzmq's reaper, which waits for the I/O thread, and a wedged I/O thread would make it wait
  for ever; past the bound the context is abandoned with an error naming it, and the gateway
  goes on stopping.
- `open_socket_monitor(socket, events)`: the PAIR socket receiving `socket`'s events, for the
  block. Leaving stops the monitor, then closes the PAIR. The other order wedges the
  context's I/O thread: libzmq writes each event from that thread with a blocking send, and
  once the PAIR is gone the send has no reader, so the next event (an engine or publisher
  disconnecting as we stop) blocks it, and every socket of the context with it, until the
  context is terminated (libzmq issue #3575; `test_zmq_lifetime.py` shows it).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Final

import trio
import zmq

from smg_trio.backends.zmq_leftovers import Context, close_leftover_sockets
from smg_trio.backends.zmq_socket import TrioZmqSocket

logger = logging.getLogger(__name__)

TERM_BOUND_S: Final = 5.0
"""The longest a context's termination may take before it is abandoned (all of its sockets
closed with linger 0, it takes milliseconds)."""


@contextlib.asynccontextmanager
async def open_zmq_context() -> AsyncIterator[Context]:
    """A fresh ZMQ context for the block; leaving is bounded by `TERM_BOUND_S` (module doc)."""
    context: Context = zmq.Context()
    try:
        yield context
    finally:
        close_leftover_sockets(context, logger)
        if not await terminate_within(context, TERM_BOUND_S):
            logger.error(
                "the ZMQ context %#x did not terminate within %.1f s; abandoned (its thread "
                "stays blocked in zmq_ctx_term)",
                id(context),
                TERM_BOUND_S,
            )


async def terminate_within(context: Context, bound_s: float) -> bool:
    """Terminate `context` on a thread of its own; False if that took longer than `bound_s`
    seconds of real time (the thread is then left to finish, or never: it is a daemon).

    Real time, not trio's clock, and shielded: this is cleanup, it runs when the caller is
    already cancelled, and a test's virtual clock must not end it early."""
    terminating = threading.Thread(target=context.term, name="zmq-context-term", daemon=True)
    terminating.start()
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(terminating.join, bound_s)
    return not terminating.is_alive()


@contextlib.contextmanager
def open_socket_monitor(monitored: TrioZmqSocket, events: int) -> Iterator[TrioZmqSocket]:
    """The PAIR socket receiving `monitored`'s `events` (zmq.EVENT_*), owned by the caller's
    task for the block; leaving stops the monitor and then closes the PAIR (module doc).

    Nest it inside the monitored socket's block: a monitored socket that is already closed
    cannot be told to stop (libzmq stops its monitor when it reaps the socket, too late to
    keep the order)."""
    raw = monitored.socket
    try:
        pair = TrioZmqSocket(raw.get_monitor_socket(events))
    except BaseException:
        # The monitor may be on with no PAIR connected: its first event would block for good.
        with contextlib.suppress(zmq.ZMQError):
            raw.disable_monitor()
        raise
    try:
        yield pair
    finally:
        try:
            if not monitored.closed:
                raw.disable_monitor()
        finally:
            pair.close()
