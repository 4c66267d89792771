"""I/O. What the gateway tells operators: Prometheus metrics, one log line per request, request
records, and opt-in OpenTelemetry tracing (docs/observability.md).

`core/`, `wire/` and `neutral/` never import this package (an import-linter contract): they stay
pure, and everything here is fed from `request/nursery.py`, `request/gateway.py` and the front ends.
"""
