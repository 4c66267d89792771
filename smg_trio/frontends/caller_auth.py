"""Pure. Who is calling: a request's API key checked against `--api-key` (one key) or
`--api-keys` (key → tenant, docs/fleet.md §2), answered with the tenant it names, or refused
with OpenAI's 401. The key is read from `Authorization: Bearer KEY` or, as Anthropic's clients
send it, `x-api-key: KEY`; a single key is compared in constant time.
"""

from __future__ import annotations

import hmac

from smg_trio.errors import ClientError
from smg_trio.tenancy.api_keys import Tenant, TenantTable


class InvalidApiKey(ClientError):
    """OpenAI's 401: type `invalid_request_error`, code `invalid_api_key`."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=401, code="invalid_api_key")

    @property
    def error_type(self) -> str:
        return "invalid_request_error"


class CallerAuth:
    """The gateway's keys: none (open), one, or a tenant table."""

    def __init__(self, api_key: str | None, tenants: TenantTable | None) -> None:
        self._api_key = api_key.encode() if api_key else None
        self._tenants = tenants

    @property
    def open(self) -> bool:
        return self._api_key is None and self._tenants is None

    def tenant_of(self, headers: dict[bytes, bytes]) -> Tenant | None:
        """The request's tenant (None without `--api-keys`); InvalidApiKey if refused."""
        if self.open:
            return None
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer":  # Anthropic's clients send `x-api-key: KEY` instead
            token = headers.get(b"x-api-key", b"")
        token = token.strip()
        if not token:
            raise InvalidApiKey(
                "You didn't provide an API key: send `Authorization: Bearer KEY` "
                "or `x-api-key: KEY`"
            )
        if self._tenants is not None:
            tenant = self._tenants.tenant_of(token)
            if tenant is not None:
                return tenant
        elif self._api_key is not None and hmac.compare_digest(token, self._api_key):
            return None
        raise InvalidApiKey(f"Incorrect API key provided: {masked(token)}")


def masked(key: bytes) -> str:
    """A key as OpenAI quotes it back: its ends only."""
    text = key.decode("latin-1")
    return f"{text[:3]}***{text[-4:]}" if len(text) > 10 else "***"
