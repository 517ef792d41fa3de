"""grep and glob, with ripgrep and with the pure-Python fallback: the same answers, confined
to the workdir, .gitignore respected, hidden files and .git left out, capped."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import Glob, GlobResult, Grep, GrepResult
from codey_worker.confine import ActionRefused, protect
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox, detect
from codey_worker.search import MAX_LINE_CHARS, find_rg, glob, grep, ignore_regex

OPEN = LocalPolicy(allowed_roots=[Path("/")])
RG = find_rg()
ENGINES = [pytest.param(None, id="python"),
           pytest.param(RG, id="rg", marks=pytest.mark.skipif(RG is None, reason="no rg"))]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str | None:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A small project: sources, a .gitignore (top and nested), hidden files, .git."""
    w = tmp_path / "ws"
    files = {
        "src/app.py": "import os\n\ndef main():\n    return TODO_ONE\n",
        "src/util.py": "def helper():\n    pass  # todo_two\n",
        "src/web/page.ts": "const x = 'TODO_THREE';\n",
        "README.md": "A TODO list\n",
        "build/out.py": "TODO_IGNORED_BUILD\n",
        "logs/a.log": "TODO_IGNORED_LOG\n",
        "src/gen/made.py": "TODO_IGNORED_NESTED\n",
        "src/gen/keep.py": "TODO_KEPT_BY_NEGATION\n",
        ".hidden.py": "TODO_HIDDEN\n",
        ".config/x.py": "TODO_HIDDEN_DIR\n",
        ".git/config": "TODO_GIT\n",
    }
    for rel, text in files.items():
        (w / rel).parent.mkdir(parents=True, exist_ok=True)
        (w / rel).write_text(text)
    (w / ".gitignore").write_text("# build output\n/build/\n*.log\n")
    (w / "src" / "gen" / ".gitignore").write_text("*.py\n!keep.py\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.py").write_text("TODO_OUTSIDE\n")
    return w


def grep_(ws: Path, engine: str | None, pattern: str, **kw: Any) -> GrepResult:
    action = Grep(action_id="a", session_id="s", workdir=str(ws), pattern=pattern, **kw)
    return asyncio.run(grep(action, OPEN, rg=engine))


def glob_(ws: Path, engine: str | None, pattern: str, **kw: Any) -> GlobResult:
    action = Glob(action_id="a", session_id="s", workdir=str(ws), pattern=pattern, **kw)
    return asyncio.run(glob(action, OPEN, rg=engine))


def hits(result: GrepResult) -> list[tuple[str, int, str]]:
    return [(f.path, line.line, line.text) for f in result.files for line in f.lines
            if line.match]


def test_finds_matches_with_line_numbers(ws: Path, engine: str | None) -> None:
    result = grep_(ws, engine, r"TODO_\w+")
    assert hits(result) == [("src/app.py", 4, "    return TODO_ONE"),
                            ("src/gen/keep.py", 1, "TODO_KEPT_BY_NEGATION"),
                            ("src/web/page.ts", 1, "const x = 'TODO_THREE';")]
    assert result.matches == 3 and not result.truncated
    assert result.engine == ("rg" if engine else "python")


def test_case_literal_and_context(ws: Path, engine: str | None) -> None:
    assert [h[0] for h in hits(grep_(ws, engine, "todo_", ignore_case=True))] == [
        "src/app.py", "src/gen/keep.py", "src/util.py", "src/web/page.ts"]
    assert hits(grep_(ws, engine, "TODO_ONE", literal=True)) == [
        ("src/app.py", 4, "    return TODO_ONE")]
    assert grep_(ws, engine, "x = '.*';", literal=True).files == []
    result = grep_(ws, engine, "def main", before=2, after=1)
    assert [(line.line, line.text, line.match) for line in result.files[0].lines] == [
        (1, "import os", False), (2, "", False), (3, "def main():", True),
        (4, "    return TODO_ONE", False)]


def test_gitignore_hidden_and_git_are_left_out_unless_asked(ws: Path,
                                                            engine: str | None) -> None:
    found = {h[2] for h in hits(grep_(ws, engine, "TODO"))}
    assert not any("IGNORED" in t or "HIDDEN" in t or "GIT" in t for t in found), found
    with_hidden = {h[2] for h in hits(grep_(ws, engine, "TODO", hidden=True))}
    assert {"TODO_HIDDEN", "TODO_HIDDEN_DIR"} <= with_hidden
    assert not any("GIT" in t or "IGNORED" in t for t in with_hidden), with_hidden


def test_include_and_exclude_globs(ws: Path, engine: str | None) -> None:
    def paths(**kw: Any) -> list[str]:
        return [f.path for f in grep_(ws, engine, "TODO|todo", **kw).files]

    assert paths(include=["*.ts"]) == ["src/web/page.ts"]
    assert paths(include=["src/**/*.py"]) == ["src/app.py", "src/gen/keep.py", "src/util.py"]
    assert paths(include=["*.py"], exclude=["src/gen/**"]) == ["src/app.py", "src/util.py"]
    assert paths(exclude=["web"]) == ["README.md", "src/app.py", "src/gen/keep.py",
                                      "src/util.py"]
    assert paths(include=["*.py"]) == ["src/app.py", "src/gen/keep.py", "src/util.py"]
    assert paths(include=[".config/*.py"]) == [".config/x.py"]  # names a hidden folder


def test_a_subfolder_or_a_file(ws: Path, engine: str | None) -> None:
    assert [f.path for f in grep_(ws, engine, "TODO", path="src/web").files] == [
        "src/web/page.ts"]
    assert [f.path for f in grep_(ws, engine, "def", path="src/util.py").files] == [
        "src/util.py"]


def test_files_and_count_modes(ws: Path, engine: str | None) -> None:
    (ws / "src" / "many.py").write_text("x = 1\nx = 2\nx = 3\n")
    os.utime(ws / "src" / "many.py", (1e9, 1e9))
    os.utime(ws / "src" / "util.py", (2e9, 2e9))
    files = grep_(ws, engine, "x = [0-9]|def ", mode="files")
    assert [f.path for f in files.files] == ["src/util.py", "src/app.py", "src/many.py"]
    counts = grep_(ws, engine, "x = |def ", mode="count")
    assert [(f.path, f.count) for f in counts.files] == [
        ("src/app.py", 1), ("src/many.py", 3), ("src/util.py", 1), ("src/web/page.ts", 1)]
    assert counts.matches == 6
    capped = grep_(ws, engine, "x = [0-9]|def ", mode="files", max_matches=2)
    assert len(capped.files) == 2 and capped.truncated


def test_caps_say_truncated(ws: Path, engine: str | None) -> None:
    (ws / "big.txt").write_text("".join(f"needle {i}\n" for i in range(1000)))
    some = grep_(ws, engine, "needle", max_matches=10)
    assert some.matches == 10 and some.truncated
    assert len(some.files[0].lines) == 10
    few_bytes = grep_(ws, engine, "needle", max_bytes=100)
    assert few_bytes.truncated and sum(len(x.text) for x in few_bytes.files[0].lines) <= 100
    (ws / "min.js").write_text("needle" + "x" * 5000 + "\n")
    long = grep_(ws, engine, "needlex")
    assert len(long.files[0].lines[0].text) < MAX_LINE_CHARS + 40
    assert long.files[0].lines[0].text.endswith("[5006 more characters]".replace(
        "5006", str(5006 - MAX_LINE_CHARS)))


def test_a_bad_pattern_is_a_bad_request(ws: Path, engine: str | None) -> None:
    with pytest.raises(ActionRefused) as info:
        grep_(ws, engine, "(unclosed")
    assert info.value.code == "bad_request" and "pattern" in info.value.message
    with pytest.raises(ActionRefused) as empty:
        grep_(ws, engine, "")
    assert empty.value.code == "bad_request"


def test_never_outside_the_workdir(ws: Path, tmp_path: Path, engine: str | None) -> None:
    (ws / "linkdir").symlink_to(tmp_path / "outside")
    (ws / "link.py").symlink_to(tmp_path / "outside" / "secret.py")
    assert "TODO_OUTSIDE" not in {h[2] for h in hits(grep_(ws, engine, "TODO", hidden=True))}
    assert glob_(ws, engine, "**/secret.py").paths == []
    with pytest.raises(ActionRefused) as info:
        grep_(ws, engine, "TODO", path="../outside")
    assert info.value.code == "path_outside_workdir"
    with pytest.raises(ActionRefused) as linked:
        grep_(ws, engine, "TODO", path="linkdir")
    assert linked.value.code == "path_outside_workdir"


def test_the_worker_home_inside_the_workdir_is_never_searched(ws: Path,
                                                              engine: str | None) -> None:
    home = ws / ".codey-home"
    home.mkdir()
    (home / "worker.json").write_text('{"credential": "TODO_SECRET"}\n')
    (ws / "plain-home").mkdir()
    (ws / "plain-home" / "key").write_text("TODO_SECRET_TOO\n")
    protect(home)
    protect(ws / "plain-home")
    texts = {h[2] for h in hits(grep_(ws, engine, "TODO_SECRET", hidden=True))}
    assert texts == set()
    assert glob_(ws, engine, "**/*", hidden=True).paths.count(".codey-home/worker.json") == 0
    assert not [p for p in glob_(ws, engine, "**/key").paths]


def test_glob_newest_first_capped(ws: Path, engine: str | None) -> None:
    for i, rel in enumerate(["src/app.py", "src/util.py", "src/gen/keep.py"]):
        os.utime(ws / rel, (1e9 + i, 1e9 + i))
    result = glob_(ws, engine, "**/*.py")
    assert result.paths == ["src/gen/keep.py", "src/util.py", "src/app.py"]
    assert not result.truncated
    assert glob_(ws, engine, "*.py").paths == result.paths  # a name at any depth
    capped = glob_(ws, engine, "**/*.py", max_results=2)
    assert capped.paths == result.paths[:2] and capped.truncated
    assert glob_(ws, engine, "web/*.ts", path="src").paths == ["src/web/page.ts"]
    assert glob_(ws, engine, "*.ts", path="src/web").paths == ["src/web/page.ts"]
    assert set(glob_(ws, engine, "*.py", hidden=True).paths) == {
        *result.paths, ".hidden.py", ".config/x.py"}
    assert glob_(ws, engine, ".config/*").paths == [".config/x.py"]
    assert glob_(ws, engine, "**/*.log").paths == []  # ignored
    with pytest.raises(ActionRefused) as info:
        glob_(ws, engine, "../*")
    assert info.value.code == "bad_request"


def test_ignore_regex_follows_gitignore_rules() -> None:
    def match(pattern: str, path: str) -> bool:
        regex, anchored = ignore_regex(pattern)
        return bool(regex.match(path if anchored else path.rsplit("/", 1)[-1]))

    assert match("*.py", "a/b/c.py") and not match("*.py", "a/b/c.pyc")
    assert match("src/*.py", "src/a.py") and not match("src/*.py", "src/x/a.py")
    assert match("src/**/*.py", "src/a.py") and match("src/**/*.py", "src/x/y/a.py")
    assert match("**/test_*.py", "test_a.py") and match("**/test_*.py", "t/test_a.py")
    assert match("/build", "build") and not match("/build", "x/build")
    assert match("doc/**", "doc/a/b") and match("a?c", "abc") and not match("a?c", "a/c")
    assert match("[ab]x", "bx") and not match("[!ab]x", "ax") and match("\\*x", "*x")


def test_rg_comes_with_the_worker() -> None:
    """The ripgrep wheel is a dependency: where it installed, rg is found beside Python."""
    assert RG is not None and os.access(RG, os.X_OK)


def _flaky_bwrap(tmp_path: Path, failures: int) -> tuple[Sandbox, Path]:
    """A sandbox whose bwrap fails as bwrap does (``bwrap: …`` on stderr, exit 1: rg's
    "nothing matched") for its first ``failures`` runs, then is the real one."""
    real = detect()
    if real.kind != "bwrap":
        pytest.skip("no bubblewrap here")
    count = tmp_path / "runs"
    fake = tmp_path / "bwrap"
    fake.write_text(f"""#!/bin/sh
echo x >> {count}
if [ "$(wc -l < {count})" -le {failures} ]; then
  echo "bwrap: Can't create file at /run/gone.sock: No such file or directory" >&2
  exit 1
fi
exec {real.path} "$@"
""")
    fake.chmod(0o755)
    support = dataclasses.replace(real, path=str(fake))
    return Sandbox(support, tmp_path / "home"), count


@pytest.mark.skipif(RG is None, reason="no rg")
def test_a_sandbox_that_fails_to_start_is_an_error_not_an_empty_result(
        ws: Path, tmp_path: Path) -> None:
    box, runs = _flaky_bwrap(tmp_path, failures=1)
    grep_action = Grep(action_id="a", session_id="s", workdir=str(ws), pattern="TODO_ONE")
    found = asyncio.run(grep(grep_action, OPEN, rg=RG, sandbox=box))
    assert [f.path for f in found.files] == ["src/app.py"]  # tried again, once
    assert len(runs.read_text().splitlines()) == 2

    (tmp_path / "twice").mkdir()
    box, runs = _flaky_bwrap(tmp_path / "twice", failures=4)  # two searches, each tried twice
    with pytest.raises(ActionRefused) as refused:
        asyncio.run(grep(grep_action, OPEN, rg=RG, sandbox=box))
    assert refused.value.code == "sandbox_failed"
    assert "gone.sock" in refused.value.message
    glob_action = Glob(action_id="a", session_id="s", workdir=str(ws), pattern="*.py")
    with pytest.raises(ActionRefused) as refused:
        asyncio.run(glob(glob_action, OPEN, rg=RG, sandbox=box))
    assert refused.value.code == "sandbox_failed"
