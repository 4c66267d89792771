"""Retries happen only before the first byte (docs/routing.md §3): the guard between a request
and its client holds a retryable failure while nothing was sent, and forwards everything else."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import (
    BackendUnavailable,
    ClientError,
    EngineDead,
    EngineRejected,
    GatewayError,
)
from smg_trio.handoff import Taken
from smg_trio.request.retrying import FirstByteGuard
from smg_trio.routing.workers import Outcome


class ClientSide:
    """The client's sink: what reached it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.failures: list[GatewayError] = []

    def gone_before_engine(self) -> bool:
        return False

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        self.sent.extend(payloads)
        await trio.lowlevel.checkpoint()

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        self.sent.extend(payloads)
        return Taken.ALL

    async def send_body(self, body: bytes) -> None:
        self.sent.append(body)
        await trio.lowlevel.checkpoint()

    async def end_stream(self, end: StreamEnd) -> None:
        await trio.lowlevel.checkpoint()

    async def fail(self, error: GatewayError) -> None:
        self.failures.append(error)
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize(
    "error",
    [
        BackendUnavailable("not connected"),
        EngineDead("gone"),
        EngineRejected("overloaded", status=429),
        EngineRejected("aborted", status=503),
    ],
)
async def test_a_worker_failure_before_any_byte_is_held_for_a_retry(error: GatewayError) -> None:
    client = ClientSide()
    guard = FirstByteGuard(client, may_hold=True)
    with trio.fail_after(5):
        await guard.fail(error)
    assert (guard.held, client.failures, guard.outcome()) == (True, [], Outcome.FAILURE)


async def test_after_the_first_byte_the_failure_reaches_the_client() -> None:
    client = ClientSide()
    guard = FirstByteGuard(client, may_hold=True)
    with trio.fail_after(5):
        await guard.send_chunks([b"chunk"])
        await guard.fail(EngineDead("gone mid-stream"))
    assert guard.held is False
    assert [type(error) for error in client.failures] == [EngineDead]
    assert guard.outcome() is Outcome.FAILURE  # it still counts against the worker


async def test_the_last_attempt_and_request_errors_are_never_held() -> None:
    with trio.fail_after(5):
        last = ClientSide()
        await FirstByteGuard(last, may_hold=False).fail(EngineDead("gone"))
        bad = ClientSide()
        guard = FirstByteGuard(bad, may_hold=True)
        await guard.fail(ClientError("prompt too long", param="prompt"))
        refused = ClientSide()
        await FirstByteGuard(refused, may_hold=True).fail(EngineRejected("bad grammar"))
    assert [len(side.failures) for side in (last, bad, refused)] == [1, 1, 1]
    assert guard.outcome() is Outcome.NEUTRAL
