"""I/O. One worker's KV-event subscriber: a SUB socket on the engine's publisher and a DEALER on
its replay socket, both owned by one task, feeding the gateway process's `KvIndex`
(docs/routing.md §9).

    subscribe_kv_events(worker, endpoint, replay, index)
        loop: receive live batches ─▶ KvFeed ─▶ apply to the index
              a gap ─▶ ask the replay socket, read replies until its end marker (at most
              REPLAY_WAIT_S; the live batches wait in the SUB socket meanwhile) ─▶ apply;
              a replay that ran out of time gets a fresh DEALER (its late replies are dropped)

We connect to both endpoints (the engine binds: vLLM binds an `ipc://` or `tcp://*:PORT`
endpoint) and libzmq reconnects by itself after an engine restart; the restarted publisher's
numbers start at 0 again, which the feed reads as a restart and clears the worker. An
undecodable message is logged and skipped: routing falls back to load without it, it never
fails a request. Leaving (the worker closed) stops the SUB's disconnect monitor, then closes
the sockets and the context (zmq_lifetime.py).
"""

from __future__ import annotations

import logging
from typing import Final

import trio
import zmq

from smg_trio.backends.zmq_lifetime import open_socket_monitor, open_zmq_context
from smg_trio.backends.zmq_socket import TrioZmqSocket
from smg_trio.errors import BackendProtocolError
from smg_trio.routing.kv_feed import Apply, ClearWorker, FeedAction, KvFeed, RequestReplay
from smg_trio.routing.kv_index import KvIndex
from smg_trio.wire.vllm_kv_events import (
    Published,
    ReplayEnd,
    decode_published,
    decode_replay_reply,
    encode_replay_request,
)

logger = logging.getLogger(__name__)

REPLAY_WAIT_S: Final = 2.0  # a replay socket that does not finish by then is given up on
RECEIVE_BATCH: Final = 256
SUB_RCVHWM: Final = 100_000  # live batches queue here while a replay is read


async def subscribe_kv_events(
    worker: str,
    endpoint: str,
    replay_endpoint: str | None,
    index: KvIndex,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep `index` up to date with `worker`'s engine until cancelled."""
    feed = KvFeed(can_replay=replay_endpoint is not None)
    async with open_zmq_context() as context:
        with (
            TrioZmqSocket(context.socket(zmq.SUB)) as sub,
            open_socket_monitor(sub, zmq.EVENT_DISCONNECTED) as monitor,
        ):
            sub.socket.setsockopt(zmq.RCVHWM, SUB_RCVHWM)
            sub.socket.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(endpoint)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_clear_on_disconnect, worker, monitor, feed, index)
                await _receive(worker, context, sub, replay_endpoint, feed, index, task_status)


async def _clear_on_disconnect(
    worker: str, monitor: TrioZmqSocket, feed: KvFeed, index: KvIndex
) -> None:
    """The publisher's connection dropped: its engine exited or restarted, and its cache with
    it. The worker's blocks are cleared and the feed starts over (a late first batch replays
    the new publisher's history from 0)."""
    while True:
        await monitor.receive_multipart()
        logger.info("worker %s: KV publisher disconnected; its blocks are forgotten", worker)
        index.clear(worker)
        feed.restart()


async def _receive(
    worker: str,
    context: zmq.Context[zmq.Socket[bytes]],
    sub: TrioZmqSocket,
    replay_endpoint: str | None,
    feed: KvFeed,
    index: KvIndex,
    task_status: trio.TaskStatus[None],
) -> None:
    replay = None if replay_endpoint is None else _replay_socket(context, replay_endpoint)
    try:
        task_status.started()
        while True:
            messages = await sub.receive_batch(RECEIVE_BATCH)
            for frames in messages:
                try:
                    published = decode_published(frames)
                except BackendProtocolError as exc:
                    logger.warning("worker %s: KV event skipped: %s", worker, exc)
                    continue
                actions = feed.live(published.seq, published.batch)
                if await _run(actions, worker, feed, index, replay):
                    continue
                # A replay that did not finish may still answer: its late replies must
                # not be read as the next replay's, so the socket is replaced.
                assert replay is not None
                assert replay_endpoint is not None
                replay.close()
                replay = _replay_socket(context, replay_endpoint)
    finally:
        if replay is not None:
            replay.close()


def _replay_socket(context: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> TrioZmqSocket:
    replay = TrioZmqSocket(context.socket(zmq.DEALER))
    try:
        replay.connect(endpoint)
    except BaseException:
        replay.close()
        raise
    return replay


async def _run(
    actions: list[FeedAction],
    worker: str,
    feed: KvFeed,
    index: KvIndex,
    replay: TrioZmqSocket | None,
) -> bool:
    """Carry out the feed's actions; False when a replay did not finish in time."""
    finished = True
    for action in actions:
        match action:
            case Apply(batch):
                index.apply(worker, batch.events)
            case ClearWorker():
                logger.info("worker %s: KV publisher restarted; its blocks are forgotten", worker)
                index.clear(worker)
            case RequestReplay(start_seq):
                assert replay is not None
                finished = await _replay(start_seq, worker, feed, index, replay) and finished
    return finished


async def _replay(
    start_seq: int, worker: str, feed: KvFeed, index: KvIndex, replay: TrioZmqSocket
) -> bool:
    with trio.move_on_after(REPLAY_WAIT_S) as waited:
        await replay.send_multipart(encode_replay_request(start_seq))
        while True:
            try:
                reply = decode_replay_reply(await replay.receive_multipart())
            except BackendProtocolError as exc:
                logger.warning("worker %s: KV replay reply skipped: %s", worker, exc)
                continue
            if isinstance(reply, ReplayEnd):
                break
            assert isinstance(reply, Published)
            for action in feed.replayed(reply.seq, reply.batch):
                if isinstance(action, Apply):
                    index.apply(worker, action.batch.events)
    if waited.cancelled_caught:
        logger.warning("worker %s: KV replay from %d did not finish; going on", worker, start_seq)
    for action in feed.replay_done():
        if isinstance(action, Apply):
            index.apply(worker, action.batch.events)
    return not waited.cancelled_caught
