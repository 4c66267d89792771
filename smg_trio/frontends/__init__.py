"""I/O. frontends."""
