"""I/O. routing."""
