"""worker.json and worker-config.json: defaults, validation with clear errors, 0600 identity."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from codey_worker.config import (
    ConfigError,
    Identity,
    WorkerConfig,
    codey_home,
    delete_identity,
    load_config,
    load_identity,
    resolve_server,
    save_identity,
)


def write_config(home: Path, data: object) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "worker-config.json").write_text(json.dumps(data))


def test_missing_config_gives_the_home_directory_as_only_root(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config.allowed_roots == [Path.home()]
    assert config.policy.denied_commands == []
    assert config.mcp_servers == {}


def test_full_config_is_read(tmp_path: Path) -> None:
    write_config(tmp_path, {
        "allowed_roots": ["~/src", "/srv/work"],
        "denied_commands": ["sudo"],
        "denied_mcp_tools": ["time.convert_time"],
        "mcp_servers": {"time": {"command": "python", "args": ["-m", "mcp_server_time"],
                                 "env": {"TZ": "UTC"}}},
    })
    config = load_config(tmp_path)
    assert config.allowed_roots == [Path.home() / "src", Path("/srv/work")]
    assert config.policy.denied_commands == ["sudo"]
    assert config.policy.denied_mcp_tools == ["time.convert_time"]
    time = config.mcp_servers["time"]
    assert (time.name, time.command, time.args, time.env) == (
        "time", "python", ["-m", "mcp_server_time"], {"TZ": "UTC"})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "expected a JSON object"),
        ({"allowed_root": ["/x"]}, "unknown field(s) allowed_root"),
        ({"allowed_roots": "/x"}, "allowed_roots must be a list of paths"),
        ({"denied_commands": [1]}, "denied_commands must be a list of program names"),
        ({"denied_mcp_tools": "git.*"}, "denied_mcp_tools must be a list"),
        ({"mcp_servers": []}, "mcp_servers must be an object"),
        ({"mcp_servers": {"t": {"args": []}}}, "mcp_servers.t.command must be a non-empty"),
        ({"mcp_servers": {"t": {"command": "x", "args": "-v"}}}, "mcp_servers.t.args must be"),
        ({"mcp_servers": {"t": {"command": "x", "env": {"A": 1}}}}, "mcp_servers.t.env must be"),
        ({"mcp_servers": {"t": {"command": "x", "cwd": "/"}}}, "mcp_servers.t: unknown field"),
        ({"worktrees_dir": "wt"}, "worktrees_dir must be an absolute path"),
    ],
)
def test_bad_config_names_the_file_and_the_field(
    tmp_path: Path, data: object, expected: str
) -> None:
    write_config(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(tmp_path / "worker-config.json") in str(info.value)
    assert expected in str(info.value)


def test_worktrees_dir_is_read_and_may_not_lie_in_the_workers_own_folder(
        tmp_path: Path) -> None:
    write_config(tmp_path, {"worktrees_dir": str(tmp_path.parent / "wt")})
    assert load_config(tmp_path).policy.worktrees_dir == tmp_path.parent / "wt"
    # $CODEY_HOME is hidden from every action and every sandboxed command
    write_config(tmp_path, {"worktrees_dir": str(tmp_path / "worktrees")})
    with pytest.raises(ConfigError, match=r"inside .*the worker's own folder"):
        load_config(tmp_path)


def test_config_that_is_not_json_says_so(tmp_path: Path) -> None:
    (tmp_path / "worker-config.json").write_text("{allowed_roots: [")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)


def test_identity_is_saved_0600_and_read_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    identity = Identity(worker_id="wrk_1", server="http://127.0.0.1:1", private_key="k",
                        credential="c")
    path = save_identity(home, identity)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_identity(home) == identity
    assert [p.name for p in home.iterdir()] == ["worker.json"]  # no temp file left behind
    assert delete_identity(home) is True
    assert load_identity(home) is None
    assert delete_identity(home) is False


def test_identity_missing_a_field_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "worker.json").write_text(json.dumps({"worker_id": "w", "server": "s"}))
    with pytest.raises(ConfigError, match="'private_key' is missing"):
        load_identity(tmp_path)


def test_server_url_precedence() -> None:
    identity = Identity(worker_id="w", server="http://stored/", private_key="k", credential="c")
    assert resolve_server("http://flag/", identity, env={"CODEY_SERVER": "http://env"}) == (
        "http://flag")
    assert resolve_server(None, identity, env={"CODEY_SERVER": "http://env"}) == "http://env"
    assert resolve_server(None, identity, env={}) == "http://stored"
    assert resolve_server(None, None, env={}) is None


def test_codey_home_from_env(tmp_path: Path) -> None:
    assert codey_home({"CODEY_HOME": str(tmp_path)}) == tmp_path
    assert codey_home({}) == Path.home() / ".codey"


def test_an_mcp_server_can_be_reached_over_http_instead_of_started() -> None:
    config = WorkerConfig.from_dict({"mcp_servers": {"codey": {
        "url": "http://127.0.0.1:8765/mcp", "headers": {"Authorization": "Bearer cmcp_x"}}}})
    server = config.mcp_servers["codey"]
    assert (server.url, server.headers, server.command) == (
        "http://127.0.0.1:8765/mcp", {"Authorization": "Bearer cmcp_x"}, "")
    for bad in ({"url": "ftp://x"}, {"url": "http://x", "command": "y"},
                {"url": "http://x", "headers": {"a": 1}}, {"url": "http://x", "env": {}}):
        with pytest.raises(ConfigError, match=r"mcp_servers\.codey"):
            WorkerConfig.from_dict({"mcp_servers": {"codey": bad}})
    with pytest.raises(ConfigError, match="command"):  # an ACP agent is always a program
        WorkerConfig.from_dict({"acp_agents": {"a": {"url": "http://x"}}})
