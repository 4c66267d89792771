"""I/O. A reference engine's process body over a ZMQ wire: its signals, its ZMQ context and
(optionally) its prefix cache's KV-event publisher, the handshake (`engines.handshake`), then
the continuous-batching loop (`engines.batching.BatchingLoop`) until SIGTERM/SIGINT (exit 0)
or a fatal error (the ENGINE_CORE_DEAD sentinel, docs/wire.md §A.10, and exit 1).
"""

from __future__ import annotations

import logging
import os
import signal

import zmq

from smg_trio.backends.zmq_leftovers import close_leftover_sockets
from smg_trio.engines.batching import BatchingLoop, EngineConfig, KvEvents
from smg_trio.engines.handshake import EngineSockets, HandshakeTarget, connect
from smg_trio.engines.kv_publisher import KvEventPublisher
from smg_trio.engines.prefix_cache import PrefixCache
from smg_trio.engines.wire_adapter import BLOCK_SIZE, EngineModel, WireAdapter

logger = logging.getLogger(__name__)


def run_engine(adapter: WireAdapter, model: EngineModel, config: EngineConfig) -> int:
    """Handshake, serve until SIGTERM/SIGINT (exit 0) or a fatal error (sentinel, exit 1)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    loop: BatchingLoop | None = None

    def stop(signum: int, frame: object) -> None:
        if loop is not None:
            loop.stopping = True
        else:
            raise SystemExit(0)  # still in the handshake: nothing to clean up but sockets

    previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sockets = EngineSockets([], [])
    kv_events = None
    try:
        if config.kv_events_endpoint is not None:
            publisher = KvEventPublisher(
                context, config.kv_events_endpoint, config.kv_events_replay_endpoint
            )
            capacity = config.kv_cache_blocks or model.num_gpu_blocks
            cache = PrefixCache(
                capacity_blocks=capacity, block_size=BLOCK_SIZE, seed=int.from_bytes(os.urandom(8))
            )
            kv_events = KvEvents(cache, publisher)
        target = HandshakeTarget(
            config.handshake_address, config.engine_index, config.data_addresses
        )
        connect(context, adapter, target, sockets)
        where = config.data_addresses or config.handshake_address
        logger.info("engine %d ready on %s", config.engine_index, where)
        loop = BatchingLoop(adapter, model, sockets, config, read_fd, kv_events)
        loop.run()
        return 0
    except SystemExit:
        return 0
    except Exception:
        logger.exception("engine failed")
        sockets.send_dead_sentinel()
        return 1
    finally:
        sockets.close()
        if kv_events is not None:
            kv_events.publisher.close()
        # A signal's SystemExit between a socket's creation and its handing over (in connect,
        # in the publisher) leaves it open with linger -1, and term() would wait for it for
        # ever; closed here, every socket has a bounded linger (OUTPUT_LINGER_MS at most, a
        # READY's HANDSHAKE_LINGER_MS), so term() ends.
        close_leftover_sockets(context, logger)
        context.term()
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(read_fd)
        os.close(write_fd)
