"""Opt-in tracing (docs/observability.md §4): the span tree of a request, parented on the
client's `traceparent`, collected with the OpenTelemetry SDK's in-memory exporter, and the
trace context passed on to a gRPC engine in the call's metadata."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import httpx
import trio
from grpclib.client import Channel
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from smg_trio.backends.asyncio_bridge import open_asyncio_bridge
from smg_trio.backends.grpc_services import close_channel
from smg_trio.neutral.runtime import Runtime
from smg_trio.observability.tracing import ROOT_SPAN, RequestTracer, tracer_provider
from smg_trio.request.gateway import Gateway
from smg_trio.wire._proto import smg_trio_engine_grpc
from smg_trio.wire._proto import smg_trio_engine_pb2 as engine_pb2
from tests.backends.grpc_reference import grpc_gateway, start_engine, stop_engine
from tests.e2e.live_server import API_KEY, live_server

TEST_S: Final = 20.0
TRACE_ID: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN: Final = "00f067aa0ba902b7"
TRACEPARENT: Final = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
BODY: Final = {"prompt": "hi", "max_tokens": 4, "stream": True, "ignore_eos": True}


@contextmanager
def traced(gateway: Gateway) -> Iterator[InMemorySpanExporter]:
    """Tracing on for `gateway`, spans kept in memory (the SDK's own test exporter)."""
    exporter = InMemorySpanExporter()
    provider = tracer_provider(SimpleSpanProcessor(exporter))
    gateway.tracer = RequestTracer(provider)
    try:
        yield exporter
    finally:
        gateway.tracer = None
        provider.shutdown()


async def finished_spans(exporter: InMemorySpanExporter, roots: int) -> tuple[ReadableSpan, ...]:
    """The spans once `roots` requests ended (a request's span ends as its handler returns,
    which may be just after the client read the last byte)."""
    while True:
        spans = tuple(exporter.get_finished_spans())
        if sum(span.name == ROOT_SPAN for span in spans) >= roots:
            return spans
        await trio.sleep(0.01)


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


async def test_a_request_is_one_span_tree_under_the_clients_traceparent(tmp_path: Path) -> None:
    headers = {"authorization": f"Bearer {API_KEY}", "x-request-id": "traced-1"}
    with trio.fail_after(TEST_S):
        async with live_server(tmp_path) as server:
            with traced(server.serving.gateway) as exporter:
                async with httpx.AsyncClient(base_url=server.base_url, headers=headers) as http:
                    ok = await http.post(
                        "/v1/completions", json=BODY, headers={"traceparent": TRACEPARENT}
                    )
                    bad = await http.post("/v1/completions", json={**BODY, "n": 0})
                spans = await finished_spans(exporter, 2)
    assert (ok.status_code, bad.status_code) == (200, 400)
    roots = [span for span in spans if span.name == ROOT_SPAN]
    assert len(roots) == 2
    root = next(span for span in roots if span.parent is not None)
    assert root.kind is SpanKind.SERVER
    assert root.context is not None
    assert root.parent is not None
    assert f"{root.context.trace_id:032x}" == TRACE_ID  # the client's trace goes on
    assert f"{root.parent.span_id:016x}" == CLIENT_SPAN
    assert root.attributes is not None
    assert root.attributes["smg_trio.request_id"] == "traced-1"
    assert root.attributes["smg_trio.completion_tokens"] == 4
    children = by_name(
        tuple(s for s in spans if s.parent and s.parent.span_id == root.context.span_id)
    )
    assert sorted(children) == ["engine", "prepare", "queue", "stream"]
    for child in children.values():
        assert root.start_time is not None
        assert root.end_time is not None
        assert child.start_time is not None
        assert child.end_time is not None
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    assert [event.name for event in children["engine"].events] == ["first_token"]
    refused = next(span for span in roots if span is not root)
    assert refused.parent is None  # no traceparent: a trace of its own
    assert refused.status.status_code is StatusCode.ERROR


async def _open_channel(port: int) -> Channel:
    return Channel("127.0.0.1", port)  # on the bridge's loop: grpclib binds to the running one


async def test_the_trace_context_reaches_a_grpc_engine_in_the_call_metadata(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_S), (tmp_path / "engine.log").open("wb") as log:
        process, port = await start_engine(Runtime.VLLM, log)
        try:
            async with grpc_gateway(port) as serving, open_asyncio_bridge() as bridge:
                with traced(serving.gateway) as exporter:
                    async with httpx.AsyncClient(
                        base_url=f"http://127.0.0.1:{serving.port}"
                    ) as http:
                        answer = await http.post(
                            "/v1/completions",
                            json=BODY,
                            headers={"traceparent": TRACEPARENT, "x-request-id": "grpc-traced"},
                        )
                    assert answer.status_code == 200
                    root = by_name(await finished_spans(exporter, 1))[ROOT_SPAN]
                channel = await bridge.run(_open_channel, port)
                stub = smg_trio_engine_grpc.EngineCountersStub(channel)

                async def get() -> engine_pb2.GetReceivedResponse:
                    return await stub.GetReceived(
                        engine_pb2.GetReceivedRequest(request_id="grpc-traced")
                    )

                try:
                    reply = await bridge.run(get)
                finally:
                    with trio.CancelScope(shield=True):
                        await bridge.run(close_channel, channel)
        finally:
            await stop_engine(process)
    assert reply.found
    received = json.loads(reply.request_json)
    assert root.context is not None
    # The engine's parent is the gateway's request span, in the client's trace.
    assert received["traceparent"] == f"00-{TRACE_ID}-{root.context.span_id:016x}-01"
