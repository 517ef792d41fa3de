"""The one confined file API (codey_worker.files): both ways of resolving (the kernel's
openat2 and our own O_PATH walk) refuse every way out, hide what the sandbox hides, and keep
the model's writes out of .git and .codey."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from codey_protocol.worker import Edit, ListDir, ReadFile, WriteFile
from codey_worker.confine import ActionRefused
from codey_worker.edit import edit_file
from codey_worker.files import Boundary, Tree, openat2_works
from codey_worker.fs import list_dir, read_file, write_file
from codey_worker.patch import apply_patch
from codey_worker.policy import LocalPolicy

WAYS = [pytest.param(False, id="walk"),
        pytest.param(True, id="openat2", marks=pytest.mark.skipif(
            not openat2_works(), reason="openat2 is not available here"))]


@pytest.fixture(params=WAYS)
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test runs with both ways; the tools (which open their own trees) too."""
    way = bool(request.param)
    monkeypatch.setattr("codey_worker.files.openat2_works", lambda: way)
    return way


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A machine: a home with a key and an outside folder; the workdir is the home itself
    (a home-directory session) holding a project."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE-KEY\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("AWS-SECRET\n")
    (home / "proj" / ".git" / "hooks").mkdir(parents=True)
    (home / "proj" / ".git" / "config").write_text("[core]\n")
    (home / "proj" / ".git" / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (home / "proj" / ".codey").mkdir()
    (home / "proj" / "src").mkdir()
    (home / "proj" / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("OUTSIDE\n")
    return home


def _boundary(home: Path) -> Boundary:
    return Boundary.of([home / ".ssh", home / ".aws", home / ".codey"])


@pytest.fixture
def tree(home: Path, kernel: bool) -> Iterator[Tree]:
    with Tree.open(home / "proj", _boundary(home), kernel=kernel) as t:
        yield t


def _code(fn: object, *args: object, **kw: object) -> str:
    with pytest.raises(ActionRefused) as info:
        fn(*args, **kw)  # type: ignore[operator]
    return info.value.code


def test_paths_inside_resolve_to_their_real_place(tree: Tree, home: Path) -> None:
    proj = home / "proj"
    (proj / "docs").symlink_to("src")
    (proj / "abs").symlink_to(proj / "src")  # absolute, yet inside: followed
    assert tree.locate("src/a.py").rel == "src/a.py"
    assert tree.locate("docs/a.py").rel == "src/a.py"
    assert tree.locate("abs/a.py").rel == "src/a.py"
    assert tree.locate("src/../src/./a.py").rel == "src/a.py"
    assert tree.locate(str(proj / "src" / "a.py")).rel == "src/a.py"
    assert tree.locate(".").rel == "" and tree.locate("src").name == ""
    assert tree.locate("new/dir/f.txt", missing_ok=True).rel == "new/dir/f.txt"


def test_every_way_out_is_refused(tree: Tree, home: Path, tmp_path: Path) -> None:
    proj = home / "proj"
    (proj / "out").symlink_to("../../outside")
    (proj / "absout").symlink_to(tmp_path / "outside")
    (proj / "file-out").symlink_to(tmp_path / "outside" / "secret.txt")
    (proj / "loop").symlink_to("loop")
    for path in ("../../outside/secret.txt", str(tmp_path / "outside" / "secret.txt"),
                 "out/secret.txt", "absout/secret.txt", "file-out", "src/../../x",
                 "out/new/dir/f.txt"):
        assert _code(tree.locate, path) == "path_outside_workdir", path
    with pytest.raises(OSError):
        tree.locate("loop/x")


def test_hidden_paths_are_refused_however_they_are_reached(home: Path, kernel: bool) -> None:
    (home / "proj" / "keys").symlink_to(home / ".ssh")
    with Tree.open(home, _boundary(home), kernel=kernel) as whole:
        for path in (".ssh/id_ed25519", str(home / ".aws" / "credentials"),
                     "proj/keys/id_ed25519", "proj/../.ssh", ".ssh"):
            assert _code(whole.locate, path) == "protected_path", path
        assert whole.hidden(".ssh") and not whole.hidden("proj")
    with Tree.open(home / "proj", _boundary(home), kernel=kernel) as proj:
        assert _code(proj.locate, "keys/id_ed25519") == "path_outside_workdir"
    # a workdir inside a hidden folder is refused whole
    assert _code(Tree.open, home / ".ssh", _boundary(home), kernel=kernel) == "protected_path"


def test_writes_into_git_and_codey_are_refused_also_through_a_symlink(tree: Tree,
                                                                       home: Path) -> None:
    proj = home / "proj"
    (proj / "meta").symlink_to(".git")  # shipped in a cloned repository
    (proj / "sub" / ".git").mkdir(parents=True)
    for path in (".git/config", ".git/hooks/pre-commit", "meta/config", "meta/hooks/x/y",
                 ".codey/setup.sh", "sub/.git/config", ".GIT/config"):
        assert _code(tree.write, path, b"evil") == "protected_path", path
    assert (proj / ".git" / "config").read_text() == "[core]\n"
    assert not (proj / ".git" / "hooks" / "x").exists()
    assert not (proj / ".codey" / "setup.sh").exists()
    # the file tools say the same
    policy = LocalPolicy(allowed_roots=[home])
    for path in ("meta/config", ".git/config"):
        assert _code(write_file, WriteFile(action_id="w", session_id="s", workdir=str(proj),
                                           path=path, content="[core]\n\tfsmonitor = x\n"),
                     policy, _boundary(home)) == "protected_path"
    assert _code(edit_file, Edit(action_id="e", session_id="s", workdir=str(proj),
                                 path="meta/config", old_string="[core]",
                                 new_string="[core]\n\tfsmonitor = x"),
                 policy, _boundary(home)) == "protected_path"
    rename_hook = ("*** Begin Patch\n*** Update File: .git/hooks/pre-commit.sample\n"
                   "*** Move to: .git/hooks/pre-commit\n@@\n #!/bin/sh\n+touch pwned\n"
                   "*** End Patch")
    assert _code(apply_patch, rename_hook, proj, _boundary(home)) == "protected_path"
    add_hook = "*** Begin Patch\n*** Add File: meta/hooks/post-checkout\n+x\n*** End Patch"
    assert _code(apply_patch, add_hook, proj, _boundary(home)) == "protected_path"
    assert not (proj / ".git" / "hooks" / "pre-commit").exists()
    assert (proj / ".git" / "config").read_text() == "[core]\n"


def test_the_model_may_still_read_git_files_and_write_gitignore(tree: Tree, home: Path) -> None:
    with tree.reading(".git/config") as (fd, spot):
        assert os.read(fd, 100) == b"[core]\n" and spot.shown == ".git/config"
    for path in (".gitignore", ".gitattributes", "src/.github/ci.yml", "codey/x"):
        tree.write(path, b"ok\n")
        assert (home / "proj" / path).read_bytes() == b"ok\n"


def test_write_is_atomic_keeps_the_mode_and_goes_through_an_inside_link(tree: Tree,
                                                                         home: Path) -> None:
    proj = home / "proj"
    (proj / "run.sh").write_text("old\n")
    (proj / "run.sh").chmod(0o750)
    (proj / "alias.sh").symlink_to("run.sh")
    spot, created = tree.write("alias.sh", b"new\n")
    assert (spot.rel, created) == ("run.sh", False)
    assert (proj / "run.sh").read_text() == "new\n" and (proj / "alias.sh").is_symlink()
    assert (proj / "run.sh").stat().st_mode & 0o777 == 0o750
    spot, created = tree.write("a/b/c.txt", b"x")
    assert (spot.rel, created) == ("a/b/c.txt", True)
    assert not [p for p in proj.rglob("*.codey-tmp")]


def test_a_name_swapped_for_a_symlink_after_locate_is_not_followed(tree: Tree,
                                                                    home: Path,
                                                                    tmp_path: Path) -> None:
    spot = tree.locate("src/a.py")
    (home / "proj" / "src" / "a.py").unlink()
    (home / "proj" / "src" / "a.py").symlink_to(tmp_path / "outside" / "secret.txt")
    with pytest.raises(OSError):  # ELOOP: refused, not followed
        tree.open_file(spot)


def test_a_workdir_swapped_for_a_symlink_after_its_check_is_refused(home: Path,
                                                                    kernel: bool,
                                                                    tmp_path: Path) -> None:
    real = home / "proj"
    real.rename(home / "moved")
    real.symlink_to(tmp_path / "outside")
    assert _code(Tree.open, real, _boundary(home), kernel=kernel) == "path_outside_workdir"


def test_the_tools_list_a_hidden_folder_but_never_enter_it(home: Path, kernel: bool) -> None:
    policy = LocalPolicy(allowed_roots=[home])
    listing = list_dir(ListDir(action_id="l", session_id="s", workdir=str(home), depth=3),
                       policy, boundary=_boundary(home))
    paths = [e.path for e in listing.entries]
    assert ".ssh" in paths and not any(p.startswith(".ssh/") for p in paths)
    assert "proj/src/a.py" in paths
    assert _code(read_file, ReadFile(action_id="r", session_id="s", workdir=str(home),
                                     path=".ssh/id_ed25519"),
                 policy, boundary=_boundary(home)) == "protected_path"
