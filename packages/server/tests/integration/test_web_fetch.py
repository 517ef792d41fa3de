"""web_fetch's fetch (agent/web/fetch.py) against real HTTP servers: the test kit's
``codey-search-service`` on 127.0.0.2 stands for a public site (the settings' allow list lets
that one address through, as an operator's would) and another on 127.0.0.1 for the server's
own network. Every way around the address rules a prompt-injected model could try is refused
before a connection is made, and the size and time caps hold against hostile bodies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codey_server.agent.web.addresses import FetchFailed, Refused, allowed_networks
from codey_server.agent.web.fetch import MAX_REDIRECTS, FetchLimits, fetch, resolve_host, to_text
from codey_server.agent.web.run import WebTools
from codey_testkit.search_service import SearchServiceHandle

PUBLIC = allowed_networks(["127.0.0.2/32"])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchServiceHandle]:
    with SearchServiceHandle(tmp_path_factory.mktemp("site"), host="127.0.0.2") as handle:
        yield handle


@pytest.fixture(scope="module")
def inside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchServiceHandle]:
    with SearchServiceHandle(tmp_path_factory.mktemp("inside"), host="127.0.0.1") as handle:
        yield handle


def _fetch(url: str, **limits: object) -> str:
    got = asyncio.run(fetch(url, FetchLimits(allowed=PUBLIC, **limits)))  # type: ignore[arg-type]
    return to_text(got)


def test_a_public_page_reads_as_markdown_without_its_scripts(site: SearchServiceHandle) -> None:
    text = _fetch(f"{site.url}/page")
    assert text == "# Codey test page\n\nHello from the [docs](https://example.org/docs)."
    assert _fetch(f"{site.url}/text") == "plain text here\n"


def test_the_model_sees_a_refusal_for_each_way_to_the_servers_own_network(
        site: SearchServiceHandle, inside: SearchServiceHandle) -> None:
    port = inside.url.rsplit(":", 1)[1]
    refused = {
        f"{inside.url}/page": "loopback",  # the server's own API's address
        f"http://localhost:{port}/page": "loopback",  # a name resolving to 127.0.0.1
        "http://169.254.169.254/latest/meta-data/": "metadata",
        "http://[fd00:ec2::254]/latest/meta-data/": "metadata",
        f"http://2130706433:{port}/page": "loopback",  # decimal
        f"http://0177.0.0.1:{port}/page": "loopback",  # octal
        f"http://0x7f.0.0.1:{port}/page": "loopback",  # hex
        f"http://[::ffff:127.0.0.1]:{port}/page": "loopback",  # IPv4-mapped IPv6
        f"http://[::1]:{port}/page": "loopback",
        "http://0.0.0.0/": "unspecified",
        "http://10.0.0.1/": "private",
        # a public-looking site that redirects to the server's own network
        f"{site.url}/redirect?to={inside.url}/page": "loopback",
        f"{site.url}/redirect?to=http://169.254.169.254/": "metadata",
        f"{site.url}/redirect?to=file:///etc/passwd": "only http",
        "file:///etc/passwd": "only http",
        "gopher://127.0.0.1:70/_SET%20x": "only http",
        f"{site.url}/loop": f"more than {MAX_REDIRECTS} redirects",
    }
    tools = WebTools(FetchLimits(allowed=PUBLIC, timeout_s=30))
    for url, why in refused.items():
        status, text = asyncio.run(tools.run("fetch", url))
        assert (status, text.startswith("refused:")) == ("rejected", True), (url, text)
        assert why in text, (url, text)


def test_a_redirect_within_the_rules_is_followed_and_shown(site: SearchServiceHandle) -> None:
    status, text = asyncio.run(WebTools(FetchLimits(allowed=PUBLIC)).run(
        "fetch", f"{site.url}/redirect?to=/page", "what is the title?"))
    assert status == "done", text
    assert f"Fetched {site.url}/page (HTTP 200, text/html" in text
    assert f"Redirected from: {site.url}/redirect?to=/page" in text
    assert "You asked: what is the title?" in text and "# Codey test page" in text


def test_an_enormous_body_is_cut_at_the_cap(site: SearchServiceHandle) -> None:
    got = asyncio.run(fetch(f"{site.url}/huge", FetchLimits(allowed=PUBLIC, max_bytes=300_000)))
    assert got.truncated and len(got.body) == 300_000 and set(got.body) == {ord("A")}
    status, text = asyncio.run(WebTools(FetchLimits(allowed=PUBLIC, max_bytes=300_000)).run(
        "fetch", f"{site.url}/huge"))
    assert status == "done" and "300000 bytes, cut at the size cap" in text


def test_a_slow_loris_body_is_cut_at_the_time_cap(site: SearchServiceHandle) -> None:
    started = time.monotonic()
    with pytest.raises(FetchFailed, match="more than 3 s"):
        asyncio.run(fetch(f"{site.url}/slow", FetchLimits(allowed=PUBLIC, timeout_s=3)))
    assert time.monotonic() - started < 20


def test_the_connection_goes_to_the_address_that_was_checked(
        site: SearchServiceHandle) -> None:
    """DNS rebinding: a name that resolves to a public address when checked and to loopback
    afterwards is resolved once per hop, and the connection goes to the checked address."""
    port = int(site.url.rsplit(":", 1)[1])
    answers = [["127.0.0.2"], ["127.0.0.1"], ["127.0.0.1"]]
    asked: list[tuple[str, int]] = []

    async def rebinding(host: str, p: int) -> list[str]:
        asked.append((host, p))
        return answers[len(asked) - 1]

    got = asyncio.run(fetch(f"http://rebind.test:{port}/page",
                            FetchLimits(allowed=PUBLIC), resolve=rebinding))
    assert got.status == 200 and b"Codey test page" in got.body
    assert asked == [("rebind.test", port)]

    async def both(host: str, p: int) -> list[str]:
        return ["127.0.0.2", "127.0.0.1"]

    with pytest.raises(Refused, match=r"rebind\.test \(127\.0\.0\.1\) is a loopback"):
        asyncio.run(fetch(f"http://rebind.test:{port}/page", FetchLimits(allowed=PUBLIC),
                          resolve=both))


def test_a_name_that_does_not_resolve_fails_in_words() -> None:
    with pytest.raises(FetchFailed, match="could not resolve"):
        asyncio.run(resolve_host("no-such-host.invalid", 80))


def test_the_search_backends_answer_as_searxng_and_as_brave(tmp_path: Path) -> None:
    from codey_server.agent.web.search import SearchBackend

    with SearchServiceHandle(tmp_path / "search", brave_key="k-123") as backend:
        status, text = asyncio.run(WebTools(backend=SearchBackend("searxng", backend.url)).run(
            "search", "codey docs"))
        assert status == "done", text
        assert text.startswith("Results for 'codey docs':\n1. Result 1 for codey docs\n"
                               "   https://example.org/codey docs/1\n   Snippet 1 about")
        status, text = asyncio.run(WebTools(backend=SearchBackend(
            "brave", backend.url, "k-123")).run("search", "msgspec"))
        assert status == "done" and "2. Result 2 for msgspec" in text, text
        status, text = asyncio.run(WebTools(backend=SearchBackend(
            "brave", backend.url, "wrong")).run("search", "msgspec"))
        assert (status, text) == ("failed", "error: the search backend answered HTTP 401")
        assert [(q["api"], q["q"], q["token"]) for q in backend.queries()] == [
            ("searxng", "codey docs", ""), ("brave", "msgspec", "k-123"),
            ("brave", "msgspec", "wrong")]
    status, text = asyncio.run(WebTools().run("search", "anything"))
    assert status == "failed" and "web search is not set up" in text
