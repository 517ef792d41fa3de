"""The Telegram channel through the real stack: server, worker, scripted model, and the test
kit's fake Bot API (``codey-bot-api``) that python-telegram-bot talks to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from codey_testkit.bot_api import BotApiHandle
from codey_testkit.model_handle import start_model_server
from codey_testkit.procs import free_port
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess

TOKEN = "123456789:AAtestTOKENdoNotLog-xyz_0123456789"
ME, STRANGER = 4242, 9999

SCRIPT = {"model": "scripted-1", "steps": [
    {"match": {"user": "make the file"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": ["touch", "made.txt"]}}]}},
    {"match": {"tool": "shell"}, "reply": {"text": "Made made.txt for you."}},
    {"match": {"user": "pick a colour"}, "reply": {"calls": [
        {"name": "ask_user", "arguments": {"question": "Which colour?",
                                           "choices": ["red", "blue"]}}]}},
    {"match": {"tool": "ask_user", "tool_output": "blue"}, "reply": {"text": "Blue it is."}},
    {"match": {"any": True}, "reply": {"text": "Something went differently."}},
]}


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[BotApiHandle]:
    with BotApiHandle(TOKEN, tmp_path / "bot") as handle:
        yield handle


def _texts(bot: BotApiHandle, chat_id: int, method: str = "sendMessage") -> list[str]:
    return [s["text"] for s in bot.sent(chat_id) if s["method"] == method]


def _running(server: ServerProcess) -> dict[str, Any]:
    import time

    deadline = time.monotonic() + 60
    while True:
        status: dict[str, Any] = server.http.get("/api/telegram").json()
        if status["state"] == "running":
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def test_a_session_from_the_chat_with_an_approval_and_a_restart(
        tmp_path: Path, bot: BotApiHandle) -> None:
    with start_model_server(SCRIPT, tmp_path / "model") as model:
        config = {**provider_config(model),
                  "telegram": {"api_base": bot.url, "poll_timeout_s": 2}}
        # at debug the HTTP client logs every URL it calls: the redaction must catch them
        with ServerProcess(tmp_path / "server", config=config, extra_args=["--log-level",
                                                                           "debug"],
                           env={"CODEY_TELEGRAM_TOKEN": TOKEN}) as server, \
                WorkerProcess(server, tmp_path / "worker") as worker:
            status = _running(server)
            assert status["token_source"] == "env" and status["mode"] == "polling"
            assert status["bot_username"] == "codey_test_bot"
            code = server.http.post("/api/telegram/pairing-code").json()["code"]
            workdir = Path(worker.workdir("tg"))
            workdir.mkdir(parents=True)
            bot.script(
                {"message": {"chat_id": STRANGER, "text": "/sessions"}},
                {"message": {"chat_id": STRANGER, "text": "/pair WRONGCODE"}},
                {"message": {"chat_id": STRANGER, "text": "hello?"}},
                {"message": {"chat_id": ME, "text": f"/pair {code}", "user": "Ann"}},
                {"wait_for": {"text": "Paired", "chat_id": ME},
                 "message": {"chat_id": ME,
                             "text": f"/new {worker.worker_id} {workdir} make the file"}},
            )
            bot.wait(lambda s: any("Approval needed" in x["text"] for x in s["sent"]),
                     what="the approval message")
            state = server.http.get("/api/state/bootstrap").json()["state"]
            assert list(state["telegram_chats"]) == [str(ME)]
            assert state["telegram_chats"][str(ME)]["title"] == "Ann"
            (sid,) = state["sessions"]
            assert state["telegram_chats"][str(ME)]["session_id"] == sid

            server.restart()  # in the middle: the approval is sent, not decided
            worker.wait_connected()
            _running(server)
            bot.script(
                {"wait_for": {"text": "Approval needed", "chat_id": ME},
                 "press": {"chat_id": ME, "button": "Approve", "text": "touch made.txt"}},
                {"wait_for": {"text": "Made made.txt", "chat_id": ME},
                 "message": {"chat_id": ME, "text": "/sessions"}},
                # plain text is a prompt; the model's question comes to the chat, and the
                # next plain text answers it
                {"wait_for": {"text": r"\[idle\]", "chat_id": ME},
                 "message": {"chat_id": ME, "text": "pick a colour"}},
                {"wait_for": {"text": r"Which colour\?.*- blue", "chat_id": ME},
                 "message": {"chat_id": ME, "text": "blue"}},
                # the code was used once: it pairs nobody else
                {"message": {"chat_id": STRANGER, "text": f"/pair {code}"}},
            )
            bot.wait(lambda s: s["steps_done"] == s["steps_total"]
                     and any("Blue it is." in x["text"] for x in s["sent"]),
                     what="the answer to the question")
            assert (workdir / "made.txt").exists()

            sent = _texts(bot, ME)
            assert sum("Paired" in t for t in sent) == 1
            assert sum(t.startswith("Started ses_") for t in sent) == 1
            assert sum("Approval needed" in t for t in sent) == 1, sent
            assert sum("Made made.txt" in t for t in sent) == 1, sent
            assert sum("Which colour?" in t for t in sent) == 1, sent
            assert sent[-1] == "Blue it is."
            edits = _texts(bot, ME, "editMessageText")
            assert len(edits) == 1 and "approved" in edits[0], edits
            answered = [s["text"] for s in bot.sent() if s["method"] == "answerCallbackQuery"]
            assert answered == ["Decided."]
            assert bot.sent(STRANGER) == []  # never a word to a chat off the allow list

            state = server.http.get("/api/state/bootstrap").json()["state"]
            assert len(state["sessions"]) == 1  # /new was not handled twice after the restart
            (approval,) = state["sessions"][sid]["approvals"].values()
            assert approval["status"] == "approved"
            (question,) = state["sessions"][sid]["questions"].values()
            assert question["answer"] == "blue"
            assert list(state["telegram_chats"]) == [str(ME)]

            # the token is in no log line and no event, though the library logged its URLs
            # (at debug: at info the HTTP clients' per-request lines are not written)
            logs = "".join(p.read_text(errors="replace")
                           for p in server.log_dir.glob("server-*.log"))
            assert "bot[redacted]/" in logs
            assert TOKEN not in logs and TOKEN.split(":")[1] not in logs
            assert TOKEN.encode() not in (server.data_dir / "events.db").read_bytes()

            # removing the chat takes it off the allow list
            r = server.http.delete(f"/api/telegram/chats/{ME}")
            assert r.status_code == 200, r.text
            assert server.http.get("/api/telegram").json()["chats"] == []


def test_a_public_server_takes_updates_by_webhook_with_the_secret(
        tmp_path: Path, bot: BotApiHandle) -> None:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    with start_model_server(SCRIPT, tmp_path / "model") as model, \
            ServerProcess(tmp_path / "server",
                          config={**provider_config(model), "telegram": {"api_base": bot.url}},
                          extra_args=["--port", str(port), "--public-url", public],
                          env={"CODEY_TELEGRAM_TOKEN": TOKEN}) as server:
        status = _running(server)
        assert status["mode"] == "webhook"
        hook = bot.state()["webhook"]
        assert hook["url"] == f"{public}/api/telegram/webhook"
        assert len(hook["secret_token"]) >= 32
        # without Telegram's secret (or with a wrong one), an update is refused
        with httpx.Client(base_url=server.url, timeout=10) as anonymous:
            forged = {"update_id": 1, "message": {
                "message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"},
                "text": "/pair AAAAAAAA"}}
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "x" * 43}):
                r = anonymous.post("/api/telegram/webhook", json=forged, headers=headers)
                assert r.status_code == 403, r.text
        code = server.http.post("/api/telegram/pairing-code").json()["code"]
        bot.script(
            {"message": {"chat_id": STRANGER, "text": "/sessions"}},
            {"message": {"chat_id": ME, "text": f"/pair {code}"}},
            {"wait_for": {"text": "Paired"}, "message": {"chat_id": ME, "text": "/sessions"}},
        )
        bot.wait(lambda s: any("No sessions yet" in x["text"] for x in s["sent"]),
                 what="the answer to /sessions")
        assert bot.state()["calls"].get("getUpdates", 0) == 0
        assert bot.sent(STRANGER) == []
        assert bot.state()["pending_updates"] == 0


def test_among_replicas_one_runs_the_bot_and_another_takes_it_over(
        tmp_path: Path, bot: BotApiHandle) -> None:
    # two replicas with the token: one polls (two would end each other's polls with 409, as
    # Telegram does); the other says so, and runs the bot once the first is killed
    from codey_testkit.postgres import PostgresCluster, pg_bin
    from codey_testkit.waiting import wait_until

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed")
    config = {"telegram": {"api_base": bot.url, "poll_timeout_s": 2}}
    with PostgresCluster() as pg:
        dsn = pg.create_database("telegram")
        replicas = [ServerProcess(tmp_path / f"r{n}", config=config,
                                  extra_args=["--database-url", dsn, "--replica-id", f"r{n}"],
                                  env={"CODEY_TELEGRAM_TOKEN": TOKEN}) for n in range(2)]
        try:
            for replica in replicas:
                replica.start()

            def states() -> list[str]:
                return [r.http.get("/api/telegram").json()["state"] for r in replicas]

            wait_until(lambda: sorted(states()) == ["elsewhere", "running"], timeout=30,
                       what="one replica to run the bot and the other to say so")
            holder = replicas[states().index("running")]
            other = replicas[1 - replicas.index(holder)]
            code = holder.http.post("/api/telegram/pairing-code").json()["code"]
            bot.script({"message": {"chat_id": ME, "text": f"/pair {code}", "user": "Ann"}},
                       {"wait_for": {"text": "Paired", "chat_id": ME},
                        "message": {"chat_id": ME, "text": "/sessions"}})
            bot.wait(lambda s: s["steps_done"] == s["steps_total"] and
                     sum(x["method"] == "sendMessage" for x in s["sent"]) >= 2,
                     what="the pairing and the first answer")

            holder.kill9()
            wait_until(lambda: other.http.get("/api/telegram").json()["state"] == "running",
                       timeout=30, what="the other replica to take the bot over")
            bot.script({"message": {"chat_id": ME, "text": "/sessions"}})
            bot.wait(lambda s: s["steps_done"] == s["steps_total"] and
                     sum(x["method"] == "sendMessage" for x in s["sent"]) >= 3,
                     what="the new holder's answer")
            sent = _texts(bot, ME)
            assert sum("Paired" in t for t in sent) == 1, sent
            assert len(sent) == 3, sent  # each update answered once, by one replica
            assert bot.state()["conflicts"] == 0  # never two pollers at once
        finally:
            for replica in replicas:
                replica.stop()
