"""I/O. Our HTTP/1.1 and HTTP/2 server over hypercorn's protocols (docs/http.md): the bottom
of `frontends`, which serves any ASGI app and never imports the app's modules (an
import-linter contract; docs/architecture.md §1.1)."""
