"""Pure. Choosing the engine worker that serves each request, and when to try another
(docs/routing.md): policies, breakers, the pool; `admission.py` is the one module that waits."""
