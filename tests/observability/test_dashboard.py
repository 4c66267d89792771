"""The Grafana dashboard (deploy/grafana/smg-trio.json) queries only metrics the gateway exports,
and covers what docs/observability.md §5 promises."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

from prometheus_client.parser import text_string_to_metric_families

from smg_trio.backends.base import BackendStatistics, EngineLoad, EngineStatus
from smg_trio.core.finalize import WorkerTarget
from smg_trio.errors import GatewayError
from smg_trio.neutral.runtime import Runtime, Wire
from smg_trio.observability.metrics import GatewayMetrics
from smg_trio.observability.request_record import RequestRecord
from smg_trio.routing.workers import RoundRobin, Worker, WorkerPool

DASHBOARD: Final = Path(__file__).parents[2] / "deploy" / "grafana" / "smg-trio.json"
METRIC_NAME: Final = re.compile(r"\bsmg_trio_[a-z0-9_]+")


class StaticBackend:
    """A backend that only reports statistics (the collector reads nothing else)."""

    runtime = Runtime.VLLM
    wire = Wire.ZMQ

    def statistics(self) -> BackendStatistics:
        engine = EngineStatus(
            index=0, ready=True, max_model_len=64, in_flight=1, load=EngineLoad(1, 2, 0.5)
        )
        return BackendStatistics(
            runtime=Runtime.VLLM,
            wire=Wire.ZMQ,
            ready=True,
            max_model_len=64,
            open_streams=1,
            in_flight=1,
            engines=(engine,),
        )


def exported_names() -> set[str]:
    """Every sample name a gateway exports once each kind of request was seen."""
    worker = Worker(
        name="w",
        target=WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ),
        backend=StaticBackend(),  # type: ignore[arg-type]
    )
    metrics = GatewayMetrics(WorkerPool([worker], RoundRobin()))
    for fails in (False, True):
        record = RequestRecord("r", "/v1/completions", "http1", "-")
        record.worker_picked("w", "vllm")
        record.engine_sent()
        record.first_token = record.last_token = record.sent
        record.inter_token_gaps.append(0.01)
        record.prompt_tokens = record.completion_tokens = 1
        record.finish_reasons = ("stop",)
        if fails:
            record.failed(GatewayError("x"))
            record.aborted("deadline")
        metrics.request_started(record)
        metrics.request_finished(record, record.arrived + 1)
    text = metrics.exposition().decode()
    return {
        sample.name for family in text_string_to_metric_families(text) for sample in family.samples
    }


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exported = exported_names()
    queried = {name for expr in expressions(dashboard) for name in METRIC_NAME.findall(expr)}
    assert queried, "the dashboard queries nothing"
    assert queried <= exported, sorted(queried - exported)


def test_the_dashboard_shows_what_the_docs_promise() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    text = " ".join(expressions(dashboard))
    for needed in (
        "smg_trio_time_to_first_token_seconds_bucket",
        "smg_trio_inter_token_latency_seconds_bucket",
        "smg_trio_completion_tokens_total",
        "smg_trio_requests_in_flight",
        "smg_trio_request_errors_total",
        "smg_trio_worker_ready",
    ):
        assert needed in text, needed
