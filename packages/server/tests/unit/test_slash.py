"""Slash commands: argument substitution as Claude Code and Codex do it, and which
configured model a prompt file's ``model`` names."""

from __future__ import annotations

from codey_server.agent.slash import allows, expand, model_for, split_arguments, tools_for_command


def test_arguments_and_positionals() -> None:
    assert expand("Fix issue #$1 with priority $2.", "123 high") == \
        "Fix issue #123 with priority high."
    assert expand("Review: $ARGUMENTS", "  the auth module  ") == "Review: the auth module"
    assert expand("$1 / $3", "a") == "a /"  # missing words are empty
    assert expand('Say $1 then $2', '"two words" x') == "Say two words then x"
    assert expand("Costs $$5 for $1", "me") == "Costs $5 for me"
    assert expand("$ARGUMENTSX $10", "q") == "$ARGUMENTSX q0"  # only $1..$9, whole word


def test_arguments_never_dropped() -> None:
    assert expand("Tidy the code.", "src/app.py") == "Tidy the code.\n\nARGUMENTS: src/app.py"
    assert expand("Tidy the code.", "") == "Tidy the code."
    assert expand("", "just this") == "just this"


def test_unbalanced_quotes_split_at_spaces() -> None:
    assert split_arguments('it"s fine') == ['it"s', "fine"]


def test_model_for_prefers_exact_and_the_session_provider() -> None:
    providers = [("a", ["claude-haiku-4", "claude-sonnet-4"]), ("b", ["haiku", "gpt-5"])]
    assert model_for("haiku", providers, ("a", "claude-sonnet-4")) == ("b", "haiku")
    assert model_for("sonnet", providers, ("a", "x")) == ("a", "claude-sonnet-4")
    assert model_for("HAIKU", [("a", ["claude-haiku-4"])], ("z", "")) == ("a", "claude-haiku-4")
    assert model_for("gpt-5", providers, ("a", "x")) == ("b", "gpt-5")
    assert model_for("llama", providers, ("a", "x")) is None
    assert model_for("  ", providers, ("a", "x")) is None


OURS = ["shell", "exec", "write_stdin", "kill", "edit", "apply_patch", "write_file",
        "read_file", "view_image", "grep", "glob", "list_dir", "web_fetch"]


def test_allowed_tools_as_codeys_tools() -> None:
    tools, ignored = tools_for_command(
        ["Bash(git add:*)", "Read", "grep", "WebFetch", "WebSearch", "mcp__git__status",
         "mcp__github", "Frobnicate", "Bash(", ""], OURS)
    # Claude Code's names and ours; a rule allows the whole tool; a tool this server does
    # not have (web_search) is not offered; unknown names are ignored and said
    assert tools == ["exec", "grep", "kill", "mcp__git__status", "mcp__github__*",
                     "read_file", "shell", "view_image", "web_fetch", "write_stdin"]
    assert ignored == ["Frobnicate"]
    assert tools_for_command([], OURS) == ([], [])


def test_a_turns_tools_allow_by_name_and_by_mcp_server() -> None:
    tools = ["read_file", "mcp__github__*"]
    assert allows(tools, "read_file")
    assert allows(tools, "mcp__github__create_issue")
    assert not allows(tools, "shell")
    assert not allows(tools, "mcp__githubx__create_issue")
    assert not allows(tools, "mcp__git__status")
