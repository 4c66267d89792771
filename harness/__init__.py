"""What the tests and the bench both stand on, and neither owns: the gateway served in this
process with reference engines dialling it, a free loopback port, the seeded hostile corpora
(bodies, and HTTP/2 frame sequences with their fuzz runner), the pure core's synthetic
generations, the framing check of a raw HTTP/1.1 response, a throwaway redis-server, and a
fleet of gateway replicas sharing tenant limits.

Not product code (nothing in smg_trio imports it) and not a benchmark: `tests/` never imports
`bench/`, and `bench/` never imports `tests/`, so what both need lives here (bench/README.md).
"""
