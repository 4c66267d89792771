"""The bench's own unit tests: the arithmetic and parsing behind its reports (tests/ never
imports bench; tests/bench runs its commands as subprocesses)."""
