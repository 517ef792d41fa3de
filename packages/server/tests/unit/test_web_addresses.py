"""web_fetch's address rules (agent/web/addresses.py): what may be fetched from, whatever its
spelling; and the URLs that are not fetched at all."""

from __future__ import annotations

import pytest

from codey_server.agent.tools.base import Gate
from codey_server.agent.tools.web import WEB_FETCH
from codey_server.agent.web.addresses import Refused, address_problem, allowed_networks, target_of


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"), ("127.9.9.9", "loopback"), ("::1", "loopback"),
    ("10.0.0.5", "private"), ("172.16.3.4", "private"), ("192.168.1.1", "private"),
    ("fd12:3456::1", "private"), ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"), ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("100.64.0.1", "carrier-grade"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    # IPv4 inside IPv6: mapped, NAT64, 6to4
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "metadata"),
    ("64:ff9b::a00:1", "private"), ("2002:7f00:1::", "loopback"),
    ("fe80::1%eth0", "link-local"),
])
def test_the_servers_own_networks_are_refused_by_name(address: str, why: str) -> None:
    problem = address_problem(address)
    assert problem is not None and why in problem, (address, problem)


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
                                     "1.1.1.1", "::ffff:8.8.8.8"])
def test_public_addresses_go(address: str) -> None:
    assert address_problem(address) is None


def test_the_settings_allow_list_lets_a_network_through_and_nothing_else() -> None:
    allowed = allowed_networks(["127.0.0.2/32", "10.1.0.0/16"])
    assert address_problem("127.0.0.2", allowed) is None
    assert address_problem("::ffff:127.0.0.2", allowed) is None
    assert address_problem("10.1.2.3", allowed) is None
    assert "loopback" in (address_problem("127.0.0.1", allowed) or "")
    assert "private" in (address_problem("10.2.0.1", allowed) or "")
    assert "metadata" in (address_problem("169.254.169.254", allowed) or "")


@pytest.mark.parametrize(("url", "said"), [
    ("file:///etc/passwd", "only http"), ("gopher://127.0.0.1:70/_x", "only http"),
    ("ftp://example.org/", "only http"), ("javascript:alert(1)", "only http"),
    ("http://user:pw@example.org/", "user name"), ("http://example.org@127.0.0.1/", "user"),
    ("http://example.org\\@127.0.0.1/", "backslash"), ("http:///path", "no host"),
    ("http://exa mple.org/", "spaces"), ("http://example.org/\n", "control"),
    ("http://example.org:99999/", "not a URL"),
])
def test_urls_that_are_not_fetched(url: str, said: str) -> None:
    with pytest.raises(Refused) as err:
        target_of(url)
    assert said in str(err.value)


def test_a_target_keeps_the_host_port_and_query() -> None:
    t = target_of("HTTPS://Docs.Example.ORG:8443/a/b?c=d#frag")
    assert (t.scheme, t.host, t.port, t.path) == ("https", "docs.example.org", 8443, "/a/b?c=d")
    assert target_of("http://[::1]/").host == "::1"
    assert target_of("http://bücher.example/").host == "xn--bcher-kva.example"


@pytest.mark.parametrize(("url", "why"), [
    ("http://127.0.0.1:8080/api/sessions", "loopback"), ("http://[::1]/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"), ("https://10.0.0.5/", "private"),
    ("http://[::ffff:127.0.0.1]/", "loopback"), ("http://10.2.0.1/", "private"),
])
def test_a_url_naming_a_private_address_is_refused_before_anyone_is_asked(
        url: str, why: str) -> None:
    args = WEB_FETCH.parse({"url": url}, name="web_fetch", capabilities=None)
    gate = Gate("suggest", fetch_allow=("10.1.0.0/16",))
    refusal = gate.route(WEB_FETCH, args)
    assert isinstance(refusal, str) and refusal.startswith("refused:") and why in refusal


@pytest.mark.parametrize("url", ["http://10.1.2.3/wiki", "https://example.org/",
                                 "http://localhost:8080/", "http://93.184.215.14/"])
def test_an_allowed_network_or_a_name_goes_on_to_the_approval(url: str) -> None:
    # a name is judged by what it resolves to, when fetched; the allowed network is asked
    args = WEB_FETCH.parse({"url": url}, name="web_fetch", capabilities=None)
    asked = Gate("suggest", fetch_allow=("10.1.0.0/16",)).route(WEB_FETCH, args)
    assert not isinstance(asked, str) and asked is not None
