"""Pure. Choosing the engine worker that serves each request (workers.py)."""
