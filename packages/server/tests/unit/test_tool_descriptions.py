"""What the model is told about the built-in tools (agent/tools/ BUILTIN_TOOLS)."""

from __future__ import annotations

from codey_server.agent.tools import BUILTIN_TOOLS


def test_apply_patch_description_warns_of_the_three_differences_from_codex() -> None:
    # a model trained on Codex must read these before it trips on them (docs/worker.md)
    spec = next(t for t in BUILTIN_TOOLS if t.name == "apply_patch")
    text = spec.description.lower()
    assert "all or nothing" in text
    assert "add file refuses a path that already exists" in text
    assert "move to refuses a destination that already exists" in text
    assert len(spec.description) <= 1024  # providers cap tool descriptions


def test_every_description_fits_a_providers_cap() -> None:
    for spec in BUILTIN_TOOLS:
        assert 40 <= len(spec.description) <= 1024, spec.name
