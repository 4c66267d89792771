"""I/O. vLLM's `--root-path` (config `root_path`; docs/vllm-frontend.md §2): the gateway sits
behind a proxy that serves it under a path prefix. As vLLM's front end does with it, a request
whose path starts with the prefix is routed without it (`/PREFIX/v1/models` is `/v1/models`),
and a path without it is routed as it is (a proxy that strips the prefix); the scope's
`root_path` says the prefix. HTTP and WebSocket alike.
"""

from __future__ import annotations

from smg_trio.errors import ConfigError
from smg_trio.frontends.http.asgi_types import AsgiApp, Receive, Scope, Send


def checked_root_path(root_path: str) -> str:
    """The prefix without a trailing slash ("" for none); ConfigError unless it is a path."""
    prefix = root_path.rstrip("/")
    if root_path and not root_path.startswith("/"):
        raise ConfigError(f"root_path must start with '/', got {root_path!r}")
    return prefix


class RootPathApp:
    """`app` served under `prefix` (a path starting with '/', no trailing slash)."""

    def __init__(self, app: AsgiApp, prefix: str) -> None:
        self._app = app
        self._prefix = prefix
        self._raw_prefix = prefix.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            path: str = scope["path"]
            if path == self._prefix or path.startswith(self._prefix + "/"):
                raw = scope.get("raw_path")
                scope = {**scope, "path": path[len(self._prefix) :] or "/"}
                if isinstance(raw, bytes) and raw.startswith(self._raw_prefix):
                    scope["raw_path"] = raw[len(self._raw_prefix) :] or b"/"
            scope = {**scope, "root_path": self._prefix}
        await self._app(scope, receive, send)
