"""I/O. One request from its arrival to its end, the same for every front end
(docs/architecture.md §3): the route table, `Arrival`, `Gateway.handle`, preparation,
admission, retries and migration, the per-request nursery, the drain and keep-alives, the
memory budget, a Responses run's create."""
