"""Project context and the session's life, through the real stack: AGENTS.md files, skills,
the project memory, questions for the user, session operations, browser notifications."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Browser, Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def _instructions(model: Any, prompt: str) -> str:
    bodies = [r["body"] for r in model.requests("/v1/chat/completions")
              if prompt in str(r["body"])]
    assert bodies, f"no model request for {prompt!r}"
    text: str = bodies[0]["messages"][0]["content"]
    return text


def test_agents_files_skills_and_memory(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "set up the backend"},
         "reply": {"text": "Checking the skill first.", "calls": [
             {"name": "read_file", "arguments": {"path": ".codey/skills/db/SKILL.md"}}]}},
        {"match": {"tool": "read_file", "tool_output": "alembic"},
         "reply": {"calls": [{"name": "remember", "arguments": {
             "note": "migrations run with `alembic upgrade head`"}}]}},
        {"match": {"tool": "remember"}, "reply": {"text": "Noted for next time."}},
        {"match": {"user": "second session"}, "reply": {"text": "I remember."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    root = worker.root
    workdir = root / "company" / "backend"
    (workdir / ".codey" / "skills" / "db").mkdir(parents=True)
    worker.codey_home.joinpath("AGENTS.md").write_text("USER: answer briefly.")
    (root / "AGENTS.md").write_text("ROOT: use uv for Python.")
    (root / "company" / "AGENTS.md").write_text("COMPANY: no secrets in logs.")
    (workdir / "AGENTS.md").write_text("BACKEND: tests live in tests/.")
    (workdir / ".codey" / "skills" / "db" / "SKILL.md").write_text(
        "---\nname: db-migrations\ndescription: Write and run alembic migrations.\n---\n"
        "Run `alembic upgrade head` after each migration.\n")
    (workdir / ".codey" / "skills" / "broken").mkdir()
    (workdir / ".codey" / "skills" / "broken" / "SKILL.md").write_text("no front matter")

    stack.open(page)
    stack.new_session(page, worker, str(workdir), "set up the backend")
    expect(stack.items(page, "assistant_message").last).to_have_text("Noted for next time.")

    text = _instructions(model, "set up the backend")
    order = [text.index(marker) for marker in ("USER:", "ROOT:", "COMPANY:", "BACKEND:")]
    assert order == sorted(order), "AGENTS.md files go outermost first"
    assert "- db-migrations: Write and run alembic migrations." in text
    assert "Write and run alembic" in text and "no front matter" not in text

    context = page.get_by_test_id("context")
    expect(context.get_by_test_id("instructions").locator("li")).to_have_count(4)
    skill = context.locator("[data-testid=skill][data-skill=db-migrations]")
    expect(skill.get_by_test_id("skill-loaded")).to_be_visible()
    expect(context).to_contain_text("1 skipped")
    memory = page.get_by_test_id("memory-text")
    expect(memory).to_have_text("- migrations run with `alembic upgrade head`")
    page.screenshot(path=f"{SHOTS}/project-context.png", full_page=True)

    # the user edits the memory; the next session in this workdir gets it
    page.get_by_test_id("memory-edit").click()
    page.get_by_test_id("memory-input").fill(
        "- migrations run with `alembic upgrade head`\n- the API lives in api/")
    page.get_by_test_id("memory-save").click()
    expect(memory).to_contain_text("the API lives in api/")
    stack.new_session(page, worker, str(workdir), "second session")
    expect(stack.items(page, "assistant_message").last).to_have_text("I remember.")
    second = _instructions(model, "second session")
    assert "alembic upgrade head" in second and "the API lives in api/" in second


def test_a_question_answered_from_the_browser(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "pick a database"},
         "reply": {"calls": [{"name": "ask_user", "arguments": {
             "question": "Which database should I use?", "choices": ["sqlite", "postgres"]}}]}},
        {"match": {"tool": "ask_user", "tool_output": "postgres"},
         "reply": {"text": "Going with postgres."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "db"), "pick a database")
    question = page.get_by_test_id("question")
    expect(question).to_be_visible()
    expect(page.get_by_test_id("question-text")).to_have_text("Which database should I use?")
    expect(stack.status(page)).to_have_attribute("data-status", "waiting_user")
    page.goto(page.url.split("#")[0] + "#/")
    card = page.locator(f"[data-testid=session-card][data-session-id='{sid}']")
    expect(card.get_by_test_id("attention-badge")).to_be_visible()
    stack.open_session(page, sid)
    page.get_by_test_id("answer-choice").filter(has_text="postgres").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Going with postgres.")
    expect(page.get_by_test_id("question-answer")).to_have_text("You answered: postgres")
    results = [r for r in model.requests("/v1/chat/completions")
               if r["latest"].get("kind") == "tool"]
    assert results[-1]["latest"]["tool_results"][0]["output"] == "the user answered: postgres"


def test_session_operations_seen_in_a_second_browser(stack: Stack, page: Page,
                                                     browser: Browser) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "first"}, "reply": {"text": "One."}},
        {"match": {"user": "second"}, "reply": {"text": "Two."}},
        {"match": {"any": True}, "reply": {"text": "Again."}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "ops"), "first")
    expect(stack.items(page, "assistant_message").last).to_have_text("One.")
    page.get_by_test_id("prompt-input").fill("second")
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Two.")

    other = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        second = other.new_page()
        stack.open(second)
        card = second.locator(f"[data-testid=session-card][data-session-id='{sid}']")
        expect(card).to_contain_text("first")

        # rename
        page.get_by_test_id("session-title").click()
        page.get_by_test_id("rename-input").fill("Counting things")
        page.get_by_test_id("rename-input").press("Enter")
        expect(card).to_contain_text("Counting things")

        # fork from the first answer: the fork has the first exchange only
        stack.items(page, "assistant_message").first.hover()
        stack.items(page, "assistant_message").first.get_by_test_id("fork-here").click()
        fork_view = page.get_by_test_id("session-view")
        expect(fork_view).not_to_have_attribute("data-session-id", sid)
        fork_id = fork_view.get_attribute("data-session-id")
        assert fork_id
        expect(stack.items(page)).to_have_count(2)
        expect(page.get_by_test_id("forked-from")).to_be_visible()
        fork_card = second.locator(f"[data-testid=session-card][data-session-id='{fork_id}']")
        expect(fork_card).to_contain_text("Counting things (fork)")
        state = server.http.get(f"/api/sessions/{fork_id}").json()
        assert [i["kind"] for i in state["items"]] == ["user_message", "assistant_message"]

        # archive the fork: it leaves the second browser's main list, and is found archived
        page.get_by_test_id("session-menu-button").click()
        page.get_by_test_id("menu-archive").click()
        expect(fork_card).to_have_count(0)
        second.get_by_test_id("show-archived").check()
        expect(fork_card).to_be_visible()
        second.get_by_test_id("show-archived").uncheck()

        # close the first session: the second browser sees it closed, no prompt box
        stack.open_session(page, sid)
        page.get_by_test_id("session-menu-button").click()
        page.get_by_test_id("menu-close").click()
        expect(card.get_by_test_id("session-status")).to_have_attribute("data-status", "closed")
        stack.open_session(second, sid)
        expect(second.get_by_test_id("session-closed")).to_be_visible()
        expect(second.get_by_test_id("prompt-input")).to_be_hidden()

        # search on the dashboard
        second.evaluate("location.hash = '#/'")
        second.get_by_test_id("session-search").fill("counting")
        expect(second.get_by_test_id("session-card")).to_have_count(1)
        second.get_by_test_id("session-search").fill("no such thing")
        expect(second.get_by_test_id("session-card")).to_have_count(0)
        second.screenshot(path=f"{SHOTS}/dashboard-search.png")
    finally:
        other.close()


NOTIFICATION_SPY = """
  Object.defineProperty(document, 'hidden', { get: () => window.__hidden === true });
  const Real = window.Notification;
  window.__notes = [];
  window.Notification = class extends Real {
    constructor(title, options) { super(title, options); window.__notes.push([title, options]); }
  };
  Object.defineProperty(window.Notification, 'permission', { get: () => Real.permission });
  window.Notification.requestPermission = (...a) => Real.requestPermission(...a);
"""


def test_a_notification_for_an_approval_while_the_page_is_hidden(
        stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "make it"}, "reply": {"calls": [stack.shell("make")]}},
        {"match": {"any": True}, "reply": {"text": "done"}},
    ]})
    stack.server()
    worker = stack.worker()
    page.context.grant_permissions(["notifications"])
    page.add_init_script(NOTIFICATION_SPY)
    stack.open(page)
    page.get_by_test_id("notify-toggle").click()
    expect(page.get_by_test_id("notify-toggle")).to_have_attribute("aria-pressed", "true")
    # hidden before the session starts: its approval comes at once, and one that came
    # before the page was hidden asked for no notification (the test's race)
    page.evaluate("window.__hidden = true")
    stack.new_session(page, worker, stack.workdir(worker, "notify"), "make it",
                      policy="suggest")
    expect(page.get_by_test_id("approval")).to_be_visible()
    # a function, not an expression: Playwright compiles an expression with eval in the page
    # when its first look comes too early, and the server's CSP (no 'unsafe-eval') refuses it
    page.wait_for_function("() => window.__notes.length > 0")
    notes = page.evaluate("window.__notes.map(n => n[0])")
    assert any("needs your approval" in n for n in notes), notes


def test_plan_mode_edit_and_approve(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "rename the module"},
         "reply": {"text": "Here is my plan.", "calls": [{"name": "update_plan", "arguments": {
             "explanation": "Two steps.", "plan": [
                 {"step": "Find the imports", "status": "pending"},
                 {"step": "Rename the file", "status": "pending"}]}}]}},
        {"match": {"user": "The plan is approved as I edited it"},
         "reply": {"calls": [stack.shell("touch", "renamed.txt")]}},
        {"match": {"tool": "shell"}, "reply": {"text": "Renamed."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    workdir = stack.workdir(worker, "plan")
    sid = stack.new_session(page, worker, workdir, "rename the module", plan_mode=True)
    expect(page.get_by_test_id("plan-proposed")).to_be_visible()
    expect(stack.status(page)).to_have_attribute("data-status", "waiting_user")
    assert not (Path(workdir) / "renamed.txt").exists()
    first = model.requests("/v1/chat/completions")[0]["body"]
    assert "## Plan mode" in first["messages"][0]["content"]
    page.screenshot(path=f"{SHOTS}/plan-proposed.png", full_page=True)

    page.get_by_test_id("plan-edit").click()
    page.get_by_test_id("plan-input").fill("Find the imports\nRename the file\nRun the tests")
    page.get_by_test_id("plan-approve-edited").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Renamed.")
    expect(page.get_by_test_id("plan").locator("li")).to_have_count(3)
    assert (Path(workdir) / "renamed.txt").exists()
    state = stack.srv.http.get(f"/api/sessions/{sid}").json()  # type: ignore[union-attr]
    assert (state["plan_mode"], state["plan_status"]) == (False, "approved")


PNG_1PX = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a5f5c2a50000000049454e44ae426082")


def test_images_and_files_in_a_prompt(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "look at these"}, "reply": {"calls": [
            {"name": "read_file", "arguments": {"path": ".codey/attachments"}}]}},
        {"match": {"tool": "read_file"}, "reply": {"text": "Seen both."}},
        {"match": {"any": True}, "reply": {"text": "Hi."}},
    ]})
    config = {"providers": [{"name": "scripted", "kind": "responses",
                             "base_url": model.base_url, "models": ["scripted-1"]}]}
    stack.server(config)
    worker = stack.worker()
    stack.open(page)
    workdir = stack.workdir(worker, "files")
    sid = stack.new_session(page, worker, workdir, "hello")
    expect(stack.items(page, "assistant_message").last).to_have_text("Hi.")
    page.get_by_test_id("attach-input").set_input_files([
        {"name": "dot.png", "mimeType": "image/png", "buffer": PNG_1PX},
        {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"line one\nline two\n"}])
    expect(page.get_by_test_id("attach-chip")).to_have_count(2)
    page.get_by_test_id("prompt-input").fill("look at these")
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Seen both.")
    user = stack.items(page, "user_message").last
    expect(user.get_by_test_id("attachment-image")).to_have_count(1)
    expect(user.get_by_test_id("attachment-file")).to_contain_text("notes.txt")

    written = list((Path(workdir) / ".codey" / "attachments").glob("*-notes.txt"))
    assert len(written) == 1 and written[0].read_text() == "line one\nline two\n"
    request = next(r for r in model.requests("/v1/responses")
                   if "look at these" in str(r["body"]))
    message = [i for i in request["body"]["input"] if i.get("role") == "user"][-1]
    kinds = [p["type"] for p in message["content"]]
    assert kinds == ["input_text", "input_image"]
    assert message["content"][1]["image_url"].startswith("data:image/png;base64,")
    assert f".codey/attachments/{written[0].name}" in message["content"][0]["text"]
    state = stack.srv.http.get(f"/api/sessions/{sid}").json()  # type: ignore[union-attr]
    sent = [i for i in state["items"] if i["kind"] == "user_message"][-1]
    assert [a["name"] for a in sent["attachments"]] == ["dot.png", "notes.txt"]
    assert sent["attachments_written"] is True
