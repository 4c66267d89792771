"""I/O. `python -m bench tenant_fleet`: the issue's acceptance burst. Two gateway replicas
(real `smg_trio serve` processes, each with its reference engine) share one tenant budget of
60 requests/min through a real redis-server; clients flood both for a minute. Then Redis is
killed and the flood goes on: each replica falls back to its own budget, no 5xx.

    python -m bench tenant_fleet [--seconds 60] [--after-kill-s 20] [--concurrency 8]

Expected: 60 ± 2 successes in the minute across both (per-process limits would pass ~120),
every other answer a 429; after the kill, only 200 and 429. Results: bench/RESULTS.md
"Tenant budgets across replicas".
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio

from harness.redis_server import REDIS_SERVER, redis_server
from harness.tenant_fleet import burst, open_fleet

WARNING = b"Redis tenant state unavailable"
KEYS = """
[keys]
"sk-acme-bench" = "acme"

[tenants.acme]
requests_per_minute = 60
"""


async def run(seconds: float, after_kill_s: float, concurrency: int) -> int:
    with tempfile.TemporaryDirectory(prefix="smg-trio-fleet-") as folder:
        keys = Path(folder) / "keys.toml"
        keys.write_text(KEYS)
        async with redis_server() as redis, open_fleet(Path(folder), keys, redis.url) as fleet:
            load = os.getloadavg()
            started = trio.current_time()
            shared = await burst(
                fleet.base_urls, "sk-acme-bench", duration_s=seconds, concurrency=concurrency
            )
            shared_s = trio.current_time() - started
            fallbacks = sum(bytes(log).count(WARNING) for log in fleet.logs)
            await redis.kill()
            started = trio.current_time()
            fallback = await burst(
                fleet.base_urls, "sk-acme-bench", duration_s=after_kill_s, concurrency=concurrency
            )
            fallback_s = trio.current_time() - started
    print(f"load average at the start: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")
    print(f"fallbacks to per-process limits before the kill (logged warnings): {fallbacks}")
    print("| phase | seconds | requests | 200 | 429 | other | slowest answer (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, result, span in (
        ("Redis shared, 60/min", shared, shared_s),
        ("Redis killed: per process", fallback, fallback_s),
    ):
        s = result.statuses
        other = sum(n for status, n in s.items() if status not in (200, 429))
        print(
            f"| {name} | {span:.1f} | {sum(s.values())} | {s[200]} | {s[429]} | {other} "
            f"| {result.slowest_s:.2f} |"
        )
    ok = abs(shared.statuses[200] - seconds) <= 2 and set(fallback.statuses) <= {200, 429}
    print(
        "target (60 ± 2 per minute shared; after the kill only 200/429):",
        "met" if ok else "NOT met",
    )
    return 0 if ok else 1


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench tenant_fleet")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--after-kill-s", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    if REDIS_SERVER is None:
        print("needs redis-server (Debian: apt-get install redis-server)")
        return 2
    return trio.run(run, args.seconds, args.after_kill_s, args.concurrency)
