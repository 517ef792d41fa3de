"""Path confinement: every way out of a workdir is refused, every way inside is allowed."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from codey_worker.confine import (
    ActionRefused,
    Root,
    check_root,
    relative_display,
    resolve_inside,
)
from codey_worker.errors import WorkerError


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workdir = tmp_path / "ws"
    (workdir / "src").mkdir(parents=True)
    (workdir / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return workdir


def _refused(workdir: Path, path: str, code: str = "path_outside_workdir") -> ActionRefused:
    with pytest.raises(ActionRefused) as info:
        resolve_inside(workdir, path)
    assert info.value.code == code
    assert isinstance(info.value, WorkerError)
    return info.value


def test_relative_path_inside_resolves_to_realpath(ws: Path) -> None:
    assert resolve_inside(ws, "src/a.py") == Path(os.path.realpath(ws / "src" / "a.py"))


def test_empty_and_dot_mean_the_workdir(ws: Path) -> None:
    real = Path(os.path.realpath(ws))
    assert resolve_inside(ws, "") == real
    assert resolve_inside(ws, ".") == real


def test_dotdot_that_stays_inside_is_allowed(ws: Path) -> None:
    assert resolve_inside(ws, "src/../src/a.py").name == "a.py"


def test_not_yet_existing_target_inside_is_allowed(ws: Path) -> None:
    target = resolve_inside(ws, "new/dir/file.txt")
    assert target == Path(os.path.realpath(ws)) / "new" / "dir" / "file.txt"


def test_dotdot_escape_is_refused(ws: Path) -> None:
    err = _refused(ws, "../outside/secret.txt")
    assert "outside the workdir" in err.message


def test_dotdot_escape_through_missing_dirs_is_refused(ws: Path) -> None:
    _refused(ws, "nope/../../../outside/secret.txt")


def test_absolute_path_inside_is_allowed(ws: Path) -> None:
    inside = str(ws / "src" / "a.py")
    assert resolve_inside(ws, inside) == Path(os.path.realpath(inside))


def test_absolute_path_outside_is_refused(ws: Path) -> None:
    _refused(ws, "/etc/passwd")
    _refused(ws, str(ws.parent / "outside" / "secret.txt"))


def test_symlink_to_outside_file_is_refused(ws: Path) -> None:
    (ws / "link").symlink_to(ws.parent / "outside" / "secret.txt")
    _refused(ws, "link")


def test_symlinked_dir_pointing_out_is_refused_also_for_new_files(ws: Path) -> None:
    (ws / "linkdir").symlink_to(ws.parent / "outside")
    _refused(ws, "linkdir/secret.txt")
    _refused(ws, "linkdir/not-yet-there/new.txt")


def test_dangling_symlink_pointing_out_is_refused(ws: Path) -> None:
    (ws / "dangling").symlink_to(ws.parent / "outside" / "does-not-exist-yet")
    _refused(ws, "dangling")


def test_symlink_staying_inside_is_allowed(ws: Path) -> None:
    (ws / "alias").symlink_to(ws / "src")
    assert resolve_inside(ws, "alias/a.py") == Path(os.path.realpath(ws / "src" / "a.py"))


def test_sibling_with_common_prefix_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    evil = tmp_path / "ws-evil"
    evil.mkdir()
    (evil / "x").write_text("x")
    _refused(ws, str(evil / "x"))
    _refused(ws, "../ws-evil/x")


def test_workdir_given_through_a_symlink_is_resolved(ws: Path, tmp_path: Path) -> None:
    via = tmp_path / "via"
    via.symlink_to(ws)
    assert resolve_inside(via, "src/a.py") == Path(os.path.realpath(ws / "src" / "a.py"))
    _refused(via, "../outside/secret.txt")


def test_nul_byte_and_relative_workdir_are_bad_requests(ws: Path) -> None:
    _refused(ws, "src/a\x00.py", code="bad_request")
    with pytest.raises(ActionRefused) as info:
        resolve_inside("relative/ws", "a")
    assert info.value.code == "bad_request"


def test_check_root_allows_inside_and_refuses_outside_and_siblings(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    (tmp_path / "root-evil").mkdir()
    assert check_root(root / "proj", [root]) == Path(os.path.realpath(root / "proj"))
    assert check_root(root, [root]) == Path(os.path.realpath(root))
    for bad in (tmp_path / "root-evil", tmp_path, Path("/etc"), root / ".." / "root-evil"):
        with pytest.raises(ActionRefused) as info:
            check_root(bad, [root])
        assert info.value.code == "outside_allowed_roots"


def test_check_root_follows_symlinks_out_of_a_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "escape").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ActionRefused) as info:
        check_root(root / "escape", [root])
    assert info.value.code == "outside_allowed_roots"


def test_check_root_with_no_roots_refuses_everything(tmp_path: Path) -> None:
    with pytest.raises(ActionRefused) as info:
        check_root(tmp_path, [])
    assert "none configured" in info.value.message


def test_relative_display(ws: Path) -> None:
    real = Path(os.path.realpath(ws))
    assert relative_display(real, real / "src" / "a.py") == "src/a.py"
    assert relative_display(real, real) == "."


def _reference(workdir: Path, path: str) -> Path | str:
    """What confinement means, spelled the slow way: realpath both, then commonpath."""
    root = os.path.realpath(workdir)
    target = os.path.realpath(os.path.join(root, path) if path else root)
    if os.path.commonpath([target, root]) != root:
        return "path_outside_workdir"
    return Path(target)


def test_fast_path_agrees_with_realpath_on_every_short_path(tmp_path: Path) -> None:
    # resolve_inside skips realpath for plain paths; every combination of plain names, dots,
    # missing names and symlinks (in, out, dangling, to a dir) must give realpath's answer
    workdir = tmp_path / "ws"
    (workdir / "src" / "deep").mkdir(parents=True)
    (workdir / "src" / "a.py").write_text("x\n")
    (tmp_path / "out").mkdir()
    (workdir / "in_link").symlink_to(workdir / "src")
    (workdir / "src" / "up").symlink_to("..")
    (workdir / "out_link").symlink_to(tmp_path / "out")
    (workdir / "dangling").symlink_to(tmp_path / "out" / "nothing")
    names = ["", ".", "..", "src", "a.py", "deep", "in_link", "up", "out_link", "dangling",
             "missing"]
    paths = {"/".join(p) for p in itertools.product(names, repeat=3)}
    for path in sorted(paths):
        expected = _reference(workdir, path)
        try:
            got: Path | str = resolve_inside(workdir, path)
        except ActionRefused as err:
            got = err.code
        assert got == expected, path
        real = Path(os.path.realpath(workdir))
        try:
            got_real: Path | str = resolve_inside(real, path, real=True)
        except ActionRefused as err:
            got_real = err.code
        assert got_real == expected, path


def test_check_root_fast_path_agrees_with_realpath(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (root / "a" / "link_in").symlink_to(root / "a" / "b")
    (root / "a" / "link_out").symlink_to(tmp_path / "out")
    for rel, inside in [("a", True), ("a/b", True), ("a/./b/", True), ("a/link_in", True),
                        ("a/link_out", False), ("a/b/../link_out", False), ("a/b/..", True),
                        ("a/missing/new", True), ("a/missing/../../..", False)]:
        path = f"{root}/{rel}"
        expected = Path(os.path.realpath(path))
        if inside:
            assert check_root(path, [root]) == expected, rel
            assert check_root(path, [Root.pin(root)]) == expected, rel
        else:
            with pytest.raises(ActionRefused) as info:
                check_root(path, [root])
            assert info.value.code == "outside_allowed_roots", rel
