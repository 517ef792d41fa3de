"""``TelegramChannel``: drive sessions from a Telegram chat (python-telegram-bot's ``Bot``).

Order of calls: ``TelegramChannel(settings, engine)`` (no I/O) → ``await start()`` (runs the
bot in a task when a token is known: long polling, or a webhook at
``{public_url}/api/telegram/webhook`` when the server has a public URL) → ``set_token`` /
``clear_token`` / ``new_pairing_code`` / ``remove_chat`` / ``webhook`` from the HTTP layer →
``await stop()``.

Among replicas the bot runs on one of them, the one holding the ``telegram`` lease, and polls
(a webhook would have Telegram's calls land on any replica): the others show ``elsewhere``,
take the lease over when its holder stops renewing it, and carry on from the log. A pasted
token and the pairing code are rows then (:mod:`.telegram_store`), so whichever replica a
request reaches, the holder runs the bot with that token and checks that code; once a
``DELETE /api/telegram/token`` has answered, the holder stops the bot when the row's
notification reaches it, or at its next tick (:data:`HOLD_S`) at the latest.

What it must never do:

* answer a chat that is not on the allow list (``state.telegram_chats``): such chats get no
  reply at all, except that ``/pair CODE`` with the code shown in the UI adds them;
* send a notification twice, or lose one, across restarts: what was sent is in the log
  (``telegram_message_sent``), as is how far the updates were read (``telegram_update_handled``).
  Notifications are not pushed from events but found by :meth:`_sync`, which compares the
  state with what was sent; so a restart simply syncs again;
* put the token in an event or a log line (``RedactSecrets`` masks ``/bot<token>/`` in the
  URLs libraries log).

State changes go through ``Engine.execute`` with the browser's own commands
(``CreateSession``, ``SendPrompt``, ``DecideApproval``, ``Interrupt``, ``AnswerQuestion``),
so a button press decides an approval exactly like the browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
import secrets
from typing import Any, Literal

import msgspec
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    retry_if_exception_type,
    wait_exponential,
    wait_fixed,
)

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.events import Envelope
from codey_protocol.state import SessionInfo, TelegramChat
from codey_server.channels import chat, decide
from codey_server.channels.telegram_store import FileTelegramStore, TelegramStore
from codey_server.cluster.errors import SecretKeyError
from codey_server.core import notices
from codey_server.core.engine import Engine
from codey_server.core.leases import Leases
from codey_server.core.rules import CommandRejected
from codey_server.errors import ServerError
from codey_server.settings import Settings

__all__ = ["PAIRING_TTL_S", "TOKEN_PATTERN", "PairingCode", "TelegramChannel", "TelegramError",
           "TelegramStatus"]

log = logging.getLogger("codey.telegram")

PAIRING_TTL_S = 600.0
#: among replicas: the lease of the replica that runs the bot, and how often the others try it
LEASE = "telegram"
HOLD_S = 2.0
_PAIRING_TRIES = 5
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
#: a bot token from @BotFather (``123456:ABC…``); the REST body's schema says the same (a
#: pasted token is stripped first)
TOKEN_PATTERN = "^[0-9]{1,20}:[A-Za-z0-9_-]{10,100}$"
_TOKEN_RE = re.compile(TOKEN_PATTERN)
#: reaching Telegram and polling it (tenacity, as every retry: :mod:`codey_server.core.retry`):
#: 1 s doubling to a minute, for as long as it takes; which errors are retried is set where
#: the library is loaded (:meth:`TelegramChannel._connect`, :meth:`TelegramChannel._poll`).
#: Tests give the channel a copy with a sleep that records the delays.
CONNECT_RETRYING = AsyncRetrying(wait=wait_exponential(multiplier=1.0, max=60.0), reraise=True)
#: sending what the chats should have seen: again 5 s after a failure, until it goes through
SEND_RETRYING = AsyncRetrying(wait=wait_fixed(5.0), retry=retry_if_exception_type(Exception),
                              reraise=True)


class TelegramError(ServerError):
    """A token that cannot be used, or a token that cannot be changed here."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


BotState = Literal["off", "starting", "running", "error", "elsewhere"]


class TelegramStatus(msgspec.Struct, kw_only=True):
    """``GET /api/telegram``: the channel as the UI shows it (never the token)."""

    #: ``file``: pasted through the UI (the data dir's ``telegram.json``, or among replicas
    #: the cluster's sealed row)
    token_source: Literal["env", "file", "none"]
    token_env: str
    #: ``elsewhere``: among replicas, another replica runs the bot
    state: BotState = "off"
    mode: Literal["polling", "webhook", "none"] = "none"
    bot_username: str | None = None
    error: str | None = None
    chats: list[TelegramChat] = msgspec.field(default_factory=list)


class PairingCode(msgspec.Struct, kw_only=True):
    """A single-use code: ``/pair CODE`` in a chat adds that chat to the allow list."""

    code: str
    expires_at: float


class TelegramChannel:
    def __init__(self, settings: Settings, engine: Engine, leases: Leases | None = None,
                 store: TelegramStore | None = None) -> None:
        self.settings = settings
        self.config = settings.telegram
        self.engine = engine
        #: among replicas: the bot runs where the ``telegram`` lease is held (None: alone)
        self.leases = leases
        self._holding: asyncio.Task[None] | None = None
        self._halting: asyncio.Task[None] | None = None
        self._running_token: str | None = None
        if leases is not None:
            leases.on_lost.append(self._lease_lost)
        #: the pasted token and the pairing code (among replicas: rows every replica reads)
        self.store: TelegramStore = store or FileTelegramStore(
            settings.data_dir / "telegram.json")
        #: one look at the lease and the token at a time (the loop's tick, a paste, a delete)
        self._tick_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._state: Literal["off", "starting", "running", "error"] = "off"
        self._error: str | None = None
        self._username: str | None = None
        self._mode: Literal["polling", "webhook", "none"] = "none"
        self._bot: Any = None
        #: Telegram sends this header with every webhook call; a fresh one per start
        self._webhook_secret = secrets.token_urlsafe(32)
        self._wake = asyncio.Event()
        self._update_lock = asyncio.Lock()
        self._sessions_watched: set[str] = set()
        #: how the bot retries (:data:`CONNECT_RETRYING`, :data:`SEND_RETRYING`)
        self.connect_retrying = CONNECT_RETRYING
        self.send_retrying = SEND_RETRYING

    # token ---------------------------------------------------------------------------------

    def _env_token(self) -> str | None:
        return os.environ.get(self.config.token_env, "").strip() or None

    async def _token(self) -> tuple[str | None, Literal["env", "file", "none"]]:
        from_env = self._env_token()
        if from_env:
            return from_env, "env"
        pasted = await self.store.token()
        return (pasted, "file") if pasted else (None, "none")

    async def set_token(self, token: str) -> TelegramStatus:
        """Store a pasted token (0600, or among replicas sealed in its row) and restart the
        bot with it."""
        token = token.strip()
        if self._env_token():
            raise TelegramError("conflict", f"the token comes from ${self.config.token_env}; "
                                "unset it to paste one here")
        if not _TOKEN_RE.match(token):
            raise TelegramError("bad_request", "that is not a bot token (123456:ABC…, from "
                                "@BotFather)")
        await self.store.put_token(token)
        await self._follow()
        return await self.status()

    async def clear_token(self) -> TelegramStatus:
        """Forget the pasted token: once answered, no replica starts the bot with it, and the
        one running it stops (at once here; see the module's docstring among replicas)."""
        if self._env_token():
            raise TelegramError("conflict", f"the token comes from ${self.config.token_env}")
        await self.store.remove_token()
        await self._follow()
        return await self.status()

    async def _follow(self) -> None:
        """The token changed: restart the bot, or among replicas look at the lease now."""
        if self.leases is None:
            await self._restart()
        else:
            await self._tick()

    async def status(self) -> TelegramStatus:
        state: BotState = self._state
        error = self._error
        source: Literal["env", "file", "none"]
        try:
            token, source = await self._token()
        except SecretKeyError as err:  # a row sealed with another key: say so
            token, source, state, error = None, "file", "error", err.message
        if self.leases is not None and token is not None and LEASE not in self.leases.held:
            state = "elsewhere"
        return TelegramStatus(
            token_source=source, token_env=self.config.token_env, state=state,
            mode=self._mode, bot_username=self._username, error=error,
            chats=list(self.engine.state.telegram_chats.values()))

    # pairing and the allow list ------------------------------------------------------------

    async def new_pairing_code(self) -> PairingCode:
        """A new code (the previous one stops working), valid 10 minutes, used once; only
        its digest is kept (among replicas in a row, so the replica running the bot checks
        a code shown by any)."""
        code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        expires_at = await self.store.new_code(code, PAIRING_TTL_S)
        return PairingCode(code=code, expires_at=expires_at)

    async def _take_code(self, given: str) -> bool:
        """Whether ``given`` is the current code (which it uses up); the
        :data:`_PAIRING_TRIES`-th wrong code ends it."""
        return await self.store.take_code(given, _PAIRING_TRIES)

    async def remove_chat(self, chat_id: str) -> None:
        """``chat_id`` as the state's key (group chats' ids are negative)."""
        await self.engine.submit(decide.chat_removed, chat_id)

    # lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.engine.listeners.append(self._on_event)
        if self.leases is None:
            await self._restart()
        else:
            self._holding = asyncio.get_running_loop().create_task(self._hold(),
                                                                    name="telegram-lease")

    async def stop(self) -> None:
        if self._on_event in self.engine.listeners:
            self.engine.listeners.remove(self._on_event)
        if self._holding is not None:
            self._holding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._holding
        await self._halt()
        if self.leases is not None and LEASE in self.leases.held:
            with contextlib.suppress(Exception):  # another replica takes over at once
                await self.leases.release(LEASE)

    async def _hold(self) -> None:
        """Among replicas: run the bot while this replica holds the lease; take the lease
        when it is free (its holder stopped, died or lost the token); follow token changes,
        at once when told of one, else every :data:`HOLD_S`."""
        while True:
            changed = self.store.watch()
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("telegram: could not take the bot's lease (%s)", err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), HOLD_S)

    async def _tick(self) -> None:
        assert self.leases is not None
        async with self._tick_lock:
            token, _ = await self._token()
            held = LEASE in self.leases.held
            if token is None:
                if held:
                    await self._halt()
                    await self.leases.release(LEASE)
            elif not held:
                if await self.leases.acquire(LEASE):
                    await self.engine.catch_up()  # what the last holder handled and sent
                    await self._restart()
            elif token != self._running_token:
                await self._restart()

    def _lease_lost(self, name: str) -> None:
        if name == LEASE:
            log.warning("telegram: another replica runs the bot now")
            # kept: the loop holds only a weak reference to a task
            self._halting = asyncio.get_running_loop().create_task(self._halt())

    async def _halt(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            # an update being handled finishes first: its effects and its offset go together
            async with self._update_lock:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._state, self._mode, self._username = "off", "none", None
        self._running_token = None

    async def _restart(self) -> None:
        await self._halt()
        token, _ = await self._token()
        self._error = None
        if token is None:
            return
        if self.leases is not None and LEASE not in self.leases.held:
            return  # the replica holding the lease runs it (and follows the token)
        self._running_token = token
        self._state = "starting"
        self._task = asyncio.get_running_loop().create_task(self._run(token))

    async def _run(self, token: str) -> None:
        # imported here: the library is only loaded when a bot is configured
        from telegram import Bot
        from telegram.error import TelegramError as BotError
        from telegram.request import HTTPXRequest

        bot = Bot(token, base_url=f"{self.config.api_base.rstrip('/')}/bot",
                  request=HTTPXRequest(connection_pool_size=4),
                  get_updates_request=HTTPXRequest(read_timeout=10.0))
        try:
            if not await self._connect(bot):
                return
            self._bot = bot
            self._username = bot.username
            self._error = None
            sender = asyncio.get_running_loop().create_task(self._send_loop())
            try:
                if self.settings.public_url and self.leases is None:
                    await self._serve_webhook(bot)
                else:
                    await self._poll(bot)
            except BotError as err:  # setting or deleting the webhook failed
                self._state, self._error = "error", f"Telegram refused: {err}"
                log.warning("telegram: %s", self._error)
            finally:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
        finally:
            self._bot = None
            with contextlib.suppress(Exception):
                await bot.shutdown()

    async def _connect(self, bot: Any) -> bool:
        """Initialize ``bot`` (its ``getMe``), trying again while Telegram cannot be reached
        (:attr:`connect_retrying`); False when Telegram refuses the token."""
        from telegram.error import InvalidToken
        from telegram.error import TelegramError as BotError

        async def initialize() -> None:
            try:
                await bot.initialize()
            except BotError as err:
                if not isinstance(err, InvalidToken):
                    self._error = f"cannot reach Telegram: {err}"
                raise

        try:
            async for attempt in self.connect_retrying.copy(
                    retry=_retried(BotError, InvalidToken)):
                with attempt:
                    await initialize()
        except InvalidToken:
            self._state, self._error = "error", "Telegram refused the token"
            log.warning("telegram: the bot token was refused")
            return False
        return True

    async def _serve_webhook(self, bot: Any) -> None:
        url = f"{self.settings.public_url.rstrip('/')}/api/telegram/webhook"  # type: ignore[union-attr]
        await bot.set_webhook(url, secret_token=self._webhook_secret)
        # "running" only once Telegram knows where to send updates
        self._mode, self._state = "webhook", "running"
        log.info("telegram: @%s takes updates at %s", bot.username, url)
        await asyncio.Event().wait()  # until stopped; updates arrive through webhook()

    async def _poll(self, bot: Any) -> None:
        from telegram.error import Conflict, Forbidden, InvalidToken
        from telegram.error import TelegramError as BotError

        await bot.delete_webhook()
        self._mode, self._state = "polling", "running"
        log.info("telegram: @%s polls for updates", bot.username)

        async def get_updates() -> Any:
            try:
                return await bot.get_updates(offset=self._offset(bot),
                                             timeout=int(self.config.poll_timeout_s),
                                             allowed_updates=["message", "callback_query"])
            except Conflict:  # a webhook is set, or another process polls with this token
                self._error = "another client takes this bot's updates"
                raise
            except (InvalidToken, Forbidden):
                raise
            except BotError as err:
                self._error = f"polling failed: {err}"
                raise

        # each poll that goes through starts the backoff again at 1 s
        polling = self.connect_retrying.copy(retry=_retried(BotError, InvalidToken, Forbidden))
        while True:
            try:
                async for attempt in polling:
                    with attempt:
                        updates = await get_updates()
            except (InvalidToken, Forbidden):
                self._state, self._error = "error", "Telegram refused the token"
                return
            self._error = None
            for update in updates:
                await self._handle(bot, update)

    def _offset(self, bot: Any) -> int | None:
        """The first update id not handled yet, if it is this bot's (ids are per bot)."""
        state = self.engine.state
        return state.telegram_offset if state.telegram_bot_id == bot.id else None

    async def webhook(self, body: bytes, secret: str) -> None:
        """One update POSTed by Telegram; refused (``forbidden``) without the right secret."""
        if not hmac.compare_digest(secret.encode(), self._webhook_secret.encode()):
            raise TelegramError("forbidden", "wrong secret token")
        bot = self._bot
        if bot is None or self._mode != "webhook":
            raise TelegramError("conflict", "the bot is not taking webhook updates")
        from telegram import Update

        try:
            data = msgspec.json.decode(body)
            update = Update.de_json(data, bot)
        except Exception as err:
            raise TelegramError("bad_request", f"not an update: {err}") from None
        if update is not None:
            await self._handle(bot, update)

    # updates ---------------------------------------------------------------------------------

    async def _handle(self, bot: Any, update: Any) -> None:
        async with self._update_lock:
            offset = self._offset(bot)
            if offset is not None and update.update_id < offset:
                return  # Telegram sent it again (a webhook retry): handled already
            try:
                if update.callback_query is not None:
                    await self._press(bot, update.callback_query)
                elif update.message is not None and update.message.text is not None:
                    await self._message(bot, update.message)
            except Exception:  # one bad update must not stop the channel
                log.exception("telegram: update %d failed", update.update_id)
            await self.engine.submit(decide.update_handled,
                                     decide.Handled(update.update_id, bot.id))

    async def _message(self, bot: Any, message: Any) -> None:
        chat_id: int = message.chat.id
        state = self.engine.state
        paired = state.telegram_chats.get(str(chat_id))
        command = chat.parse(message.text)
        if paired is None:
            if command.name == "pair" and await self._take_code(command.args[0]):
                c = message.chat
                title = c.title or " ".join(x for x in (c.first_name, c.last_name) if x) \
                    or c.username or str(chat_id)
                await self.engine.submit(decide.chat_paired, decide.ChatPaired(chat_id, title))
                log.info("telegram: chat %d paired", chat_id)
                await bot.send_message(chat_id, "Paired with Codey.\n\n" + chat.HELP)
            return  # not on the allow list: no answer at all
        reply = await self._command(chat_id, paired, command)
        if reply:
            await bot.send_message(chat_id, chat.cut(reply, self._link(paired.session_id)))
        self._wake.set()

    async def _command(self, chat_id: int, paired: TelegramChat, command: chat.Command) -> str:
        state = self.engine.state
        try:
            if command.name == "bad":
                return command.error
            if command.name == "help":
                return chat.HELP
            if command.name == "pair":
                return "This chat is paired already."
            if command.name == "sessions":
                return chat.sessions_text(state, paired.session_id)
            if command.name == "new":
                return await self._new(chat_id, command)
            if command.name == "use":
                found = chat.find_session(state, command.args[0])
                if found is None:
                    return f"No single session matches {command.args[0]!r}; see /sessions"
                await self._choose(chat_id, found.session_id)
                return f"Now in “{found.title}” [{found.status}]"
            current = state.sessions.get(paired.session_id or "")
            if current is None:
                return "No current session: /new <worker> <workdir> <prompt>, or /use <id>"
            if command.name == "stop":
                envs = await self.engine.execute(cl.Interrupt(session_id=current.session_id))
                return "Stopped." if envs else "Nothing to stop."
            return await self._prompt(current, command.text)
        except CommandRejected as err:
            return f"Refused: {err.message}"

    async def _new(self, chat_id: int, command: chat.Command) -> str:
        ref, workdir = command.args
        workers = [w for w in self.engine.state.workers.values() if not w.revoked
                   and (w.worker_id == ref or w.hostname == ref)]
        if len(workers) != 1:
            names = ", ".join(f"{w.hostname} ({w.worker_id})"
                              for w in self.engine.state.workers.values() if not w.revoked)
            return f"No single worker {ref!r}. Workers: {names or 'none paired'}"
        envs = await self.engine.execute(cl.CreateSession(
            worker_id=workers[0].worker_id, workdir=workdir, prompt=command.text))
        session_id = envs[0].session_id or ""
        await self._choose(chat_id, session_id)
        return f"Started {session_id} on {workers[0].hostname}:{workdir}"

    async def _choose(self, chat_id: int, session_id: str) -> None:
        await self.engine.submit(decide.session_chosen, decide.Chosen(chat_id, session_id))

    async def _prompt(self, s: SessionInfo, text: str) -> str:
        pending = [q for q in s.questions.values() if q.status == "pending"]
        if pending:
            await self.engine.execute(cl.AnswerQuestion(
                session_id=s.session_id, question_id=pending[0].question_id, answer=text))
            return ""
        # read before the prompt: the agent may start the turn as soon as it is folded
        busy = s.status not in ("idle", "interrupted", "error", "waiting_user")
        await self.engine.execute(cl.SendPrompt(session_id=s.session_id, text=text))
        return "Queued: the agent reads it before its next step." if busy else ""

    async def _press(self, bot: Any, query: Any) -> None:
        message = query.message
        chat_id = message.chat.id if message is not None else None
        if chat_id is None or str(chat_id) not in self.engine.state.telegram_chats:
            return  # not on the allow list: no answer
        parsed = chat.parse_button(query.data or "")
        if parsed is None:
            await bot.answer_callback_query(query.id, text="Unknown button")
            return
        approval_id, decision = parsed
        found = next((s for s in self.engine.state.sessions.values()
                      if approval_id in s.approvals), None)
        text = "Decided."
        if found is None:
            text = "That approval is gone."
        elif notices.is_risky(found, found.approvals[approval_id]):
            text = "This one is decided in the app only."
        else:
            try:
                await self.engine.execute(cl.DecideApproval(
                    session_id=found.session_id, approval_id=approval_id, decision=decision))
            except CommandRejected as err:
                text = err.message
        await bot.answer_callback_query(query.id, text=text)
        self._wake.set()

    # notifications ---------------------------------------------------------------------------

    def _on_event(self, env: Envelope) -> None:
        watched = env.session_id is not None and env.session_id in self._sessions_watched
        if watched or isinstance(env.event, (ev.TelegramSessionChosen, ev.TelegramChatPaired)):
            self._wake.set()

    async def _send_loop(self) -> None:
        self._wake.set()  # catch up on what was due while the server was down
        # Telegram unreachable: try again a little later (a cancel is no Exception: it stops)
        sending = self.send_retrying.copy(before_sleep=_sending_failed)
        while True:
            await self._wake.wait()
            self._wake.clear()
            async for attempt in sending:
                with attempt:
                    await self._sync()

    async def _sync(self) -> None:
        """Send (or edit) whatever the chats should have seen and have not."""
        state = self.engine.state
        families = {c.chat_id: self._family(c.session_id)
                    for c in state.telegram_chats.values()}
        self._sessions_watched = {sid for family in families.values() for sid in family}
        for paired in list(state.telegram_chats.values()):
            family = [state.sessions[sid] for sid in families.get(paired.chat_id, [])
                      if sid in state.sessions]
            if family:
                await self._sync_chat(paired, family[0], family[1:])

    def _family(self, session_id: str | None) -> list[str]:
        """The session and its sub-agents (and theirs): their approvals and questions reach
        the chat too, or a delegated task would wait for a decision nobody is shown."""
        sessions = self.engine.state.sessions
        if session_id not in sessions:
            return []
        family = [session_id]
        for sid in family:  # grows while it is walked: breadth first
            family += [c.session_id for c in sessions.values() if c.parent_id == sid]
        return family

    async def _sync_chat(self, paired: TelegramChat, s: SessionInfo,
                         children: list[SessionInfo]) -> None:
        """What the chat should have seen of ``s`` (and its sub-agents' asks): the same
        notices a push sends (:mod:`codey_server.core.notices`), found from the state."""
        for each in (s, *children):
            await self._sync_asks(paired, each)
        link = self._link(s.session_id)
        told: list[notices.Notice] = []
        if s.status in notices.ANSWERED:
            answer = notices.last_answer(s)
            if answer is not None:
                told.append(notices.answer_notice(s, answer))
        if s.status == "error":
            told.append(notices.failed_notice(s))
        for notice in told:
            if notice.key not in paired.sent:
                await self._send(paired, notice.key, chat.cut(notice.detail, link))

    async def _sync_asks(self, paired: TelegramChat, s: SessionInfo) -> None:
        """Approvals (sent, then edited once decided) and questions of one session."""
        from telegram import InlineKeyboardButton, InlineKeyboardMarkup

        link = self._link(s.session_id)
        for a in list(s.approvals.values()):
            notice = notices.approval_notice(s, a)
            asked, decided = notice.key, f"decided:{a.approval_id}"
            if a.status == "pending" and asked not in paired.sent:
                # a risky one has no buttons: it is decided in the app
                buttons = InlineKeyboardMarkup([[InlineKeyboardButton(
                    action.label, callback_data=chat.button_data(a.approval_id, action.decision))]
                    for action in notice.actions]) if notice.actions else None
                await self._send(paired, asked, chat.cut(chat.approval_text(s, a), link),
                                 buttons)
            elif a.status != "pending" and asked in paired.sent and decided not in paired.sent:
                with contextlib.suppress(Exception):  # the message may be gone; fine
                    await self._bot.edit_message_text(
                        chat.cut(chat.decided_text(s, a), link), chat_id=paired.chat_id,
                        message_id=paired.sent[asked])
                await self._record(paired, decided, paired.sent[asked])
        for q in list(s.questions.values()):
            notice = notices.question_notice(s, q)
            if q.status == "pending" and notice.key not in paired.sent:
                await self._send(paired, notice.key, chat.cut(chat.question_text(s, q), link))

    async def _send(self, paired: TelegramChat, key: str, text: str,
                    markup: Any = None) -> None:
        sent = await self._bot.send_message(paired.chat_id, text, reply_markup=markup)
        await self._record(paired, key, sent.message_id)

    async def _record(self, paired: TelegramChat, key: str, message_id: int) -> None:
        await self.engine.submit(decide.message_sent,
                                 decide.Sent(paired.chat_id, key, message_id))

    def _link(self, session_id: str | None) -> str:
        base = self.settings.public_url or f"http://{self.settings.host}:{self.settings.port}"
        return chat.session_link(base, session_id or "")


def _retried(errors: type[BaseException], *refused: type[BaseException]) -> Any:
    """Retry ``errors`` except ``refused`` (a token Telegram refused: no retry helps)."""
    return retry_if_exception(lambda e: isinstance(e, errors) and not isinstance(e, refused))


def _sending_failed(state: RetryCallState) -> None:
    err = state.outcome.exception() if state.outcome is not None else None
    log.warning("telegram: sending failed (%s); retrying", type(err).__name__)
