"""I/O. engines."""
