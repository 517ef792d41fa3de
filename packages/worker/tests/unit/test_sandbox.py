"""The sandbox's pure parts: the bwrap argv, the Seatbelt profile, the denial heuristic, the
settings and detection's answers — no sandbox is started here (the real ones run in
``tests/integration/test_sandbox_hostile.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from codey_protocol import codec
from codey_protocol.worker import ActionErrored, RunCommand
from codey_worker import sandbox as sb
from codey_worker.actions import ActionDispatcher
from codey_worker.config import ConfigError, load_config
from codey_worker.confine import ActionRefused
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords
from codey_worker.sandbox import (
    DEFAULT_HIDDEN_PATHS,
    Sandbox,
    SandboxSettings,
    SandboxSpec,
    SandboxSupport,
    bwrap_args,
    protected_subpaths,
    sandbox_denial,
    seatbelt_profile,
)
from codey_worker.shell import run_command

BWRAP = SandboxSupport(kind="bwrap", path="/usr/bin/bwrap", version="0.8.0",
                       disable_userns=True)
NONE = SandboxSupport(kind="none", reason="bwrap (bubblewrap) is not installed")


def pairs(args: list[str], flag: str) -> list[str]:
    """The operand of every ``flag`` (the first one, for two-operand flags)."""
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def binds(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


@pytest.fixture
def layout(outside_tmp: Path) -> dict[str, Path]:
    """A home with credentials and $CODEY_HOME, and a git repository as the workdir."""
    tmp_path = outside_tmp
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("key")
    (home / ".netrc").write_text("machine x password y")
    codey = home / ".codey"
    codey.mkdir()
    work = home / "src" / "proj"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".codey").mkdir()
    return {"home": home, "codey": codey, "work": work, "tmp": tmp_path / "private-tmp"}


def spec_for(layout: dict[str, Path], **kw: Any) -> SandboxSpec:
    home = layout["home"]
    values: dict[str, Any] = {
        "mode": "workspace-write", "network": False, "workdir": layout["work"],
        "cwd": layout["work"], "tmp": layout["tmp"], "home": layout["codey"],
        "hidden": (home / ".ssh", home / ".netrc", home / ".aws"),
    }
    values.update(kw)
    return SandboxSpec(**values)


# --------------------------------------------------------------------------- bwrap argv


def test_workspace_write_layout_in_mount_order(layout: dict[str, Path]) -> None:
    args = bwrap_args(spec_for(layout), BWRAP, status_fd=7)
    work, codey, home = str(layout["work"]), str(layout["codey"]), layout["home"]
    assert args[0] == "/usr/bin/bwrap"
    for flag in ("--new-session", "--die-with-parent", "--unshare-pid", "--unshare-ipc",
                 "--unshare-net", "--unshare-user", "--disable-userns"):
        assert flag in args
    assert pairs(args, "--json-status-fd") == ["7"]
    assert args[args.index("--ro-bind"):args.index("--ro-bind") + 3] == ["--ro-bind", "/", "/"]
    assert pairs(args, "--proc") == ["/proc"] and pairs(args, "--dev") == ["/dev"]
    assert binds(args, "--bind") == [(str(layout["tmp"]), "/tmp"), (work, work)]
    assert (f"{work}/.git", f"{work}/.git") in binds(args, "--ro-bind")
    assert (f"{work}/.codey", f"{work}/.codey") in binds(args, "--ro-bind")
    # hidden: folders get an empty read-only tmpfs, files /dev/null; a missing one nothing
    assert pairs(args, "--tmpfs") == [codey, str(home / ".ssh")]
    assert pairs(args, "--remount-ro") == [codey, str(home / ".ssh")]
    assert ("/dev/null", str(home / ".netrc")) in binds(args, "--ro-bind")
    assert str(home / ".aws") not in args
    # order: root first, then the writable binds, then the read-only carve-outs, then hiding
    position = args.index
    assert position("/") < position(work) < position(f"{work}/.git") < position(codey)
    assert args[-3:] == ["--chdir", work, "--"]


def test_network_and_nested_user_namespaces(layout: dict[str, Path]) -> None:
    on = bwrap_args(spec_for(layout, network=True), BWRAP)
    assert "--unshare-net" not in on and "--json-status-fd" not in on
    plain = bwrap_args(spec_for(layout), SandboxSupport(kind="bwrap", path="bwrap"))
    assert "--unshare-user" not in plain and "--disable-userns" not in plain
    assert "--unshare-net" in plain and "--unshare-pid" in plain


def test_read_only_has_a_throwaway_tmp_and_no_writable_bind(layout: dict[str, Path]) -> None:
    args = bwrap_args(spec_for(layout, mode="read-only", tmp=None), BWRAP)
    assert binds(args, "--bind") == []
    assert "/tmp" in pairs(args, "--tmpfs")
    work = str(layout["work"])
    assert (work, work) not in binds(args, "--ro-bind")  # visible read-only like all of /
    assert f"{work}/.git" not in args  # nothing is writable, nothing to carve out


def test_read_only_brings_back_a_workdir_under_tmp(tmp_path: Path) -> None:
    work = Path("/tmp") / tmp_path.relative_to("/tmp") if str(tmp_path).startswith("/tmp/") \
        else pytest.skip("needs a tmp_path under /tmp")
    spec = SandboxSpec(mode="read-only", network=False, workdir=work, cwd=work, tmp=None,
                       home=tmp_path / "codey")
    args = bwrap_args(spec, BWRAP)
    # the sandbox's own /tmp covers the host's: the workdir is brought back, read-only
    assert (str(work), str(work)) in binds(args, "--ro-bind")
    assert binds(args, "--bind") == []


def test_paths_the_private_tmp_covers_need_no_mount(tmp_path: Path) -> None:
    """Under the host's /tmp only what a writable root brings back is visible; hiding the
    rest would only make empty mount points in the private /tmp."""
    codey = tmp_path / "codey"  # under /tmp on the host
    codey.mkdir()
    work = Path("/var/tmp")  # not under /tmp: the hidden paths are visible there
    spec = SandboxSpec(mode="workspace-write", network=False, workdir=work, cwd=work,
                       tmp=tmp_path / "t", home=codey, hidden=(work,))
    args = bwrap_args(spec, BWRAP)
    if str(tmp_path).startswith("/tmp/"):
        assert str(codey) not in args
    assert pairs(args, "--tmpfs").count("/var/tmp") == 1  # a hidden path under a root


def test_owner_writable_paths_are_bound_when_they_exist(layout: dict[str, Path]) -> None:
    cache = layout["home"] / ".cache" / "uv"
    cache.mkdir(parents=True)
    spec = spec_for(layout, writable=(cache, layout["home"] / "missing"))
    args = bwrap_args(spec, BWRAP)
    assert (str(cache), str(cache)) in binds(args, "--bind")
    assert str(layout["home"] / "missing") not in args
    read_only = spec_for(layout, writable=(cache,), mode="read-only", tmp=None)
    assert binds(bwrap_args(read_only, BWRAP), "--bind") == []


def test_git_file_of_a_worktree_protects_its_gitdir_and_common_dir(tmp_path: Path) -> None:
    work = tmp_path / "w"
    gitdir = work / "meta" / "worktrees" / "w"
    gitdir.mkdir(parents=True)
    (work / "meta" / "hooks").mkdir()
    (work / ".git").write_text("gitdir: meta/worktrees/w\n")
    (gitdir / "commondir").write_text("../..\n")
    found = protected_subpaths(work)
    assert found == [work / ".git", gitdir.resolve(), (work / "meta").resolve()]
    spec = SandboxSpec(mode="workspace-write", network=False, workdir=work, cwd=work,
                       tmp=None, home=tmp_path / "codey")
    ro = binds(bwrap_args(spec, BWRAP), "--ro-bind")
    for path in found:
        assert (str(path), str(path)) in ro


def test_git_dir_outside_the_writable_roots_needs_no_bind(tmp_path: Path) -> None:
    main = tmp_path / "main" / ".git" / "worktrees" / "w"
    main.mkdir(parents=True)
    work = tmp_path / "w"
    work.mkdir()
    (work / ".git").write_text(f"gitdir: {main}\n")
    spec = SandboxSpec(mode="workspace-write", network=False, workdir=work, cwd=work,
                       tmp=None, home=tmp_path / "codey")
    ro = binds(bwrap_args(spec, BWRAP), "--ro-bind")
    assert (str(work / ".git"), str(work / ".git")) in ro
    assert str(main) not in [src for src, _ in ro]  # read-only already, like all of /


def test_no_protected_paths_when_none_exist(tmp_path: Path) -> None:
    assert protected_subpaths(tmp_path) == []
    (tmp_path / ".git").symlink_to(tmp_path / "gone")  # dangling: nothing to bind
    assert protected_subpaths(tmp_path) == []


def test_a_symlinked_git_dir_protects_its_target(tmp_path: Path) -> None:
    (tmp_path / "real-git").mkdir()
    (tmp_path / ".git").symlink_to(tmp_path / "real-git")
    assert protected_subpaths(tmp_path) == [(tmp_path / "real-git").resolve()]


# --------------------------------------------------------------------------- Seatbelt


def test_seatbelt_profile_text(layout: dict[str, Path]) -> None:
    work, home, codey, tmp = layout["work"], layout["home"], layout["codey"], layout["tmp"]
    profile = seatbelt_profile(spec_for(layout))
    lines = profile.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"]
    assert "(allow process-exec)" in lines and "(allow signal (target same-sandbox))" in lines
    assert "network-outbound" not in profile
    reads = next(line for line in lines if line.startswith("(allow file-read*"))
    assert reads == (
        f'(allow file-read* (require-any (require-not (require-any (subpath "{codey}") '
        f'(subpath "{home}/.ssh") (literal "{home}/.netrc") (subpath "{home}/.aws"))) '
        f'(subpath "{tmp}")))')
    writes = next(line for line in lines if line.startswith("(allow file-write* "))
    assert writes == (
        f'(allow file-write* (require-all (require-any (subpath "{work}") (subpath "{tmp}")) '
        f'(require-any (require-not (require-any (subpath "{work}/.git") '
        f'(subpath "{work}/.codey") (subpath "{codey}") (subpath "{home}/.ssh") '
        f'(literal "{home}/.netrc") (subpath "{home}/.aws"))) (subpath "{tmp}"))))')
    assert '"com.apple.SecurityServer"' not in profile  # no keychain


def test_seatbelt_network_and_read_only(layout: dict[str, Path]) -> None:
    profile = seatbelt_profile(spec_for(layout, network=True, mode="read-only", tmp=None))
    assert "(allow network-outbound)" in profile.splitlines()
    assert not any(line.startswith("(allow file-write* ") for line in profile.splitlines())


def test_seatbelt_quotes_paths(tmp_path: Path) -> None:
    odd = tmp_path / 'we"ird\\dir'
    odd.mkdir()
    spec = SandboxSpec(mode="workspace-write", network=False, workdir=odd, cwd=odd, tmp=None,
                       home=tmp_path / "codey")
    assert f'(subpath "{str(odd)[:-len(odd.name)]}we\\"ird\\\\dir")' in seatbelt_profile(spec)


# --------------------------------------------------------------------------- denial heuristic

WORK = [Path("/home/me/proj"), Path("/tmp")]


@pytest.mark.parametrize(("output", "network", "expected"), [
    ("touch: cannot touch '/home/me/x': Read-only file system", False, "read-only"),
    ("error: could not lock config file .git/config: Read-only file system", True, "read-only"),
    ("bash: /etc/passwd: Permission denied", True, "denied outside"),
    ("open('/home/me/.cache/x'): Operation not permitted", True, "denied outside"),
    ("cat: /home/me/.ssh/id_rsa: No such file or directory", True, "hidden"),
    ("curl: (6) Could not resolve host: example.com", False, "network is off"),
    ("ConnectionRefusedError: [Errno 111] Connection refused", False, "network is off"),
    ("socket.gaierror: [Errno -3] Temporary failure in name resolution", False, "network"),
])
def test_denials_are_recognised(output: str, network: bool, expected: str) -> None:
    hint = sandbox_denial("first line\n" + output, network=network, writable=WORK,
                          hidden=[Path("/home/me/.ssh")])
    assert hint is not None and expected in hint and output.strip()[:40] in hint


@pytest.mark.parametrize(("output", "network"), [
    ("bash: /home/me/proj/script.sh: Permission denied", False),  # inside: not the sandbox
    ("Permission denied (publickey).", True),  # no path: too vague to say
    ("cat: /home/me/proj/missing: No such file or directory", False),
    ("curl: (6) Could not resolve host: example.com", True),  # the network was on
    ("AssertionError: 3 != 4", False),
])
def test_ordinary_failures_are_not_denials(output: str, network: bool) -> None:
    assert sandbox_denial(output, network=network, writable=WORK,
                          hidden=[Path("/home/me/.ssh")]) is None


def test_a_hint_is_one_short_line() -> None:
    hint = sandbox_denial("x" * 1000 + ": Read-only file system", network=True, writable=WORK)
    assert hint is not None and len(hint) < 250 and "\n" not in hint


# --------------------------------------------------------------------------- runtime


def test_unavailable_sandbox_refuses_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    box = Sandbox(NONE, tmp_path / "codey")
    policy = LocalPolicy(allowed_roots=[tmp_path])

    async def out(stream: str, text: str) -> None:
        pass

    def action(mode: Any) -> RunCommand:
        return RunCommand(action_id="a", session_id="s", workdir=str(tmp_path),
                          argv=["touch", str(marker)], sandbox=mode)

    for mode in ("workspace-write", "read-only"):
        with pytest.raises(ActionRefused) as info:
            asyncio.run(run_command(action(mode), out, policy, sandbox=box))
        assert info.value.code == "sandbox_unavailable"
        assert "bwrap (bubblewrap) is not installed" in info.value.message
        assert not marker.exists()
    # full access needs no sandbox: the session's owner chose to run bare
    result = asyncio.run(run_command(action("full-access"), out, policy, sandbox=box))
    assert result.exit_code == 0 and marker.exists()


def test_dispatcher_answers_sandbox_unavailable(tmp_path: Path) -> None:
    frames: list[bytes] = []

    async def send(frame: bytes) -> None:
        frames.append(frame)

    async def main() -> None:
        d = ActionDispatcher(send, ActionRecords(tmp_path / "r.sqlite3"),
                             LocalPolicy(allowed_roots=[tmp_path]),
                             sandbox=Sandbox(NONE, tmp_path / "codey"))
        await d.handle(RunCommand(action_id="r1", session_id="s", workdir=str(tmp_path),
                                  argv=["true"]))
        await d.wait_idle()

    asyncio.run(main())
    answer = codec.decode_worker_to_server(frames[-1])
    assert isinstance(answer, ActionErrored) and answer.code == "sandbox_unavailable"


def test_session_tmp_dirs(tmp_path: Path) -> None:
    box = Sandbox(BWRAP, tmp_path / "codey")
    made = box.session_tmp("ses_1")
    assert made == tmp_path / "codey" / "sandbox" / "tmp" / "ses_1"
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    weird = box.session_tmp("../../etc")
    assert weird.parent == made.parent and weird.name.startswith("s-")
    assert box.tmp_for("workspace-write", "ses_1") == made
    assert box.tmp_for("read-only", "ses_1") is None  # a throwaway tmpfs
    assert box.tmp_for("workspace-write", None) is None  # MCP servers: the same
    (made / "f").write_text("x")
    box.drop_session("ses_1")
    assert not made.exists()
    mac = Sandbox(SandboxSupport(kind="seatbelt", path="/usr/bin/sandbox-exec"),
                  tmp_path / "codey")
    assert mac.tmp_for("read-only", "ses_2") == made.parent / "ses_2"
    spec = mac.spec(mode="read-only", network=False, workdir=tmp_path, cwd=tmp_path,
                    tmp=mac.tmp_for("read-only", "ses_2"))
    assert mac.env({"PATH": "/bin"}, spec)["TMPDIR"] == str(made.parent / "ses_2")
    assert box.env({"PATH": "/bin"}, spec)["TMPDIR"] == "/tmp"


def test_python_writes_no_bytecode_cache_in_the_sandbox_unless_env_says(tmp_path: Path) -> None:
    box = Sandbox(BWRAP, tmp_path / "codey")
    spec = box.spec(mode="workspace-write", network=False, workdir=tmp_path, cwd=tmp_path,
                    tmp=None)
    assert box.env({"PATH": "/bin"}, spec)["PYTHONDONTWRITEBYTECODE"] == "1"
    assert box.env({"PYTHONDONTWRITEBYTECODE": ""}, spec)["PYTHONDONTWRITEBYTECODE"] == ""


def test_a_cwd_inside_a_hidden_path_is_refused(layout: dict[str, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(layout["home"]))
    box = Sandbox(BWRAP, layout["codey"])
    ssh = layout["home"] / ".ssh"
    with pytest.raises(ActionRefused) as info:
        box.spec(mode="workspace-write", network=False, workdir=layout["home"], cwd=ssh,
                 tmp=None)
    assert info.value.code == "protected_path" and str(ssh) in info.value.message
    spec = box.spec(mode="workspace-write", network=False, workdir=layout["home"],
                    cwd=layout["home"], tmp=None)
    assert spec.cwd == layout["home"] and ssh in spec.hidden_paths()


def test_prune_drops_only_old_private_tmp_dirs(tmp_path: Path) -> None:
    box = Sandbox(BWRAP, tmp_path / "codey")
    assert box.prune() == 0  # nothing made yet
    old, new = box.session_tmp("old"), box.session_tmp("new")
    (old / "f").write_text("x")
    week = 7 * 24 * 3600
    os.utime(old, (old.stat().st_atime - week - 60, old.stat().st_mtime - week - 60))
    assert box.prune() == 1
    assert not old.exists() and new.is_dir()


def test_settings_expand_home_and_variables(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    hidden = SandboxSettings().hidden()
    assert tmp_path / ".ssh" in hidden and tmp_path / "run" in hidden
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    unset = SandboxSettings().hidden()
    assert tmp_path / "run" not in unset and tmp_path / ".ssh" in unset  # unset: skipped
    # the runtime dir is hidden by its usual name all the same (cron, sudo, a service)
    assert Path(f"/run/user/{os.getuid()}") in unset


def test_config_sandbox_section(tmp_path: Path) -> None:
    (tmp_path / "worker-config.json").write_text(json.dumps({
        "sandbox": {"hidden_paths": ["~/.secret"], "writable_paths": ["~/.cache/uv"]},
        "mcp_servers": {"fetch": {"command": "x", "network": True,
                                  "writable_paths": ["~/.cache/uv"]},
                        "files": {"command": "y", "network": False, "sandbox": False}},
    }))
    config = load_config(tmp_path)
    assert config.sandbox == SandboxSettings(hidden_paths=("~/.secret",),
                                             writable_paths=("~/.cache/uv",))
    assert (config.mcp_servers["fetch"].network, config.mcp_servers["fetch"].sandbox) == (
        True, True)
    assert (config.mcp_servers["files"].network, config.mcp_servers["files"].sandbox) == (
        False, False)
    assert config.mcp_servers["fetch"].writable_paths == ("~/.cache/uv",)
    assert config.mcp_servers["files"].writable_paths == ()
    (tmp_path / "worker-config.json").write_text("{}")
    assert load_config(tmp_path).sandbox.hidden_paths == DEFAULT_HIDDEN_PATHS


@pytest.mark.parametrize(("data", "expected"), [
    ({"sandbox": []}, "sandbox must be an object"),
    ({"sandbox": {"hidden": []}}, "sandbox: unknown field(s) hidden"),
    ({"sandbox": {"hidden_paths": "~/.ssh"}}, "sandbox.hidden_paths must be a list"),
    ({"sandbox": {"writable_paths": ["relative/dir"]}}, "is not an absolute path"),
    ({"mcp_servers": {"t": {"command": "x", "network": "yes"}}}, "must be true or false"),
    ({"mcp_servers": {"t": {"command": "x", "writable_paths": ["cache"]}}},
     "mcp_servers.t.writable_paths: 'cache' is not an absolute path"),
    ({"acp_agents": {"a": {"command": "x", "network": True}}}, "unknown field(s) network"),
])
def test_bad_sandbox_config(tmp_path: Path, data: object, expected: str) -> None:
    (tmp_path / "worker-config.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert expected in str(info.value)


# --------------------------------------------------------------------------- detection


def fake_bwrap(folder: Path, script: str) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / "bwrap"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap is Linux's")
def test_detection_says_why_there_is_no_sandbox(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + "/usr/bin:/bin")
    monkeypatch.setattr(sb.shutil, "which",
                        lambda name, **kw: str(bin_dir / name)
                        if (bin_dir / name).exists() else None)
    sb.detect.cache_clear()
    try:
        assert sb.detect() == NONE
        # installed, but user namespaces are off: bwrap says so and exits 1
        fake_bwrap(bin_dir, 'case "$1" in --version) echo "bubblewrap 9.9.9";; *) '
                            'echo "bwrap: No permissions to create a new namespace" >&2; '
                            "exit 1;; esac\n")
        sb.detect.cache_clear()
        none = sb.detect()
        assert (none.kind, none.version) == ("none", "9.9.9")
        assert none.reason == ("bwrap cannot make a sandbox here: "
                               "bwrap: No permissions to create a new namespace")
        assert "refused" in none.describe() and none.info().reason == none.reason
        # an older bwrap without --disable-userns: still a sandbox, without that flag
        fake_bwrap(bin_dir, 'for a in "$@"; do [ "$a" = --disable-userns ] && exit 1; done\n'
                            '[ "$1" = --version ] && echo "bubblewrap 0.4.0"; exit 0\n')
        sb.detect.cache_clear()
        old = sb.detect()
        assert (old.kind, old.version, old.disable_userns) == ("bwrap", "0.4.0", False)
        assert old.describe() == "bubblewrap 0.4.0"
        assert sb.detect() is old  # cached
    finally:
        sb.detect.cache_clear()
