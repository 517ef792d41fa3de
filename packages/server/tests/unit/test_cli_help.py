"""Every codey-server command has help with an example (style: thin CLIs, documented)."""

from __future__ import annotations

import asyncio

import pytest

from codey_server.cli import _parser, main, run_loop


def test_top_level_help_lists_serve(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "serve" in out and "codey-server serve" in out


def test_serve_help_has_examples_and_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "Examples:" in out
    for flag in ("--host", "--port", "--data-dir", "--config"):
        assert flag in out


def test_bad_arguments_fail_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["serve", "--port", "not-a-port"])
    assert exit_.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


@pytest.mark.parametrize(("choice", "loop_module"), [("", "uvloop"), ("asyncio", "asyncio")])
def test_the_event_loop_is_uvloop_unless_asyncio_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, choice: str, loop_module: str
) -> None:
    monkeypatch.setenv("CODEY_EVENT_LOOP", choice)

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__.split(".")[0]

    assert run_loop(which()) == loop_module


def test_url_prints_the_link_again(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert main(["url", "--data-dir", str(tmp_path)]) == 2
    assert "no server has run" in capsys.readouterr().err
    (tmp_path / "server.url").write_text("http://127.0.0.1:9999\n")
    (tmp_path / "access_token").write_text("tok-123\n")
    assert main(["url", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "Open http://127.0.0.1:9999/?token=tok-123 in your browser\n"
    with pytest.raises(SystemExit):
        main(["url", "--help"])
    assert "codey-server url" in capsys.readouterr().out


def test_version_is_the_packages_one(capsys: pytest.CaptureFixture[str]) -> None:
    from codey_protocol.version import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"codey-server {__version__}\n"


@pytest.mark.parametrize("command", ["backup", "restore"])
def test_backup_and_restore_have_help_with_an_example(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert f"codey-server {command} /safe/" in out and "--data-dir" in out
