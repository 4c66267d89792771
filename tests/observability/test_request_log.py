"""One log line per finished request (docs/observability.md §2): JSON that parses, carrying the
client's request id; the text never in it unless --log-requests; the stderr writer thread."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from smg_trio.observability.request_ids import RequestIdLogFilter, current_request_id
from smg_trio.observability.request_log import (
    LOG_QUEUE_SIZE,
    REQUEST_LOGGER,
    BufferedHandler,
    JsonLineFormatter,
    logging_to_stderr,
)
from tests.e2e.live_server import API_KEY, live_server

TEST_S: Final = 20.0
AUTH: Final = {"authorization": f"Bearer {API_KEY}"}


@contextmanager
def json_request_lines() -> Iterator[list[dict[str, Any]]]:
    """The request lines logged in the block, each parsed from the JSON formatter's output."""
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(JsonLineFormatter())
    handler.addFilter(RequestIdLogFilter())
    logger = logging.getLogger(REQUEST_LOGGER)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        lines.extend(json.loads(line) for line in written.getvalue().splitlines())


async def test_each_request_gets_one_json_line_with_the_clients_id(tmp_path: Path) -> None:
    body = {"prompt": "hi", "max_tokens": 3, "stream": True, "ignore_eos": True}
    with trio.fail_after(TEST_S), json_request_lines() as lines:
        async with (
            live_server(tmp_path) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=AUTH) as http,
        ):
            answer = await http.post(
                "/v1/completions", json=body, headers={"x-request-id": "client-id-1"}
            )
            assert answer.headers["x-request-id"] == "client-id-1"
            refused = await http.post(
                "/v1/completions", json={**body, "temperature": -1}, headers={"x-request-id": "r2"}
            )
            assert refused.status_code == 400
            worker_names = {worker.name for worker in server.serving.gateway.pool.workers}
            server.serving.gateway.log_requests = True
            await http.post("/v1/completions", json=body, headers={"x-request-id": "with-text"})
    by_id = {line["request_id"]: line for line in lines}
    assert sorted(by_id) == ["client-id-1", "r2", "with-text"]
    served = by_id["client-id-1"]
    assert served["level"] == "INFO"
    assert served["logger"] == REQUEST_LOGGER
    assert served["endpoint"] == "/v1/completions"
    assert served["transport"] == "http1"
    assert served["status"] == 200
    assert served["finish_reasons"] == ["length"]
    assert served["completion_tokens"] == 3
    assert served["prompt_tokens"] > 0
    assert 0 < served["ttft_s"] <= served["total_s"]
    assert served["client"].startswith("127.0.0.1:")
    assert served["worker"] in worker_names  # the pool's worker id (docs/routing.md)
    assert served["abort_cause"] is None
    assert "request_body" not in served
    assert "completion_texts" not in served
    failed = by_id["r2"]
    assert (failed["status"], failed["error_code"]) == (400, "invalid_request_parameters")
    with_text = by_id["with-text"]
    assert json.loads(with_text["request_body"]) == body
    assert len(with_text["completion_texts"]) == 1
    assert with_text["completion_texts"][0]


async def test_max_log_len_cuts_the_logged_body_and_texts_as_vllms(tmp_path: Path) -> None:
    body = {"prompt": "hi there", "max_tokens": 6, "ignore_eos": True}
    fields = {"log_requests": True, "max_log_len": 12}
    with trio.fail_after(TEST_S), json_request_lines() as lines:
        async with (
            live_server(tmp_path, config_fields=fields) as server,
            httpx.AsyncClient(base_url=server.base_url, headers=AUTH) as http,
        ):
            answer = await http.post("/v1/completions", json=body)
            assert answer.status_code == 200
            text = answer.json()["choices"][0]["text"]
    assert len(text) > 12
    (cut,) = lines
    assert cut["request_body"] == json.dumps(body, separators=(",", ":"))[:12]
    assert cut["completion_texts"] == [text[:12]]


def test_the_stderr_writer_formats_json_off_the_calling_thread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = current_request_id.set("in-a-request")
    try:
        with logging_to_stderr("INFO", "json"):
            logging.getLogger("smg_trio.test").info("hello %s", "there", extra={"worker": "w"})
            logging.getLogger("smg_trio.test").debug("below the level")
    finally:
        current_request_id.reset(token)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 1
    assert lines[0]["message"] == "hello there"
    assert lines[0]["request_id"] == "in-a-request"
    assert lines[0]["worker"] == "w"


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log format"), logging_to_stderr("INFO", "xml"):
        pass


def test_a_full_buffer_drops_and_counts_instead_of_waiting() -> None:
    handler = BufferedHandler()
    record = logging.LogRecord("smg_trio.test", logging.INFO, __file__, 1, "m", None, None)
    for _ in range(LOG_QUEUE_SIZE + 3):
        handler.emit(record)
    assert handler.dropped == 3
    written = io.StringIO()
    handler.drain(logging.Formatter(), written)
    assert written.getvalue().count("m\n") == LOG_QUEUE_SIZE
    handler.drain(logging.Formatter(), written)  # nothing left
    assert written.getvalue().count("m\n") == LOG_QUEUE_SIZE
