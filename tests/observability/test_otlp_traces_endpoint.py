"""vLLM's `--otlp-traces-endpoint` (docs/observability.md §4): a live gateway's request traces
reach a real OTLP receiver on loopback over the protocol vLLM would use, OTLP/gRPC by default (a
gRPC server of opentelemetry-proto's TraceService) or OTLP/HTTP when
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says http/protobuf (an HTTP server taking the same message);
another protocol is refused at startup, as vLLM refuses it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Final

import grpc
import httpx
import pytest
import trio
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from smg_trio.errors import ConfigError
from smg_trio.serving.config import config_from_mapping
from smg_trio.serving.serve import tracing_for
from tests.e2e.live_server import API_KEY, live_server

TEST_S: Final = 30.0
AUTH: Final = {"authorization": f"Bearer {API_KEY}"}
BODY: Final = {"prompt": "hi", "max_tokens": 2, "ignore_eos": True}
Request = trace_service_pb2.ExportTraceServiceRequest


class Received:
    """What a receiver got: each export request, decoded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.exports: list[Any] = []

    def add(self, export: Any) -> None:
        with self._lock:
            self.exports.append(export)

    def root_spans(self) -> dict[str, Any]:
        """The `smg_trio.request` spans received, by their request id."""
        spans: dict[str, Any] = {}
        with self._lock:
            for export in self.exports:
                for resource in export.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attributes = {a.key: a.value.string_value for a in span.attributes}
                            if span.name == "smg_trio.request":
                                spans[attributes["smg_trio.request_id"]] = span
        return spans


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: Received) -> None:
        self._received = received

    def Export(self, request: Any, context: Any) -> Any:
        self._received.add(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[int, Received]]:
    """An OTLP/gRPC receiver on loopback (grpcio's server, two threads)."""
    received = Received()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    add_servicer = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
    add_servicer(TraceService(received), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, received
    finally:
        server.stop(grace=None).wait(5.0)


async def traced_requests(tmp_path: Path, endpoint: str, ids: tuple[str, ...]) -> None:
    async with (
        live_server(tmp_path, config_fields={"otlp_traces_endpoint": endpoint}) as server,
        httpx.AsyncClient(base_url=server.base_url, headers=AUTH) as http,
    ):
        for request_id in ids:
            answer = await http.post(
                "/v1/completions", json=BODY, headers={"x-request-id": request_id}
            )
            assert answer.status_code == 200
    # Leaving the server shut the tracer down: its queued spans were flushed.


async def test_traces_go_over_otlp_grpc_by_default(
    tmp_path: Path, grpc_receiver: tuple[int, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    port, received = grpc_receiver
    with trio.fail_after(TEST_S):
        await traced_requests(tmp_path, f"127.0.0.1:{port}", ("grpc-1", "grpc-2"))
    spans = received.root_spans()
    assert sorted(spans) == ["grpc-1", "grpc-2"]
    assert all(span.end_time_unix_nano > span.start_time_unix_nano for span in spans.values())


@pytest.fixture
def http_receiver() -> Iterator[tuple[int, Received]]:
    """An OTLP/HTTP receiver on loopback (the standard library's server, in a thread: the
    exporter's last flush blocks the gateway's own loop at shutdown)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            export = Request()
            export.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
            received.add(export)
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        thread.join(5.0)
        server.server_close()


async def test_traces_go_over_otlp_http_when_the_environment_says(
    tmp_path: Path, http_receiver: tuple[int, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    port, received = http_receiver
    with trio.fail_after(TEST_S):
        await traced_requests(tmp_path, f"http://127.0.0.1:{port}/v1/traces", ("http-1",))
    assert sorted(received.root_spans()) == ["http-1"]


def test_another_protocol_is_refused_and_both_endpoints_exclude_each_other(
    tmp_path: Path,
) -> None:
    data = {"model_path": str(tmp_path), "workers": ["vllm+zmq://h:1"]}
    config = config_from_mapping(
        {**data, "otlp_traces_endpoint": "127.0.0.1:4317"}, source="test", base=tmp_path
    )
    with pytest.raises(ConfigError, match="grpc or http/protobuf"):
        tracing_for(config, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
    assert tracing_for(config, {}) is not None
    both = {**data, "otlp_traces_endpoint": "a:1", "otlp_endpoint": "http://b/v1/traces"}
    with pytest.raises(ConfigError, match="exclude each other"):
        config_from_mapping(both, source="test", base=tmp_path)
