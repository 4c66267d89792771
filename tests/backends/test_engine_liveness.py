"""The ZMQ backend's liveness (docs/resilience.md §1–§3) against in-process peer engines on the
real wire: a closed connection is found without traffic, probes go to silent engines, the
first-token silence limit is shorter than the generating one, and an engine dead by silence is
taken back, with what it was given up on aborted, when it speaks again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from smg_trio.backends.base import EngineStream
from smg_trio.backends.zmq_backend import ZmqBackend
from smg_trio.backends.zmq_lifetime import open_zmq_context
from smg_trio.backends.zmq_liveness import DISCONNECT_RECHECKS_S
from smg_trio.errors import EngineDead
from smg_trio.wire import vllm_zmq
from smg_trio.wire.vllm_zmq_outputs import EngineCoreOutputs, UtilityOutput, encode_outputs
from smg_trio.wire.zmq_transport import RequestType, decode_abort
from tests.backends.conformance import make_request
from tests.backends.test_zmq_backend_protocol import (
    Context,
    PeerEngine,
    backend_with_peers,
    is_probe,
    step,
    until,
)

PERIOD_S = 1.0
SILENCE_S = 5.0
GENERATING_S = 10.0
POLL_S = SILENCE_S / 20  # under the autojump clock: each poll costs one 50 ms jump
OPTIONS: dict[str, Any] = {
    "probe_period_s": PERIOD_S,
    "engine_silence_s": SILENCE_S,
    "watchdog_period_s": GENERATING_S,
}


@pytest.fixture
async def context() -> AsyncIterator[Context]:
    async with open_zmq_context() as context:
        yield context


@pytest.fixture
def slow_autojump_clock() -> trio.testing.MockClock:
    # Jump only after 50 ms of real idleness: messages cross libzmq's I/O thread meanwhile.
    return trio.testing.MockClock(autojump_threshold=0.05)


async def next_probe(peer: PeerEngine) -> vllm_zmq.UtilityCall:
    frames = await peer.input.receive_multipart()
    assert RequestType.of_frame(frames[0]) is RequestType.UTILITY
    assert is_probe(frames[1])
    return vllm_zmq.decode_utility_call(frames[1])


async def answer(peer: PeerEngine, call: vllm_zmq.UtilityCall) -> None:
    reply = EngineCoreOutputs(
        engine_index=peer.index,
        utility_output=UtilityOutput(call_id=call.call_id, failure_message=None, result=None),
    )
    await peer.output.send_multipart([encode_outputs(reply)])


async def next_abort(peer: PeerEngine) -> tuple[str, ...]:
    """The ids of the next ABORT the peer receives, past any probes."""
    while True:
        frames = await peer.input.receive_multipart()
        if RequestType.of_frame(frames[0]) is RequestType.ABORT:
            return decode_abort(frames[1])
        assert is_probe(frames[1])


async def stream_until_dead(stream: EngineStream, match: str | None = None) -> None:
    """Read `stream` to the EngineDead it must end with (its message matching `match`)."""
    with pytest.raises(EngineDead, match=match):
        async for _ in stream:
            pass


async def until_ready_is(backend: ZmqBackend, ready: bool) -> None:
    while backend.statistics().ready is not ready:  # noqa: ASYNC110 (virtual-time polling)
        await trio.sleep(POLL_S)


@pytest.mark.serial  # a real-time bound: under the parallel phase's load it took 2 s once
async def test_a_closed_engine_connection_is_found_without_traffic(context: Context) -> None:
    with trio.fail_after(5):
        async with backend_with_peers(context, **OPTIONS) as (backend, (peer,)):
            peer.close()  # what the kernel does for a killed process
            start = trio.current_time()
            await until(lambda: not backend.statistics().ready)
            assert trio.current_time() - start < 0.5
            assert "connection is gone" in (backend.statistics().engines[0].dead_reason or "")


async def test_a_disconnect_takes_out_only_the_rank_whose_connection_is_gone(
    context: Context,
) -> None:
    with trio.fail_after(5):
        async with backend_with_peers(context, 2, **OPTIONS) as (backend, peers):
            peers[1].close()  # one data-parallel rank of two; the event names neither
            await until(lambda: not backend.statistics().engines[1].ready)
            await trio.sleep(0.05)  # the probe to rank 0 went out and was routed
            assert backend.statistics().engines[0].ready
            assert backend.statistics().ready


async def test_a_disconnect_probes_every_engine_again_shortly_after(context: Context) -> None:
    # The first probe can enter a connection libzmq reported gone but the ROUTER still routes
    # to, and be lost: two rechecks follow. With probes otherwise 5 s apart, three come at once.
    with trio.fail_after(3):
        options = {**OPTIONS, "probe_period_s": 5.0}
        async with backend_with_peers(context, 2, **options) as (_, peers):
            peers[1].close()
            for _ in range(1 + len(DISCONNECT_RECHECKS_S)):
                await next_probe(peers[0])


@pytest.mark.serial  # slow_autojump_clock: 50 ms of real idleness must mean libzmq delivered
async def test_an_idle_engine_that_answers_probes_stays_and_one_that_does_not_is_out(
    context: Context, slow_autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(SILENCE_S * 20):
        async with backend_with_peers(context, **OPTIONS) as (backend, (peer,)):
            for _ in range(3):  # longer than a silence of idle time, every probe answered
                with trio.fail_after(PERIOD_S * 2.5):
                    await answer(peer, await next_probe(peer))
                await trio.sleep(SILENCE_S / 2)
                assert backend.statistics().ready
            await answer(peer, await next_probe(peer))
            answered_at = trio.current_time()
            await until_ready_is(backend, False)  # the next probes go unanswered
            # The next probe goes out one to two periods after the answer.
            silent_s = trio.current_time() - answered_at
            assert SILENCE_S + PERIOD_S <= silent_s <= SILENCE_S * 1.2 + 2 * PERIOD_S
            reason = backend.statistics().engines[0].dead_reason or ""
            assert "liveness probe" in reason
            # Still probed while out; its answer takes it back.
            await answer(peer, await next_probe(peer))
            await until_ready_is(backend, True)


@pytest.mark.serial  # slow_autojump_clock: 50 ms of real idleness must mean libzmq delivered
async def test_first_token_silence_is_short_and_generating_silence_is_long(
    context: Context, slow_autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(GENERATING_S * 5):
        async with backend_with_peers(context, **OPTIONS) as (backend, (peer,)):
            # Waiting for a first token: dead after engine_silence_s.
            async with backend.open_stream(make_request(backend, max_tokens=8)) as stream:
                first = await peer.next_add()
                sent_at = trio.current_time()
                await stream_until_dead(stream, "first token")
            assert SILENCE_S <= trio.current_time() - sent_at <= SILENCE_S * 1.2
            await answer(peer, await next_probe(peer))  # taken back, its given-up request aborted
            await until_ready_is(backend, True)
            assert await next_abort(peer) == (first.request_id,)
            # Past its first token, a slow step is not death until watchdog_period_s; probes
            # go out meanwhile but a stepping engine answers them only between steps.
            async with backend.open_stream(make_request(backend, max_tokens=8)) as stream:
                add = await peer.next_add()
                await peer.emit(step(add.request_id, 1))
                heard_at = trio.current_time()
                await stream_until_dead(stream, "no output for 10 s")
            assert GENERATING_S <= trio.current_time() - heard_at <= GENERATING_S * 1.2


@pytest.mark.serial  # slow_autojump_clock: 50 ms of real idleness must mean libzmq delivered
async def test_a_revived_engine_aborts_what_it_was_given_up_on(
    context: Context, slow_autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(SILENCE_S * 20):
        async with backend_with_peers(context, **OPTIONS) as (backend, (peer,)):
            async with backend.open_stream(make_request(backend, max_tokens=8)) as stream:
                add = await peer.next_add()
                await stream_until_dead(stream)
            assert not backend.statistics().ready
            # SIGCONT: the late step of the given-up request is its first word.
            await peer.emit(step(add.request_id, 1))
            await until_ready_is(backend, True)
            assert await next_abort(peer) == (add.request_id,)


@pytest.mark.serial  # slow_autojump_clock: 50 ms of real idleness must mean libzmq delivered
async def test_a_restarted_engine_is_not_blamed_for_its_predecessors_probe(
    context: Context, slow_autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(SILENCE_S * 20):
        async with backend_with_peers(context, **OPTIONS) as (backend, (peer,)):
            await next_probe(peer)  # left unanswered: then the process dies
            await trio.sleep(SILENCE_S / 2)
            peer.close()
            await until_ready_is(backend, False)
            successor = PeerEngine(context, backend)
            try:
                await successor.start()
                await trio.sleep(SILENCE_S / 2)  # past the old probe's limit, within the new one's
                assert backend.statistics().ready
            finally:
                successor.close()
