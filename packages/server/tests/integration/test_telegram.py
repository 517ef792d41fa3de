"""The Telegram channel through the real stack: server, worker, scripted model, and the test
kit's fake Bot API (``codey-bot-api``) that python-telegram-bot talks to."""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from codey_testkit.bot_api import BotApiHandle
from codey_testkit.model_handle import start_model_server
from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.procs import free_port
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import WaitTimedOut, wait_until

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


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresCluster]:
    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed")
    with PostgresCluster() as cluster:
        yield cluster


def _texts(bot: BotApiHandle, chat_id: int, method: str = "sendMessage") -> list[str]:
    return [s["text"] for s in bot.sent(chat_id) if s["method"] == method]


def _running(server: ServerProcess) -> dict[str, Any]:
    status: dict[str, Any] = wait_until(lambda: server.http.get("/api/telegram").json(),
                                        ok=lambda status: status["state"] == "running",
                                        timeout=60, interval=0.1, what="the bot to run")
    return status


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
        # the answer goes out before the webhook call that brought the update has returned,
        # and the fake Telegram confirms the update only when it has
        bot.wait(lambda s: s["pending_updates"] == 0, what="the last update confirmed")
        assert bot.state()["pending_updates"] == 0


def test_among_replicas_one_runs_the_bot_and_another_takes_it_over(
        tmp_path: Path, bot: BotApiHandle, pg: PostgresCluster) -> None:
    # two replicas with the token: one polls (two would end each other's polls with 409, as
    # Telegram does); the other says so, and runs the bot once the first is killed
    config = {"telegram": {"api_base": bot.url, "poll_timeout_s": 2}}
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
        # the holder answers an update, then records it as handled (updates 1 and 2 here): a
        # kill -9 between the two has the next holder answer it again, as it should (at least
        # once). The handover this test means comes after both were recorded
        wait_until(lambda: holder.http.get("/api/state/bootstrap").json()["state"]
                   ["telegram_offset"] == 3, timeout=30,
                   what="both updates to be recorded as handled")

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


def _rows(dsn: str) -> str:
    """Every row of every table, as text (bytea as hex): what a reader of the database sees."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
        return "\n".join(str(r[0]) for t in tables
                         for r in conn.execute(f"SELECT t::text FROM {t} t"))


def _pairing_row(dsn: str) -> tuple[str, int] | None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT digest, tries FROM codey_telegram_pairing").fetchone()
    return (str(row[0]), int(row[1])) if row else None


def _not_in_rows(dsn: str, *secret_texts: str) -> None:
    rows = _rows(dsn)
    for text in secret_texts:
        assert text not in rows and text.encode().hex() not in rows, text


def test_among_replicas_a_token_pasted_and_a_code_shown_anywhere_reach_the_bot(
        tmp_path: Path, bot: BotApiHandle, pg: PostgresCluster) -> None:
    # no token in the environment: it is pasted through one replica, the bot runs on the
    # lease's holder, a code shown by the other pairs a chat, a delete through either stops it
    from codey_server.channels.telegram import _PAIRING_TRIES, HOLD_S

    config = {"telegram": {"api_base": bot.url, "poll_timeout_s": 2}}
    dsn = pg.create_database("telegram_pasted")
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    replicas = [ServerProcess(tmp_path / f"r{n}", config=config,
                              extra_args=["--database-url", dsn, "--replica-id", f"r{n}"],
                              env={"CODEY_SECRET_KEY": key}) for n in range(2)]

    def statuses() -> list[dict[str, Any]]:
        return [r.http.get("/api/telegram").json() for r in replicas]

    def states() -> list[str]:
        return [s["state"] for s in statuses()]

    def chats(replica: ServerProcess) -> list[str]:
        state = replica.http.get("/api/state/bootstrap").json()["state"]
        return list(state["telegram_chats"])

    try:
        for replica in replicas:
            replica.start()
        assert [(s["token_source"], s["state"]) for s in statuses()] == [("none", "off")] * 2
        assert bot.state()["calls"] == {}  # no token: no replica runs the bot

        t0 = time.monotonic()
        r = replicas[0].http.put("/api/telegram/token", json={"token": TOKEN})
        assert r.status_code == 200, r.text
        assert r.json()["token_source"] == "file" and TOKEN not in r.text
        wait_until(lambda: sorted(states()) == ["elsewhere", "running"], timeout=30,
                   what="one replica to run the pasted token's bot")
        print(f"\nthe bot ran {time.monotonic() - t0:.2f} s after the paste")
        assert [s["token_source"] for s in statuses()] == ["file", "file"]
        holder = replicas[states().index("running")]
        other = replicas[1 - replicas.index(holder)]

        # a code shown by the replica that does not run the bot pairs a chat; a wrong code and
        # the code's second use are refused, without a word
        code = other.http.post("/api/telegram/pairing-code").json()["code"]
        _not_in_rows(dsn, TOKEN, TOKEN.split(":")[1], code)
        bot.script(
            {"message": {"chat_id": STRANGER, "text": "/pair WRONGCDE"}},
            {"message": {"chat_id": ME, "text": f"/pair {code}", "user": "Ann"}},
            {"wait_for": {"text": "Paired", "chat_id": ME},
             "message": {"chat_id": STRANGER, "text": f"/pair {code}"}},
            {"message": {"chat_id": ME, "text": "/sessions"}})
        bot.wait(lambda s: s["steps_done"] == s["steps_total"] and
                 sum(x["method"] == "sendMessage" for x in s["sent"]) >= 2,
                 what="the pairing and the answer after the second use")
        assert bot.sent(STRANGER) == []
        # the pairing is an event: the replica that did not write it folds it when it follows
        wait_until(lambda: chats(holder) == chats(other) == [str(ME)], timeout=10,
                   what="both replicas to have the paired chat")
        assert _pairing_row(dsn) is None  # used: gone

        # attack the gate: a code guessed at through two replicas' bots dies at the last try
        code = other.http.post("/api/telegram/pairing-code").json()["code"]
        assert _pairing_row(dsn) is not None
        bot.script(*[{"message": {"chat_id": STRANGER, "text": f"/pair GUESS{n:03d}"}}
                     for n in range(_PAIRING_TRIES - 1)])
        wait_until(lambda: (_pairing_row(dsn) or ("", 0))[1] == _PAIRING_TRIES - 1,
                   timeout=30, what="the wrong tries counted in the row")
        holder.stop()  # its lease is released: the other replica takes the bot over
        wait_until(lambda: other.http.get("/api/telegram").json()["state"] == "running",
                   timeout=30, what="the other replica to take the bot over")
        holder.start()
        wait_until(lambda: holder.http.get("/api/telegram").json()["state"] == "elsewhere",
                   timeout=10, what="the restarted replica to see the bot run elsewhere")
        holder, other = other, holder
        bot.script({"message": {"chat_id": STRANGER, "text": "/pair GUESSLST"}},
                   {"message": {"chat_id": STRANGER, "text": f"/pair {code}"}},
                   {"message": {"chat_id": ME, "text": "/sessions"}})
        bot.wait(lambda s: s["steps_done"] == s["steps_total"] and
                 sum(x["method"] == "sendMessage" for x in s["sent"]) >= 3,
                 what="the answer after the guesses")
        assert bot.sent(STRANGER) == [] and chats(holder) == [str(ME)]
        assert _pairing_row(dsn) is None

        # what a reader of the database finds: the token sealed, no code, in no row
        _not_in_rows(dsn, TOKEN, TOKEN.split(":")[1], code)

        # a delete through the replica that does not run the bot stops it everywhere
        t0 = time.monotonic()
        r = other.http.delete("/api/telegram/token")
        assert r.status_code == 200 and r.json()["token_source"] == "none", r.text
        assert TOKEN.split(":")[1].encode().hex() not in _rows(dsn)
        wait_until(lambda: states() == ["off", "off"], timeout=10,
                   what="the bot to stop on every replica")
        print(f"the bot stopped {time.monotonic() - t0:.2f} s after the delete answered")
        polls = bot.state()["calls"]["getUpdates"]
        import psycopg

        def lease_gone() -> bool:
            with psycopg.connect(dsn) as conn:
                return conn.execute("SELECT 1 FROM codey_leases WHERE name = 'telegram' "
                                    "AND expires > now()").fetchone() is None

        wait_until(lease_gone, timeout=10, what="the bot's lease to be released")
        # a message now waits at Telegram: no replica polls for it (a running bot would
        # within its poll's 2 s, and every replica looks at the token every HOLD_S)
        bot.script({"message": {"chat_id": ME, "text": "/sessions"}})
        wait_until(lambda: bot.state()["pending_updates"] == 1, what="the update queued")
        with pytest.raises(WaitTimedOut):
            wait_until(lambda: bot.state()["calls"]["getUpdates"] > polls
                       or bot.state()["pending_updates"] == 0, timeout=2 * HOLD_S + 2,
                       what="a poll that must not come")
        assert states() == ["off", "off"]

        # pasted again through the replica that had not run the bot: the waiting message is
        # answered, once
        r = holder.http.put("/api/telegram/token", json={"token": TOKEN})
        assert r.status_code == 200, r.text
        bot.wait(lambda s: sum(x["method"] == "sendMessage" for x in s["sent"]) >= 4,
                 what="the answer to the waiting message")
        assert sorted(states()) == ["elsewhere", "running"]
        assert len(_texts(bot, ME)) == 4 and bot.sent(STRANGER) == []
    finally:
        for replica in replicas:
            replica.stop()


def test_among_replicas_a_code_is_taken_once_and_dies_after_the_wrong_tries(
        pg: PostgresCluster) -> None:
    # two replicas' stores on one database, racing: the compare-and-set on the row decides
    from codey_server.channels.telegram import _PAIRING_TRIES
    from codey_server.channels.telegram_store import PgTelegramStore
    from codey_server.cluster.crypto import SecretKey
    from codey_server.cluster.db import SharedDb

    dsn = pg.create_database("telegram_codes")
    key = SecretKey(secrets.token_bytes(32))

    async def main() -> None:
        dbs = [SharedDb(dsn), SharedDb(dsn)]
        for db in dbs:
            await db.open()
        a, b = (PgTelegramStore(db, key) for db in dbs)
        try:
            # the right code at once on both replicas, ten times: one wins each time
            for _ in range(10):
                await a.new_code("ABCDEFGH", 600)
                won = await asyncio.gather(a.take_code("ABCDEFGH", _PAIRING_TRIES),
                                           b.take_code("abcd-efgh", _PAIRING_TRIES))
                assert sorted(won) == [False, True]
            # guesses spread over both replicas at once: the code dies at the last wrong try,
            # and is refused even to a right code racing the guesses
            for _ in range(5):
                await b.new_code("ABCDEFGH", 600)
                guesses = [(a, b)[n % 2].take_code(f"GUESS{n:03d}", _PAIRING_TRIES)
                           for n in range(_PAIRING_TRIES)]
                results = await asyncio.gather(*guesses, a.take_code("ABCDEFGH",
                                                                     _PAIRING_TRIES))
                assert not any(results[:-1])
                # the right code won only if it came before the last guess counted
                assert await b.take_code("ABCDEFGH", _PAIRING_TRIES) is False
            # fewer wrong tries than the limit, on both replicas: the code still works
            await a.new_code("ABCDEFGH", 600)
            for n in range(_PAIRING_TRIES - 1):
                assert await (a, b)[n % 2].take_code("WRONGONE", _PAIRING_TRIES) is False
            assert await b.take_code("ABCDEFGH", _PAIRING_TRIES) is True
            # expired by the database's clock; a new code replaces the old
            await a.new_code("ABCDEFGH", 0)
            assert await b.take_code("ABCDEFGH", _PAIRING_TRIES) is False
            await a.new_code("AAAAAAAA", 600)
            await b.new_code("BBBBBBBB", 600)
            assert await a.take_code("AAAAAAAA", _PAIRING_TRIES) is False
            assert await a.take_code("BBBBBBBB", _PAIRING_TRIES) is True
            # a token pasted on one replica is read on the other; sealed, and deleted
            changed = b.watch()
            await a.put_token(TOKEN)
            await asyncio.wait_for(changed.wait(), 5)  # told, not polled
            assert await b.token() == TOKEN
            await b.remove_token()
            assert await a.token() is None
        finally:
            for db in dbs:
                await db.close()

    asyncio.run(main())
    _not_in_rows(dsn, TOKEN, "ABCDEFGH", "BBBBBBBB")
