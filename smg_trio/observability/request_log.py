"""I/O. Logging: one line per finished request, text or JSON, written off the event loop.

- `log_request` builds the request's line from its `RequestRecord` once it ended (fields in
  docs/observability.md §2) and hands it to the `smg_trio.requests` logger at INFO. Prompt and
  completion text are never in it: `--log-requests` adds them (`with_text`).
- `logging_to_stderr` installs the process's handler for `smg-trio serve`: every record (the
  request lines, startup, shutdown and worker events alike) is appended to a bounded buffer that
  a writer thread drains every `FLUSH_EVERY_S`, formatting and writing what it took, so a slow
  stderr never blocks the trio loop and a record costs no thread wake-up (measured: a wake-up
  per line cost ~8 % of the gateway's CPU at 1,200 requests in 10 s, bench/RESULTS.md). A full
  buffer drops the record and counts it (`dropped`) rather than waiting.
- `--log-format json` uses python-json-logger (its msgspec encoder): one JSON object per line,
  the record's `extra` fields at the top level; `text` is one readable line with the request's
  fields as key=value. Either way the formatting happens on the writer thread: the request's
  task only builds the fields and queues the record (docs/observability.md §2).
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, TextIO

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.msgspec import MsgspecFormatter

from smg_trio.observability.request_ids import RequestIdLogFilter
from smg_trio.observability.request_record import RequestRecord

REQUEST_LOGGER: Final = "smg_trio.requests"
LOG_FORMATS: Final = ("text", "json")
LOG_QUEUE_SIZE: Final = 10_000  # records waiting for the writer thread; more are dropped
FLUSH_EVERY_S: Final = 0.05  # how often the writer thread wakes to write what is buffered
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
_JSON_FIELDS: Final = "{asctime}{levelname}{name}{request_id}{message}"
_JSON_NAMES: Final = {"asctime": "time", "levelname": "level", "name": "logger"}
REQUEST_MESSAGE: Final = "request finished"
PROCESS_FIELD: Final = "gateway_process"  # the record attribute (and JSON key) of one of N
# The record attribute naming a request line's fields, in order (for the text format).
_FIELD_NAMES: Final = "request_field_names"

request_logger: Final = logging.getLogger(REQUEST_LOGGER)


def request_fields(record: RequestRecord, ended: float) -> dict[str, Any]:
    """What one request's line says (docs/observability.md §2); times in seconds."""
    fields: dict[str, Any] = {
        "request_id": record.request_id,
        "endpoint": record.endpoint,
        "transport": record.transport,
        "client": record.client,
        "worker": record.worker,
        "model": record.model or None,  # the served model's key (docs/fleet.md §4)
        "status": record.status,
        "error_code": record.error_code,
        "abort_cause": record.abort_cause,
        "finish_reasons": list(record.finish_reasons),
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "queue_s": _rounded(record.seconds(record.arrived, record.sent)),
        "ttft_s": _rounded(record.seconds(record.arrived, record.first_token)),
        "total_s": _rounded(ended - record.arrived),
    }
    if record.migrations:  # docs/resilience.md §9
        fields["migrations"] = list(record.migrations)
        fields["resume_s"] = [_rounded(seconds) for seconds in record.resume_s]
    if record.migration_refused is not None:
        fields["migration_refused"] = record.migration_refused
    return fields


def log_request(
    record: RequestRecord, ended: float, *, with_text: dict[str, object] | None
) -> None:
    """One line for a finished request; `with_text` (prompt/completion) only with --log-requests."""
    if not request_logger.isEnabledFor(logging.INFO):
        return
    fields = request_fields(record, ended)
    if with_text is not None:
        fields.update(with_text)
    fields[_FIELD_NAMES] = tuple(fields)
    request_logger.info(REQUEST_MESSAGE, extra=fields)


class JsonLineFormatter(MsgspecFormatter):
    """One JSON object per record: time, level, logger, request_id, message and the extras."""

    def __init__(self) -> None:
        super().__init__(
            _JSON_FIELDS,
            style="{",
            rename_fields=_JSON_NAMES,
            reserved_attrs=(*RESERVED_ATTRS, _FIELD_NAMES),
        )


class TextLineFormatter(logging.Formatter):
    """`TEXT_FORMAT`, and a request line's fields as key=value after its message."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        process = getattr(record, PROCESS_FIELD, None)
        if process is not None:
            line = f"[process {process}] {line}"
        names: tuple[str, ...] = getattr(record, _FIELD_NAMES, ())
        if not names:
            return line
        pairs = " ".join(f"{name}={getattr(record, name)}" for name in names[1:])
        return f"{line}: {pairs}"


def formatter_for(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonLineFormatter()
    if log_format == "text":
        return TextLineFormatter()
    raise ValueError(f"log format must be one of {LOG_FORMATS}, got {log_format!r}")


class BufferedHandler(logging.Handler):
    """Keeps records (unformatted) for `drain`; at `LOG_QUEUE_SIZE` waiting, drops and counts.

    `emit` runs in the logging task and only appends (a deque's append and popleft are safe
    across threads); the record is formatted later by whoever drains it."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: collections.deque[logging.LogRecord] = collections.deque()
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if len(self._pending) >= LOG_QUEUE_SIZE:
            self.dropped += 1
        else:
            self._pending.append(record)

    def drain(self, formatter: logging.Formatter, stream: TextIO) -> None:
        """Format everything buffered and write it with one write and one flush."""
        pending = self._pending
        lines = []
        while pending:
            lines.append(formatter.format(pending.popleft()))
        if lines:
            lines.append("")
            stream.write("\n".join(lines))
            stream.flush()


class ProcessIndexFilter(logging.Filter):
    """Names the gateway process (0..N-1) on every record of one of several (docs/processes.md)."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self._index = index

    def filter(self, record: logging.LogRecord) -> bool:
        setattr(record, PROCESS_FIELD, self._index)
        return True


@contextmanager
def logging_to_stderr(
    level: str, log_format: str, *, process_index: int | None = None
) -> Iterator[None]:
    """For the block: every log record formatted as `log_format` on stderr, by a writer thread
    that wakes every `FLUSH_EVERY_S` (see the module doc); with `process_index`, every line
    names the gateway process (the `gateway_process` key in JSON)."""
    formatter, stream = formatter_for(log_format), sys.stderr
    handler = BufferedHandler()
    # Every line names the request it was logged for (`-` outside any request): the filter runs
    # in the logging task, where the request's context variable is set.
    handler.addFilter(RequestIdLogFilter())
    if process_index is not None:
        handler.addFilter(ProcessIndexFilter(process_index))
    stop = threading.Event()

    def write_until_stopped() -> None:
        while not stop.wait(FLUSH_EVERY_S):
            handler.drain(formatter, stream)
        handler.drain(formatter, stream)

    thread = threading.Thread(target=write_until_stopped, name="smg-trio-log-writer", daemon=True)
    root = logging.getLogger()
    previous = (root.level, list(root.handlers), _record_extras())
    root.handlers = [handler]
    root.setLevel(level.upper())
    # No line prints the caller, thread or process: skip finding them for every record (the
    # logging docs' "Optimization" settings).
    _set_record_extras((None, False, False, False))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()  # it writes what is still buffered first
        root.handlers = previous[1]
        root.setLevel(previous[0])
        _set_record_extras(previous[2])


_RecordExtras = tuple[str | None, bool, bool, bool]


def _record_extras() -> _RecordExtras:
    return (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing)


def _set_record_extras(extras: _RecordExtras) -> None:
    (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing) = (
        extras
    )


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)
