"""I/O. The gateway as a process: its config and flags, `serve`, the workers' backends and
lifetimes, the supervisor of `serve --processes N` and its gateway processes
(docs/processes.md), `smg-trio demo`."""
