"""Provider errors in words a user understands, with a ``code`` the turn loop acts on.

The OpenAI wires use OpenAI's error body, ``{"error": {"message", "type", "code"}}``;
compatible servers send variations (a bare string, ``detail``, no body at all), so every
field is optional here. Anthropic's is ``{"type": "error", "error": {"type", "message"}}``,
and its ``type`` says what a status would (mid-stream there is none), 529 is "overloaded".
"""

from __future__ import annotations

import re

from codey_server.agent.errors import ModelError

__all__ = ["error_from_body"]

_CONTEXT = re.compile(
    r"context[_ ]length|maximum context|context window|too many tokens|prompt is too long"
    r"|input is too long|reduce the length|exceed context limit", re.IGNORECASE)

#: Anthropic's error types, as the status each stands for
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
    "api_error": 500, "overloaded_error": 529,
}


def _fields(body: object) -> tuple[str, str]:
    """(message, code or type) from whatever error body a provider sent."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            message = inner.get("message") or inner.get("detail") or ""
            code = inner.get("code") or inner.get("type") or ""
            return str(message), str(code)
        if isinstance(inner, str):
            return inner, ""
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail, ""
    if isinstance(body, str):
        return body, ""
    return "", ""


def error_from_body(body: object, status: int | None, *, prefix: str = "",
                    fallback_text: str = "") -> ModelError:
    """A :class:`ModelError` for an error ``body`` (and HTTP ``status``, if any)."""
    text, raw = _fields(body)
    text = (text or fallback_text or "no details given").strip()
    said = f"HTTP {status}: {text}" if status else text
    lead = f"{prefix}: " if prefix else ""
    if status is None and raw in _ANTHROPIC_STATUS:
        # an error event inside an Anthropic stream: classed as its HTTP twin would be
        return _classified(text, raw, _ANTHROPIC_STATUS[raw], said, lead, None)
    return _classified(text, raw, status, said, lead, status)


def _classified(text: str, raw: str, status: int | None, said: str, lead: str,
                reported: int | None) -> ModelError:
    """The error for ``status`` (what it stands for); ``reported`` is the real one."""
    if raw == "context_length_exceeded" or _CONTEXT.search(text):
        return ModelError(f"{lead}the conversation is longer than the model's context window "
                          f"({said})", reported, "context_length")
    if raw == "insufficient_quota" or (status == 429 and "quota" in text.lower()):
        return ModelError(f"{lead}the provider's quota is used up ({said}); check the "
                          "account's plan and billing", reported, "quota")
    if status == 401 or raw in ("invalid_api_key", "invalid_authentication"):
        return ModelError(f"{lead}the provider rejected the credentials ({said}); log in "
                          "again or set a valid API key", reported, "auth")
    if status == 403:
        return ModelError(f"{lead}the account may not use this ({said})", reported, "permission")
    if status == 404 or raw == "model_not_found":
        return ModelError(f"{lead}model or endpoint not found ({said}); check the model name "
                          "and the provider's base_url", reported, "not_found")
    if status == 429:
        return ModelError(f"{lead}rate limited ({said})", reported, "rate_limited")
    if status is not None and status >= 500:
        return ModelError(f"{lead}the provider failed ({said})", reported, "server")
    if status is not None and status >= 400:
        return ModelError(f"{lead}the provider refused the request ({said})", reported,
                          "bad_request")
    return ModelError(f"{lead}{said}", reported, "failed")
