"""The client's address behind trusted proxies: ``X-Forwarded-For`` is believed only from a
trusted peer, and only from the right; a client cannot choose its own address."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codey_server.errors import ConfigError
from codey_server.http.clientaddr import (
    ClientAddressMiddleware,
    client_address,
    parse_trusted_proxies,
)
from codey_server.settings import Settings, load_config_file

TRUSTED = parse_trusted_proxies(["127.0.0.1", "10.0.0.0/8", "fd00::/8"])


def test_without_trusted_proxies_the_peer_counts_whatever_the_header_says() -> None:
    assert client_address("127.0.0.1", ["203.0.113.7"], ()) == "127.0.0.1"


def test_a_spoofed_header_from_an_untrusted_peer_is_ignored() -> None:
    # the attack: a client reaching the server directly names another address
    assert client_address("198.51.100.9", ["203.0.113.7"], TRUSTED) == "198.51.100.9"
    assert client_address("198.51.100.9", ["127.0.0.1"], TRUSTED) == "198.51.100.9"


def test_a_trusted_peer_gives_the_address_it_appended() -> None:
    assert client_address("127.0.0.1", ["203.0.113.7"], TRUSTED) == "203.0.113.7"


def test_what_the_client_wrote_left_of_the_proxys_entry_is_ignored() -> None:
    # the client sent "X-Forwarded-For: 1.2.3.4"; nginx appended the address it saw
    assert client_address("127.0.0.1", ["1.2.3.4, 203.0.113.7"], TRUSTED) == "203.0.113.7"


def test_a_chain_of_trusted_proxies_is_walked_from_the_right() -> None:
    chain = ["9.9.9.9, 203.0.113.7, 10.1.2.3, 10.0.0.2"]
    assert client_address("127.0.0.1", chain, TRUSTED) == "203.0.113.7"


def test_several_headers_are_one_list_in_order() -> None:
    assert client_address("127.0.0.1", ["9.9.9.9", "203.0.113.7, 10.0.0.2"],
                          TRUSTED) == "203.0.113.7"


def test_a_client_on_a_trusted_network_is_the_left_most_trusted_address() -> None:
    assert client_address("127.0.0.1", ["10.0.0.7, 10.0.0.2"], TRUSTED) == "10.0.0.7"


def test_no_header_or_an_empty_one_from_a_trusted_peer_is_the_peer() -> None:
    assert client_address("127.0.0.1", [], TRUSTED) == "127.0.0.1"
    assert client_address("127.0.0.1", [""], TRUSTED) == "127.0.0.1"


@pytest.mark.parametrize("garbage", ["unknown", "999.1.1.1", "<script>", "1.2.3.4.5", "[::1",
                                     "_hidden", "  "])
def test_garbage_ends_the_walk_at_the_nearest_trusted_hop(garbage: str) -> None:
    assert client_address("127.0.0.1", [garbage], TRUSTED) == "127.0.0.1"
    assert client_address("127.0.0.1", [f"203.0.113.7, {garbage}, 10.0.0.2"],
                          TRUSTED) == "10.0.0.2"
    # garbage left of a real client address does not matter
    assert client_address("127.0.0.1", [f"{garbage}, 203.0.113.7"], TRUSTED) == "203.0.113.7"


def test_ipv6_peers_and_entries() -> None:
    assert client_address("fd00::1", ["2001:db8::7"], TRUSTED) == "2001:db8::7"
    assert client_address("fd00::1", ["[2001:db8::7]:4711"], TRUSTED) == "2001:db8::7"
    assert client_address("2001:db8::9", ["203.0.113.7"], TRUSTED) == "2001:db8::9"
    # canonical form, so one client is one address however it is written
    assert client_address("fd00::1", ["2001:DB8:0:0::7"], TRUSTED) == "2001:db8::7"


def test_ipv4_mapped_ipv6_counts_as_ipv4() -> None:
    # a server bound to :: sees IPv4 peers this way
    assert client_address("::ffff:127.0.0.1", ["203.0.113.7"], TRUSTED) == "203.0.113.7"
    assert client_address("::ffff:198.51.100.9", ["1.1.1.1"], TRUSTED) == "198.51.100.9"


def test_an_ipv4_entry_with_a_port() -> None:
    assert client_address("127.0.0.1", ["203.0.113.7:5555"], TRUSTED) == "203.0.113.7"


def test_a_peer_that_is_no_address_is_kept() -> None:
    assert client_address("testclient", ["203.0.113.7"], TRUSTED) == "testclient"


_ipv4 = st.ip_addresses(v=4).map(str)


@given(claimed=st.lists(st.one_of(_ipv4, st.text(max_size=20)), max_size=8), real=_ipv4)
def test_whatever_the_client_claims_the_proxys_entry_wins(claimed: list[str], real: str) -> None:
    """A trusted proxy appends the real peer after whatever the client sent: the answer is
    that real peer (or, when it is itself trusted, an address no farther left)."""
    header = ", ".join([*claimed, real])
    got = client_address("127.0.0.1", [header], TRUSTED)
    if not any(ipaddress.ip_address(real) in n for n in TRUSTED):
        assert got == real


def test_parse_names_the_bad_entry() -> None:
    with pytest.raises(ValueError, match=re.escape("'10.0.0.1/8'")):
        parse_trusted_proxies(["10.0.0.1/8"])
    with pytest.raises(ValueError, match=re.escape("'proxy.example'")):
        parse_trusted_proxies(["proxy.example"])


@pytest.mark.parametrize("entry", ["10.0.0.1/8", "nginx", "300.0.0.1", ""])
def test_config_file_rejects_a_bad_entry_with_a_clear_error(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"trusted_proxies": ["127.0.0.1", entry]}))
    settings = load_config_file(Settings(data_dir=tmp_path), path)
    with pytest.raises(ConfigError, match=r"trusted_proxies: .* is not an IP address or network"):
        settings.check()


def test_config_file_sets_them(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"trusted_proxies": ["127.0.0.1/32", "10.0.0.0/8", "::1"]}')
    settings = load_config_file(Settings(data_dir=tmp_path), path)
    settings.check()
    assert settings.trusted_proxies == ["127.0.0.1/32", "10.0.0.0/8", "::1"]
    assert Settings().trusted_proxies == []  # none unless configured


def _through(middleware: ClientAddressMiddleware, scope: dict[str, Any]) -> Any:
    seen: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope.get("client"))

    middleware.app = app
    asyncio.run(middleware(scope, None, None))  # type: ignore[arg-type]
    return seen[0]


@pytest.mark.parametrize("kind", ["http", "websocket"])
def test_the_middleware_rewrites_the_scope_for_http_and_websockets(kind: str) -> None:
    mw = ClientAddressMiddleware(None, TRUSTED)  # type: ignore[arg-type]
    headers = [(b"host", b"x"), (b"X-Forwarded-For", b"1.2.3.4, 203.0.113.7")]
    assert _through(mw, {"type": kind, "client": ("127.0.0.1", 5000),
                         "headers": headers}) == ("203.0.113.7", 5000)
    assert _through(mw, {"type": kind, "client": ("198.51.100.9", 5000),
                         "headers": headers}) == ("198.51.100.9", 5000)
    untrusting = ClientAddressMiddleware(None, ())  # type: ignore[arg-type]
    assert _through(untrusting, {"type": kind, "client": ("127.0.0.1", 5000),
                                 "headers": headers}) == ("127.0.0.1", 5000)
