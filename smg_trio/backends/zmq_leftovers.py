"""I/O. The sockets of a ZMQ context that their owner left open, closed at linger 0 and named.

Every socket is meant to be closed by the code that owns it before its context is terminated;
`zmq_ctx_term` waits for the ones that are not, for ever if their linger is the default -1.
Whoever terminates a context calls `close_leftover_sockets` first: what it finds is a leak
(an exception or a signal between a socket's creation and its owner's cleanup), logged so it
is seen and fixed. Trio-free: the reference engines (blocking pyzmq) use it too.
"""

from __future__ import annotations

import logging

import zmq

Context = zmq.Context[zmq.Socket[bytes]]


def open_sockets(context: Context) -> list[zmq.Socket[bytes]]:
    """The sockets made by `context.socket()` and not closed yet (pyzmq keeps them weakly, for
    its own `destroy`)."""
    return [s for s in list(getattr(context, "_sockets", None) or ()) if not s.closed]


def close_leftover_sockets(context: Context, owner: logging.Logger) -> int:
    """Close, linger 0, the sockets of `context` still open; log them on `owner`. Their count."""
    leftovers = open_sockets(context)
    kinds = sorted(zmq.SocketType(int(s.type)).name for s in leftovers)
    for leftover in leftovers:
        leftover.close(linger=0)
    if leftovers:
        owner.warning(
            "closed %d ZMQ socket(s) left open by their owner: %s", len(kinds), ", ".join(kinds)
        )
    return len(leftovers)
