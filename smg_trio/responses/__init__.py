"""I/O. OpenAI Responses beyond one request (docs/client-apis.md §3.3, §3.5): the response
store (`store/`), and responses that outlive their connection: their registry, state, sink,
flusher to the event log and followers."""
