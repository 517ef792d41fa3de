"""The server's logging: one stderr handler on the root logger, secrets masked on every handler.

Order of calls (``cli.serve`` does this): :func:`configure_logging` before anything logs, build
the app (``create_app`` passes ``logging_config=None`` so Litestar leaves the root logger
alone) and the ``uvicorn.Config`` (built with ``log_config=None`` so uvicorn adds no handlers
of its own and its records propagate to the root), then :func:`install_redaction` once more to
cover any handler a library attached in between.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Literal, TextIO

__all__ = ["JsonFormatter", "RedactSecrets", "configure_logging", "install_redaction",
           "printable"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line (``--log-format json``), for a log collector:
    ``{"ts", "level", "logger", "message"}`` and ``"exc"`` with a traceback. The message is
    the one the redaction filter left (secrets masked)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 6), "level": record.levelname.lower(),
               "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str, stream: TextIO,
                      fmt: Literal["text", "json"] = "text") -> logging.Handler:
    """Make the root logger write ``level`` and above to ``stream``, secrets masked.

    Replaces any handlers already on the root logger; returns the new handler.
    """
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # the HTTP clients under the model SDK log every request at INFO: a line per model call
    # (and its CPU) only when asked for with --log-level debug
    for chatty in ("httpx", "httpx2"):
        logging.getLogger(chatty).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    install_redaction()
    return handler


def install_redaction() -> None:
    """Put a :class:`RedactSecrets` filter on every handler of every logger that has one.

    Idempotent. A handler filter (not a logger filter) also sees records that propagate up
    from child loggers, which is how uvicorn's and Litestar's records reach the root.
    """
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [lg for lg in logging.Logger.manager.loggerDict.values()
                if isinstance(lg, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            if not any(isinstance(f, RedactSecrets) for f in handler.filters):
                handler.addFilter(RedactSecrets())


class RedactSecrets(logging.Filter):
    """Masks access tokens, bearer values and OAuth fields in log records, as a last line.

    The code never logs secrets on purpose; this catches what a library might (a URL with
    ``?token=``, an ``Authorization`` header, a token endpoint's JSON).
    """

    _PATTERN = re.compile(
        r"(?i)(token=|secret=|[?&]code=|bearer\s+|basic\s+|\"?(?:access_token|refresh_token|"
        r"id_token|api_key|device_code|code_verifier|client_secret|poll_secret|credential)"
        r"\"?\s*[:=]\s*\"?)([^\s&\"',;]+)")

    #: a Telegram bot token in a Bot API URL (``…/bot123456:ABC…/getUpdates``)
    _BOT_URL = re.compile(r"(/bot)(\d+:[A-Za-z0-9_-]+)")
    #: the password in a database URL (postgresql://user:password@host/db)
    _DB_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]+:)([^@\s]+)(?=@)")

    def redact(self, text: str) -> str:
        text = self._PATTERN.sub(lambda m: m.group(1) + "[redacted]", text)
        text = self._BOT_URL.sub(lambda m: m.group(1) + "[redacted]", text)
        return self._DB_PASSWORD.sub(lambda m: m.group(1) + "[redacted]", text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        # a traceback quotes the values in its lines and its exception's message (a URL with
        # its secret, a token in a library's error): format it here, masked, so the handler's
        # formatter uses this text instead of formatting the exception itself
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


_FORMATTER = logging.Formatter()

#: control characters (newlines, escape sequences) as visible escapes
_UNPRINTABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def printable(text: str) -> str:
    """``text`` on one line, with control characters shown as escapes: a line a worker (or any
    peer) sends cannot start a new, forged line of the server's log, nor move the terminal's
    cursor."""
    return text.translate(_UNPRINTABLE)
