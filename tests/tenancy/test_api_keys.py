"""tenancy/api_keys.py: the `--api-keys` file, every mistake a ConfigError naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from smg_trio.core.rate_limits import requests_rate, tokens_rate
from smg_trio.errors import ConfigError
from smg_trio.tenancy.api_keys import QUEUE_PER_SLOT, Tenant, load_api_keys

GOOD = """
[keys]
"sk-acme-1" = "acme"
"sk-acme-2" = "acme"
"sk-lab" = "lab"

[tenants.acme]
requests_per_minute = 60
tokens_per_minute = 1000
max_concurrent = 2
"""


def keys_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    return path


def test_keys_name_tenants_with_their_budgets(tmp_path: Path) -> None:
    table = load_api_keys(keys_file(tmp_path, GOOD))
    acme = table.tenant_of(b"sk-acme-2")
    assert acme is not None
    assert acme is table.tenant_of(b"sk-acme-1")
    assert acme.rates.requests == requests_rate(60)
    assert acme.rates.tokens == tokens_rate(1000)
    assert (acme.max_concurrent, acme.max_queue) == (2, 2 * QUEUE_PER_SLOT)
    assert acme.limited
    assert table.tenant_of(b"sk-lab") == Tenant("lab", acme.rates.__class__())
    assert table.tenant_of(b"sk-acme") is None
    assert table.tenant_of(b"") is None
    assert sorted(t.name for t in table.tenants) == ["acme", "lab"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[keys]\n"k" = "a"\n[tenants.a]\nrequest_per_minute = 5\n', "request_per_minute"),
        ('[keys]\n"k" = "a"\n[tenants.b]\nmax_concurrent = 1\n', "named by no key"),
        ('[keys]\n"k" = "a"\n[tenants.a]\nmax_concurrent = 0\n', "at least 1"),
        ('[keys]\n"k" = "a"\n[tenants.a]\nmax_queue = 3\n', "needs max_concurrent"),
        ('[keys]\n"k" = 5\n', "Expected `str`"),
        ("[keys]\n", "names no API key"),
        ('[keys]\n"" = "a"\n', "must not be empty"),
        ('keys = "nope"', "Expected `object`"),
        ("[keys\n", "invalid TOML"),
    ],
)
def test_every_mistake_is_a_config_error_naming_it(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_api_keys(keys_file(tmp_path, text))
    assert says in str(error.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_api_keys(tmp_path / "absent.toml")
