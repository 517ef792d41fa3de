"""Slash commands in the browser over the real stack: a prompt file of the project
(``.claude/commands/deploy.md``, with front matter and ``$1``/``$2``) found through ``/``,
filtered as typed, chosen with a tap and sent with its arguments substituted, on a phone
(390×844, touch); and on a desktop the keyboard: arrows, Tab completes, Esc closes, Enter runs
a built-in (``/new``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Browser, Page, expect

from codey_testkit.scenarios import create_session

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = Path("/tmp/shots/i39-slash")
PHONE = {"width": 390, "height": 844}

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "Deploy the web app to staging"},
     "reply": {"text": "Deploying web to staging."}},
    {"match": {"any": True}, "reply": {"text": "Hello."}},
]}

DEPLOY = ("---\ndescription: Deploy an app\nargument-hint: <app> <env>\n"
          "allowed-tools: Bash(make deploy:*), Read\n---\n"
          "Deploy the $1 app to $2, then check it answers.\n")


def _project(workdir: str) -> None:
    commands = Path(workdir) / ".claude" / "commands"
    (commands / "frontend").mkdir(parents=True)
    (commands / "deploy.md").write_text(DEPLOY)
    (commands / "frontend" / "component.md").write_text(
        "---\ndescription: Make a React component\n---\nMake a component named $ARGUMENTS.\n")


def _shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name))


def test_a_project_prompt_file_from_a_phone(stack: Stack, browser: Browser,
                                            browser_context_args: dict[str, Any]) -> None:
    stack.model(SCRIPT)
    server = stack.server()
    worker = stack.worker()
    wd = stack.workdir(worker, "shop")
    _project(wd)
    context = browser.new_context(**{**browser_context_args, "viewport": PHONE,
                                     "device_scale_factor": 2, "has_touch": True})
    page = context.new_page()
    stack.open(page)
    sid = create_session(server, worker, wd, "hi")
    stack.open_session(page, sid)
    expect(stack.items(page, "assistant_message").last).to_have_text("Hello.", timeout=30_000)

    box = page.get_by_test_id("prompt-input")
    box.tap()
    box.press_sequentially("/")
    menu = page.get_by_test_id("slash-menu")
    expect(menu).to_be_visible()
    items = menu.get_by_test_id("slash-item")
    # the built-ins at once, the project's files once the worker has read them
    expect(items.filter(has_text="/compact")).to_have_count(1)
    deploy = items.filter(has_text="/deploy")
    expect(deploy).to_contain_text("Deploy an app", timeout=30_000)
    expect(deploy).to_contain_text("<app> <env>")
    expect(items.filter(has_text="/frontend:component")).to_contain_text("project")
    _shot(page, "slash-menu-phone.png")
    # the menu fits the phone's width, above the prompt box
    where, prompt = menu.bounding_box(), box.bounding_box()
    assert where and prompt
    assert where["x"] >= 0 and where["x"] + where["width"] <= PHONE["width"], where
    assert where["y"] + where["height"] <= prompt["y"] + 1, (where, prompt)

    box.press_sequentially("dep")
    expect(items).to_have_count(1)
    items.first.tap()  # it takes arguments: completed into the box, not run
    expect(menu).to_be_hidden()
    expect(box).to_have_value("/deploy ")
    box.press_sequentially("web staging")
    page.get_by_test_id("prompt-send").tap()
    expect(stack.items(page, "user_message").last).to_contain_text(
        "Deploy the web app to staging, then check it answers.", timeout=30_000)
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "Deploying web to staging.", timeout=30_000)
    expect(box).to_have_value("")
    # the prompt says what the command set for its turn (its allowed-tools)
    expect(stack.items(page, "user_message").last.get_by_test_id("for-turn")).to_have_text(
        "/deploy · tools: exec, kill, read_file, shell, view_image, write_stdin")
    _shot(page, "slash-sent-phone.png")
    _shot(page, "slash-for-turn-phone.png")
    context.close()


def test_the_menu_by_keyboard_on_a_desktop(stack: Stack, page: Page) -> None:
    stack.model(SCRIPT)
    server = stack.server()
    worker = stack.worker()
    wd = stack.workdir(worker, "shop")
    _project(wd)
    stack.open(page)
    sid = create_session(server, worker, wd, "hi")
    stack.open_session(page, sid)
    expect(stack.items(page, "assistant_message").last).to_have_text("Hello.", timeout=30_000)

    box = page.get_by_test_id("prompt-input")
    box.click()
    box.press_sequentially("/")
    menu = page.get_by_test_id("slash-menu")
    items = menu.get_by_test_id("slash-item")
    expect(items.filter(has_text="/deploy")).to_have_count(1, timeout=30_000)
    _shot(page, "slash-menu-desktop.png")
    active = menu.locator(".slash-item.active")
    expect(active).to_have_attribute("data-name", "model")
    box.press("ArrowDown")
    expect(active).to_have_attribute("data-name", "compact")
    box.press("ArrowUp")
    box.press("ArrowUp")  # wraps round to the last
    expect(active).to_have_attribute("data-name", items.last.get_attribute("data-name") or "")
    box.press("Escape")
    expect(menu).to_be_hidden()
    expect(box).to_have_value("/")

    box.press_sequentially("comp")  # /comp: compact, and frontend:component by its middle
    expect(items).to_have_count(2)
    expect(items.first).to_have_attribute("data-name", "compact")
    box.press("ArrowDown")
    box.press("Tab")
    expect(box).to_have_value("/frontend:component ")
    box.press_sequentially("Basket")
    box.press("Enter")
    expect(stack.items(page, "user_message").last).to_contain_text(
        "Make a component named Basket.", timeout=30_000)

    box.press_sequentially("/ne")
    expect(active).to_have_attribute("data-name", "new")
    box.press("Enter")  # a built-in without arguments runs: a new session here
    dialog = page.get_by_test_id("new-session-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_test_id("ns-worker")).to_have_value(worker.worker_id)
    expect(dialog.get_by_test_id("ns-workdir")).to_have_value(wd)
