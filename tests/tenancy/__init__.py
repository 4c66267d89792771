"""Tests of tenancy/: API keys, budgets, the gate and its Redis state."""

from __future__ import annotations

import pytest

from harness.redis_server import REDIS_SERVER

needs_redis = pytest.mark.skipif(
    REDIS_SERVER is None, reason="needs redis-server (Debian: apt-get install redis-server)"
)
