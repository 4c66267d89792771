"""smg-trio: a trio streaming gateway between OpenAI-style clients and LLM engines.

The package is a house of floors, each a package that owns one concept and imports only the
floors below it (one import-linter `layers` contract in pyproject.toml; docs/architecture.md
§1). Packages on one floor never import each other. Top to bottom:

`__main__` is `python -m smg_trio`, the `smg-trio` command.

`cli` reads the command line (`smg-trio serve | demo | engine ...`) and hands a config to
`trio.run`; `client` is a small client for the gateway's WebSocket protocol. Nothing of the
gateway imports either.

`serving` is the gateway as a process: its config and flags, `serve` (the model, one backend
per worker, the Gateway and the HTTP server in one `trio.run`, and the drain), the workers'
backends and lifetimes, the supervisor of `--processes N` and its gateway processes, the demo.

`frontends` faces the clients: the ASGI app (SSE or JSON answers, the WebSocket protocols,
the Responses API's stored and running responses, `/workers`) and, at its bottom,
`frontends.http`, our HTTP/1.1 and HTTP/2 server over hypercorn's protocols, which serves any
ASGI app and never imports the app's modules.

`request` is one request from its arrival to its end, the same for every front end: the route
table, `Arrival`, `Gateway.handle`, preparation, admission, retries and migration, the
per-request nursery, the drain and the keep-alives, the memory budget.

`responses` (the Responses API's store, and the runs that outlive their connection) and
`tenancy` (API keys and tenants' budgets, local or in Redis) serve the request layer.

`observability` is what operators see: metrics, the per-request record and log line, request
ids, tracing.

`routing` picks the worker (policies, breakers, the pool, admission); `engines` are the
reference engines that speak the real wires, for the demo, the tests and the bench.

`backends` are the engine clients (ZMQ, gRPC) around one in-flight table; `model` is the
served model's folder and tokenizer; `sink` says where one request's output goes
(`ClientSink`).

`core` makes every decision about a request, purely: prepare, finalize, detokenize, stops,
rendering, the API dialects, tool and reasoning parsers.

`wire` is bytes only: client JSON, the engines' msgpack and protobuf messages.

`neutral` is the vocabulary every floor shares: runtimes, wires, capabilities, sampling
parameters, engine events.

`errors` (the exception vocabulary) and `handoff` (the one hand-off between tasks) are the
ground floor, importing nothing of ours.

`core`, `wire` and `neutral` import no I/O library (trio, sockets, loggers, clocks); each of
them is free of import cycles among its modules.
"""

__version__ = "0.1.0"
