"""I/O. Toward clients: the gateway's ASGI app (HTTP answers, SSE, the WebSocket protocols)
over our HTTP server, `frontends.http`."""
