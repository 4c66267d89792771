"""I/O. `--api-keys FILE`: which tenant each API key belongs to, and each tenant's budget.

    [keys]
    "sk-acme-1" = "acme"
    "sk-acme-2" = "acme"
    "sk-lab" = "lab"

    [tenants.acme]            # optional: a tenant without a table has no limits
    requests_per_minute = 60
    tokens_per_minute = 100000   # prompt tokens at admission, output tokens when it ends
    max_concurrent = 4           # more wait in a queue of at most max_queue (default 4 × this)
    max_queue = 16
    models = ["chat", "fast"]    # the served models its keys may use (default: every one)

Every key and field is checked at startup: an unknown field, a tenant table no key names, a
key naming a tenant twice or a limit below 1 is a ConfigError (docs/fleet.md §2); a `models`
entry that is not served is one too (serving/config.py checks it against the served names).
A request for a model its tenant may not use is OpenAI's 404 `model_not_found` ("does not
exist or you do not have access to it"), and `/v1/models` lists only the tenant's models
(docs/fleet.md §4). The budget is the tenant's across every model.
"""

from __future__ import annotations

import hmac
import tomllib
from pathlib import Path
from typing import Final

import msgspec

from smg_trio.core.rate_limits import TenantRates, requests_rate, tokens_rate
from smg_trio.errors import ConfigError

# A tenant's wait queue when max_concurrent is set and max_queue is not: this many per slot.
QUEUE_PER_SLOT: Final = 4


class TenantBudget(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    max_queue: int | None = None
    models: tuple[str, ...] | None = None


class _KeysFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    keys: dict[str, str]
    tenants: dict[str, TenantBudget] = msgspec.field(default_factory=dict)


class Tenant(msgspec.Struct, frozen=True):
    """One tenant and its limits (None: that limit is off)."""

    name: str
    rates: TenantRates
    max_concurrent: int | None = None
    max_queue: int = 0
    models: frozenset[str] | None = None  # served names it may use (None: every model)

    def may_use(self, names: tuple[str, ...]) -> bool:
        """May use the model served under `names` (listing any one of them grants it)."""
        return self.models is None or not self.models.isdisjoint(names)

    @property
    def limited(self) -> bool:
        return (
            self.rates.requests is not None
            or self.rates.tokens is not None
            or self.max_concurrent is not None
        )


class TenantTable:
    """API key → tenant. Lookups compare every key in constant time."""

    def __init__(self, tenants_by_key: dict[str, Tenant]) -> None:
        self._by_key = [(key.encode(), tenant) for key, tenant in tenants_by_key.items()]
        self.tenants = tuple({t.name: t for t in tenants_by_key.values()}.values())

    def tenant_of(self, key: bytes) -> Tenant | None:
        found = None
        for candidate, tenant in self._by_key:  # no early exit: the time says nothing
            if hmac.compare_digest(candidate, key):
                found = tenant
        return found


def load_api_keys(path: Path) -> TenantTable:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    try:
        parsed = msgspec.convert(data, _KeysFile)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return table_of(parsed, source=str(path))


def table_of(parsed: _KeysFile, *, source: str) -> TenantTable:
    if not parsed.keys:
        raise ConfigError(f"{source}: [keys] names no API key")
    if any(not key for key in parsed.keys):
        raise ConfigError(f"{source}: an API key must not be empty")
    named = set(parsed.keys.values())
    orphans = sorted(set(parsed.tenants) - named)
    if orphans:
        raise ConfigError(f"{source}: [tenants] {orphans} named by no key in [keys]")
    tenants = {name: _tenant(name, parsed.tenants.get(name), source) for name in named}
    return TenantTable({key: tenants[name] for key, name in parsed.keys.items()})


def _tenant(name: str, budget: TenantBudget | None, source: str) -> Tenant:
    if budget is None:
        return Tenant(name, TenantRates())
    if budget.models is not None and not budget.models:
        raise ConfigError(f"{source}: tenants.{name}.models is empty: list a model, or drop it")
    for field in ("requests_per_minute", "tokens_per_minute", "max_concurrent", "max_queue"):
        value = getattr(budget, field)
        least = 0 if field == "max_queue" else 1  # a queue of 0: over the limit is a 429 at once
        if value is not None and value < least:
            raise ConfigError(
                f"{source}: tenants.{name}.{field} must be at least {least}, got {value}"
            )
    if budget.max_queue is not None and budget.max_concurrent is None:
        raise ConfigError(f"{source}: tenants.{name}.max_queue needs max_concurrent")
    rates = TenantRates(
        requests=None
        if budget.requests_per_minute is None
        else requests_rate(budget.requests_per_minute),
        tokens=None if budget.tokens_per_minute is None else tokens_rate(budget.tokens_per_minute),
    )
    queue = budget.max_queue
    if queue is None:
        queue = 0 if budget.max_concurrent is None else QUEUE_PER_SLOT * budget.max_concurrent
    models = None if budget.models is None else frozenset(budget.models)
    return Tenant(name, rates, budget.max_concurrent, queue, models)
