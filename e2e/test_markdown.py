"""The model's answers keep their structure (markdown-it: tables; highlight.js: coloured code
and file views), under the server's Content-Security-Policy, and hostile Markdown runs
nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import ConsoleMessage, Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"

ANSWER = """Here is what I found:

| file | tests | status |
|------|------:|--------|
| `app.py` | 2 | **fixed** |
| `cli.py` | 0 | untouched |

The fix:

```python
def add(a, b):
    # the sum, not the difference
    return a + b
```

See [the docs](https://docs.python.org/3/) for more."""

APP_PY = 'import os\n\n\ndef add(a, b):\n    """Add."""\n    return a + b\n'

HOSTILE = "\n\n".join([
    "<script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    "[js link](javascript:window.__pwned=3)",
    "[mixed case](JaVaScRiPt:alert(1))",
    "[data link](data:text/html,<script>window.__pwned=4</script>)",
    "[vb](vbscript:msgbox(1))",
    '[quoted title](https://ok.test/ "a \\" onmouseover=\\"window.__pwned=5")',
    '[x](https://ok.test/" onmouseover="window.__pwned=6)',
    "![pic](https://ok.test/p.png \"t\\\" onerror=\\\"window.__pwned=7\")",
    "![data pic](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    '<a href="javascript:alert(1)">raw anchor</a>',
    "**<svg onload=window.__pwned=8>**",
    '```"><img src=x onerror=window.__pwned=9>\ncode\n```',
    "<iframe src=\"javascript:alert(1)\"></iframe>",
    "> <style>body{display:none}</style>",
    "| a | b |\n|---|---|\n| <b onclick=x>1</b> | [t](javascript:alert(2)) |",
    "<details open ontoggle=window.__pwned=10>x</details>",
    "https://ok.test/\"><img src=x onerror=window.__pwned=11>",
])


class Watch:
    """Dialogs, console errors (CSP refusals are console errors) and page errors."""

    def __init__(self, page: Page) -> None:
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.errors.append(f"pageerror: {err}"))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)


def test_tables_highlighted_code_and_file_views(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "look at app.py"},
         "reply": {"calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}},
        {"match": {"tool": "read_file"}, "reply": {"text": ANSWER}},
    ]})
    server = stack.server()
    worker = stack.worker()
    watch = Watch(page)
    stack.open(page)
    workdir = stack.workdir(worker, "md")
    Path(workdir, "app.py").write_text(APP_PY)
    stack.new_session(page, worker, workdir, "look at app.py")
    answer = stack.items(page, "assistant_message").last
    expect(answer.locator("table")).to_be_visible()
    expect(answer.locator("table tbody tr")).to_have_count(2)
    expect(answer.locator("table th").nth(1)).to_have_text("tests")
    expect(answer.locator("table td strong")).to_have_text("fixed")
    code = answer.locator("pre.code code.language-python")
    expect(code).to_contain_text("return a + b")
    expect(code.locator(".hljs-keyword").first).to_have_text("def")
    expect(code.locator(".hljs-comment")).to_have_text("# the sum, not the difference")
    link = answer.get_by_role("link", name="the docs")
    expect(link).to_have_attribute("href", "https://docs.python.org/3/")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    # keyword colour differs from the text's: highlighting shows
    colours = code.evaluate("""(el) => [getComputedStyle(el).color,
        getComputedStyle(el.querySelector('.hljs-keyword')).color]""")
    assert colours[0] != colours[1], colours

    # a file the agent read is shown coloured by its language
    read = stack.items(page, "tool_call").first
    read.locator("summary", has_text="Result").click()
    view = read.get_by_test_id("file-view")
    expect(view).to_have_attribute("data-lang", "py")
    expect(view.locator(".hljs-keyword").first).to_have_text("import")
    expect(view.locator(".hljs-string")).to_have_text('"""Add."""')
    page.screenshot(path=f"{SHOTS}/markdown.png")
    assert not watch.errors, watch.errors  # no CSP refusal, no failed module
    assert server.http.get("/").headers["content-security-policy"].startswith(
        "default-src 'self'; script-src 'self';")


def test_hostile_markdown_runs_nothing(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "be evil"}, "reply": {"text": HOSTILE}},
    ]})
    stack.server()
    worker = stack.worker()
    watch = Watch(page)
    stack.open(page)
    stack.new_session(page, worker, stack.workdir(worker, "evil"), "be evil")
    answer = stack.items(page, "assistant_message").last
    expect(answer).to_contain_text("<script>window.__pwned = 1</script>")  # shown as text
    answer.hover()
    for a in answer.locator("a").all():
        a.hover()
    answer.locator("table").click()
    # what the hover and the click set off has run and said so: a frame drawn and a task
    # after it, and the page's console messages and dialogs reach us before this answer
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done)))")
    report = page.evaluate("""() => {
      const root = document.querySelector('[data-testid=session-view]');
      const bad = [];
      for (const el of root.querySelectorAll('*')) {
        const tag = el.tagName.toLowerCase();
        if (['script', 'iframe', 'img', 'style', 'object', 'embed', 'svg', 'details',
             'form', 'input'].includes(tag) && el.closest('.md')) bad.push('tag ' + tag);
        for (const attr of el.attributes) {
          if (attr.name.startsWith('on')) bad.push(`${tag} ${attr.name}`);
        }
        if (tag === 'a' && el.closest('.md') &&
            !/^(https?:|mailto:)/i.test(el.getAttribute('href') || '')) {
          bad.push('href ' + el.getAttribute('href'));
        }
      }
      return { bad, pwned: window.__pwned ?? null,
               scripts: [...document.scripts].map((s) => s.src) };
    }""")
    assert report["bad"] == [], report["bad"]
    assert report["pwned"] is None
    assert stack.srv is not None
    assert all(src.startswith(stack.srv.url) for src in report["scripts"]), report["scripts"]
    assert watch.dialogs == []
    assert not watch.errors, watch.errors
    # what was refused is still there to read
    expect(answer).to_contain_text("[js link](javascript:window.__pwned=3)")
    expect(answer).to_contain_text('<img src=x onerror="window.__pwned = 2">')
    # an image is never loaded: it is a link, labelled with its alt text
    expect(answer.locator("a.md-image")).to_have_text("image: pic")
    expect(answer.locator("a.md-image")).to_have_attribute("href", "https://ok.test/p.png")
