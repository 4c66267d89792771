"""I/O. The Responses API's response store (docs/client-apis.md §3.3): SQLite (embedded, the
default) or PostgreSQL (shared by replicas), every call off the event loop. `core`, `wire` and
`neutral` never import it (an import-linter contract)."""
