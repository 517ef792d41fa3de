"""Context windows and when to compact.

A model's window comes from the provider's config (``context_windows[model]``, else
``context_window``), else from the table of known models below (longest matching prefix of the
model name, ignoring a ``vendor/`` prefix), else 128k tokens. Ollama serves a small window
unless told otherwise (``OLLAMA_CONTEXT_LENGTH``, or a Modelfile's ``num_ctx``) and cuts the
input silently beyond it, so its default here is Ollama's own: 4096.
"""

from __future__ import annotations

from codey_server.settings import ProviderConfig

__all__ = ["DEFAULT_WINDOW", "KNOWN_WINDOWS", "estimate_tokens", "window_for"]

DEFAULT_WINDOW = 128_000
OLLAMA_WINDOW = 4_096

#: prefix of a model name → its context window in tokens (longest prefix wins)
KNOWN_WINDOWS: dict[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "codex-mini": 200_000,
    "gpt-oss": 131_072,
    "claude": 200_000,
    "gemini": 1_048_576,
    "deepseek": 128_000,
    "qwen2.5-coder": 32_768,
    "qwen3": 40_960,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3": 8_192,
    "mistral": 32_768,
}


def window_for(config: ProviderConfig, model: str) -> int:
    if model in config.context_windows:
        return config.context_windows[model]
    if config.context_window:
        return config.context_window
    if config.kind == "ollama":
        return OLLAMA_WINDOW
    name = model.rsplit("/", 1)[-1].lower()
    best = ""
    for prefix in KNOWN_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return KNOWN_WINDOWS[best] if best else DEFAULT_WINDOW


def estimate_tokens(chars: int) -> int:
    """Tokens in ``chars`` characters of JSON or text: about four characters a token."""
    return (chars + 3) // 4
