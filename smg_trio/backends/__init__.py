"""I/O. backends."""
