"""I/O. The reference engine's KV-event publisher, as vLLM's `ZmqEventPublisher` behaves on the
wire (docs/routing.md §9; the layout is in `wire/vllm_kv_events.py`): a PUB socket sending
`[topic, seq, payload]` with seq from 0, and a ROUTER replay socket answering `[b"", start_seq]`
with every buffered batch from `start_seq` on, then the end marker. Both bind (vLLM binds
`ipc://` and `tcp://*` endpoints; ours binds whatever it is given, loopback included).

Blocking pyzmq, driven by the engine's own loop (`engines.batching`): `publish` sends at once,
`serve_replay` answers every waiting replay request without blocking.
"""

from __future__ import annotations

import collections
import time
from typing import Final

import zmq

from smg_trio.errors import ConfigError
from smg_trio.wire.vllm_kv_events import (
    EventBatch,
    KvEvent,
    encode_batch,
    encode_published,
    encode_replay_end,
    encode_replay_reply,
)

REPLAY_BUFFER_BATCHES: Final = 10_000  # vLLM's default buffer_steps
PUB_HWM: Final = 100_000  # vLLM's default hwm


class KvEventPublisher:
    def __init__(
        self, context: zmq.Context[zmq.Socket[bytes]], endpoint: str, replay_endpoint: str | None
    ) -> None:
        self._pub = context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, PUB_HWM)
        self.replay: zmq.Socket[bytes] | None = None
        self._buffer: collections.deque[tuple[int, bytes]] = collections.deque(
            maxlen=REPLAY_BUFFER_BATCHES
        )
        self._seq = 0
        try:
            self._pub.bind(endpoint)
            if replay_endpoint is not None:
                self.replay = context.socket(zmq.ROUTER)
                self.replay.bind(replay_endpoint)
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigError(f"cannot bind the KV-event publisher: {exc.strerror}") from exc

    def publish(self, events: list[KvEvent]) -> None:
        if not events:
            return
        payload = encode_batch(EventBatch(time.time(), events, 0))
        seq, self._seq = self._seq, self._seq + 1
        self._pub.send_multipart(encode_published(seq, payload))
        self._buffer.append((seq, payload))

    def serve_replay(self) -> None:
        """Answer every replay request already waiting (never blocks)."""
        if self.replay is None:
            return
        while True:
            try:
                frames = self.replay.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 3:
                continue  # vLLM logs and ignores a malformed request too
            identity, _, start_bytes = frames
            start = int.from_bytes(start_bytes, "big")
            for seq, payload in self._buffer:
                if seq >= start:
                    self.replay.send_multipart([identity, *encode_replay_reply(seq, payload)])
            self.replay.send_multipart([identity, *encode_replay_end()])

    def close(self) -> None:
        self._pub.close(linger=0)
        if self.replay is not None:
            self.replay.close(linger=0)
