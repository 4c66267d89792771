"""The SSRF check itself (core/media_addresses.py), pure: no connection is ever opened here.
Loopback, private, link-local, shared, metadata and unroutable addresses are refused, in every
spelling (IPv4-mapped, NAT64, 6to4, zone ids); public ones pass; the allowed domains are the
only hosts fetched, at any address; file: URLs only under the allowed folder."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.media_addresses import (
    MediaPolicy,
    address_problem,
    checked_addresses,
    checked_local_path,
    checked_url,
)
from smg_trio.errors import ClientError

REFUSED = [
    "127.0.0.1",
    "127.8.9.10",
    "::1",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",  # AWS/GCP/Azure metadata
    "fd00:ec2::254",  # AWS metadata over IPv6
    "100.100.100.200",  # Alibaba metadata (shared address space)
    "100.64.0.1",
    "0.0.0.0",
    "::",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "::ffff:127.0.0.1",  # IPv4-mapped loopback
    "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "198.18.0.1",  # benchmarking
    "192.0.2.1",  # documentation
]
ALLOWED = ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "1.1.1.1"]


@pytest.mark.parametrize("address", REFUSED)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert address_problem(address) is not None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_pass(address: str) -> None:
    assert address_problem(address) is None


@given(st.ip_addresses())
def test_an_address_passes_only_when_globally_routable(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    problem = address_problem(str(ip))
    if not ip.is_global:
        assert problem is not None
    if problem is None:
        assert ip.is_global
        assert not ip.is_loopback
        assert not ip.is_private


def test_one_bad_answer_refuses_the_host() -> None:
    with pytest.raises(ClientError, match="private address") as caught:
        checked_addresses("example.com", ["93.184.215.14", "10.1.1.1"], MediaPolicy(), "p")
    assert caught.value.param == "p"


def test_a_listed_domain_is_fetched_at_any_address() -> None:
    policy = MediaPolicy(allowed_domains=("localhost",))
    assert checked_addresses("localhost", ["127.0.0.1"], policy, "p") == ("127.0.0.1",)
    with pytest.raises(ClientError, match="allowed-media-domains"):
        checked_url("http://example.com/a.png", policy, "p")
    assert checked_url("http://LOCALHOST./a.png", policy, "p").hostname == "localhost."


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.com/a.png", "not http(s)"),
        ("gopher://x/", "not http(s)"),
        ("file:///etc/passwd", "file: URLs are refused"),
        ("http:///a.png", "no host"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("http://[::1/", "malformed"),
    ],
)
def test_urls_refused_before_any_lookup(url: str, words: str) -> None:
    with pytest.raises(ClientError, match=re.escape(words)):
        checked_url(url, MediaPolicy(), "messages[0].content[0].image_url")


def test_file_urls_only_under_the_allowed_folder() -> None:
    policy = MediaPolicy(allowed_local_path="/srv/images")
    assert checked_local_path("/srv/images/a/b.png", policy, "p") == "/srv/images/a/b.png"
    with pytest.raises(ClientError, match="outside"):
        checked_local_path("/srv/images-other/b.png", policy, "p")
    with pytest.raises(ClientError, match="outside"):
        checked_local_path("/etc/passwd", policy, "p")
