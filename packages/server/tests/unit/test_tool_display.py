"""``web/tool_display.js`` is what the tools' ``display`` generates, and the web client has no
list of tool names of its own."""

from __future__ import annotations

import re
from pathlib import Path

from codey_server.agent.tools import display
from codey_server.agent.tools.delegate import DELEGATE
from codey_server.agent.tools.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[4]
WEB = ROOT / "web"
REGENERATE = "uv run python -m codey_server.agent.tools.display web/tool_display.js"
#: the bodies web/views/items.js knows how to render
BODIES = {"command", "process", "patch", "search", "image", "memory", "question", "delegate",
          "mcp", "file"}


def test_committed_module_is_current() -> None:
    committed = WEB / display.TOOL_DISPLAY_JS
    assert committed.is_file(), f"{committed} is missing; run `{REGENERATE}`"
    assert display.render() == committed.read_text(encoding="utf-8"), (
        f"web/{display.TOOL_DISPLAY_JS} is out of date with the tools; run `{REGENERATE}` "
        "from the repo root and commit the result")


def test_main_writes_it(tmp_path: Path) -> None:
    out = tmp_path / display.TOOL_DISPLAY_JS
    assert display.main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == display.render()


def test_every_tool_has_a_title_an_icon_and_a_known_body() -> None:
    for tool in (*BUILTIN, DELEGATE):
        assert tool.display.label and tool.display.icon != "tool", tool.name
        assert tool.display.body in BODIES, tool.name
        assert tool.display.result in ("text", "file", "none"), tool.name


def test_the_web_client_does_not_switch_on_tool_names() -> None:
    names = "|".join(re.escape(t.name) for t in (*BUILTIN, DELEGATE))
    quoted = rf"""["'`]({names})["'`]"""
    switch = re.compile(rf"name\s*[!=]==\s*{quoted}|case\s+{quoted}\s*:")
    found = [f"{path.relative_to(ROOT)}: {m.group(0)}"
             for path in sorted(WEB.rglob("*.js")) if "vendor" not in path.parts
             for m in switch.finditer(path.read_text(encoding="utf-8"))]
    assert not found, "tool display belongs to the Tool (its `display`): " + "; ".join(found)
