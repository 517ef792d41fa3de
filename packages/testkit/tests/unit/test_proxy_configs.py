"""The proxies the suites start run docs/deploy.md's configurations: the lines an operator
pastes for replicas are the lines the test kit writes (a change to one fails here until the
other follows)."""

from __future__ import annotations

import re
from pathlib import Path

from codey_testkit.caddy import DEPLOY_DIRECTIVES, caddyfile
from codey_testkit.nginx import DEPLOY_LOCATION

DEPLOY = Path(__file__).resolve().parents[4] / "docs" / "deploy.md"


def _block(text: str, opener: str) -> list[str]:
    """The lines inside the first ``{ … }`` block that ``opener`` starts, stripped."""
    start = text.index(opener)
    body = text[start + len(opener):]
    depth, lines, current = 1, [], ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        if ch == "\n":
            lines.append(current.strip())
            current = ""
        else:
            current += ch
    lines.append(current.strip())
    return [line for line in lines if line]


def test_the_nginx_location_is_deploy_mds() -> None:
    text = DEPLOY.read_text()
    replicas = text[text.index("upstream codey"):]
    assert _block(replicas, "location / {") == list(DEPLOY_LOCATION)


def test_the_caddy_reverse_proxy_is_deploy_mds() -> None:
    text = DEPLOY.read_text()
    opener = re.search(r"reverse_proxy 10\.0\.0\.11:8765 [^{]*\{", text)
    assert opener is not None, "deploy.md has no Caddy block for replicas"
    assert _block(text, opener.group(0)) == list(DEPLOY_DIRECTIVES)
    written = caddyfile(Path("/x"), 1234, ["127.0.0.1:1", "127.0.0.1:2"])
    assert _block(written, "reverse_proxy 127.0.0.1:1 127.0.0.1:2 {") == list(DEPLOY_DIRECTIVES)
