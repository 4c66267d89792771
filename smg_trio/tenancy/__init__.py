"""I/O. Tenants: API keys naming them, and their budgets enforced in this process or shared by
every replica through Redis (docs/fleet.md §2). The arithmetic is pure (core/rate_limits.py)."""
