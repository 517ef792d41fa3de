"""Comparing JSON values in tests: where two states differ, said readably."""

from __future__ import annotations

from typing import Any

__all__ = ["differences"]


def differences(a: Any, b: Any, path: str = "$", limit: int = 10) -> list[str]:
    """Where two JSON values differ, as ``$.a.b[3]: x != y`` paths (at most ``limit``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], f"{path}.{k}", limit)
        return out[:limit]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += differences(x, y, f"{path}[{i}]", limit)
        return out[:limit]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]
