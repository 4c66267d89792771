"""Pure. Which image URLs this gateway may fetch, and which addresses it may connect to for
them: no server-side request forgery by default (docs/images.md §3).

- Schemes: http and https; `file:` only under `--allowed-local-media-path` (vLLM's flag).
- `--allowed-media-domains` (vLLM's flag): when given, only those hosts are fetched, and at
  any address (the operator vouched for them: a registry on a private network, a test server
  on loopback). Without it, any host is fetched only at a globally routable address: loopback,
  private, link-local (cloud metadata's 169.254.169.254), shared (100.64/10, Alibaba's
  metadata), multicast, reserved and unspecified addresses are refused, IPv4-mapped and
  NAT64/6to4 forms by the IPv4 address they carry. The check runs on every address DNS gives
  (one bad answer refuses the host) and again on every redirect; the connection then goes to
  the address checked, never to a second resolution.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import SplitResult, urlsplit

from smg_trio.errors import ClientError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# Metadata endpoints refused by name too (a resolver may map them anywhere).
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data"})


@dataclass(frozen=True)
class MediaPolicy:
    allowed_domains: tuple[str, ...] = ()  # lowercase host names; empty: any public host
    allowed_local_path: str | None = None  # an absolute folder for file: URLs; None: refused

    def host_listed(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.allowed_domains


def checked_url(url: str, policy: MediaPolicy, param: str) -> SplitResult:
    """`url` parsed, or a 400 naming `param` when its scheme or host is not fetched."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise refused(param, f"the URL is malformed ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme == "file":
        if policy.allowed_local_path is None:
            raise refused(param, "file: URLs are refused (see --allowed-local-media-path)")
        return parts
    if scheme not in ("http", "https"):
        raise refused(param, f"the URL scheme {scheme or 'missing'!r} is not http(s)")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise refused(param, "the URL has no host")
    if port == 0:
        raise refused(param, "the URL's port is 0")
    if policy.allowed_domains and not policy.host_listed(host):
        raise refused(param, f"the host {host!r} is not in --allowed-media-domains")
    if not policy.allowed_domains and host in METADATA_HOSTS:
        raise refused(param, f"the host {host!r} is a cloud metadata service")
    return parts


def address_problem(address: str) -> str | None:
    """Why `address` (a resolved IP, as text) must not be connected to, or None if public."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        carried = ip.ipv4_mapped or ip.sixtofour or _nat64(ip)
        if carried is not None:
            problem = address_problem(str(carried))
            return None if problem is None else f"{ip} carries {problem}"
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is a link-local address (cloud metadata lives there)"
    if ip.is_private:
        return f"{ip} is a private address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return f"{ip} is not a unicast address"
    if not ip.is_global:
        return f"{ip} is not a globally routable address"
    return None


def checked_addresses(
    host: str, addresses: Sequence[str], policy: MediaPolicy, param: str
) -> tuple[str, ...]:
    """The addresses DNS gave for `host`, all of them allowed, or a 400 naming the first bad."""
    if not addresses:
        raise refused(param, f"the host {host!r} has no address")
    if policy.host_listed(host):
        return tuple(addresses)
    for address in addresses:
        problem = address_problem(address)
        if problem is not None:
            raise refused(
                param,
                f"the host {host!r} resolves to {problem}; only public addresses are fetched "
                "(see --allowed-media-domains)",
            )
    return tuple(addresses)


def checked_local_path(path: str, policy: MediaPolicy, param: str) -> str:
    """A file: URL's path, which must lie under the allowed folder after resolution (the
    caller resolves symlinks and passes the real path)."""
    root = policy.allowed_local_path
    if root is None:
        raise refused(param, "file: URLs are refused (see --allowed-local-media-path)")
    if not PurePosixPath(path).is_relative_to(PurePosixPath(root)):
        raise refused(param, "the file is outside --allowed-local-media-path")
    return path


def _nat64(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address in a 64:ff9b::/96 (well-known NAT64) address."""
    if ip in ipaddress.IPv6Network("64:ff9b::/96"):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refused(param: str, reason: str) -> ClientError:
    return ClientError(f"{param}: {reason}", code="invalid_image_url", param=param)
