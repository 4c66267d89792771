"""I/O. `python -m smg_trio.engines KIND [flags]`: `smg-trio engine KIND` without the gateway's
modules (and, for a ZMQ engine, without the gRPC ones): what `EngineCommand` launches, so each
engine the tests, benches and demo start costs less CPU (docs/architecture.md §8.1)."""

import sys

from smg_trio.engines.cli import engine_main

sys.exit(engine_main(sys.argv[1:]))
