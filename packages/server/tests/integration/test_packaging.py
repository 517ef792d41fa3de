"""Every package builds as an sdist and a wheel that could go to PyPI as it is.

One ``uv build --all-packages`` (wheels are built from the sdists, as a user's pip would)
checks all four packages at once, in a few seconds; the server's wheel must carry the web
client and the worker's wheels it hands out under ``/dl/``.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from codey_protocol.version import __version__ as VERSION

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
PACKAGES = ("protocol", "server", "worker", "testkit")


def _uv() -> str:
    # `uv run` exports UV; otherwise the uv on PATH (scripts/test installs it)
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        pytest.fail("uv is needed to build the packages (see scripts/_setup.sh)")
    return uv


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([_uv(), "build", "--all-packages", "--out-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def test_no_symlink_in_a_package_points_outside_it() -> None:
    # an absolute (or escaping) symlink breaks the sdist: uv refuses it, hatchling packs
    # whatever it points at
    for pkg in PACKAGES:
        root = (REPO / "packages" / pkg).resolve()
        for path in root.rglob("*"):
            if path.is_symlink():
                target = os.readlink(path)
                assert not os.path.isabs(target), f"{path} -> {target}"
                resolved = os.path.normpath(path.parent / target)
                assert resolved.startswith(str(root) + os.sep), f"{path} -> {target}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_sdist_and_wheel_carry_what_pypi_wants(dist: Path, pkg: str) -> None:
    sdist = dist / f"codey_{pkg}-{VERSION}.tar.gz"
    wheel = dist / f"codey_{pkg}-{VERSION}-py3-none-any.whl"
    assert sdist.is_file() and wheel.is_file(), sorted(p.name for p in dist.iterdir())
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        assert f"codey_{pkg}-{VERSION}/README.md" in names
        assert f"codey_{pkg}-{VERSION}/LICENSE" in names
        for member in tar.getmembers():
            assert not (member.issym() and os.path.isabs(member.linkname)), member.name
    meta = _metadata(wheel)
    assert meta["Name"] == f"codey-{pkg}"
    assert meta["Summary"]
    assert meta["License-Expression"] == "MIT"
    assert meta["Author"]
    assert meta["Keywords"]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert f"# codey-{pkg}" in meta.get_payload()  # the README is the long description
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert any(c.startswith("Development Status") for c in classifiers)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Source", "Documentation", "Issues"} <= set(urls)
    with zipfile.ZipFile(wheel) as z:
        assert f"codey_{pkg}/py.typed" in z.namelist()


def test_server_wheel_ships_the_web_client_and_the_worker_wheels(dist: Path) -> None:
    with zipfile.ZipFile(dist / f"codey_server-{VERSION}-py3-none-any.whl") as z:
        names = set(z.namelist())
        shipped = {n.rsplit("/", 1)[1]: z.read(n) for n in names
                   if n.startswith("codey_server/dl/")}
    web = {n for n in names if n.startswith("codey_server/web/")}
    for path in (REPO / "web").rglob("*"):
        if path.is_file():
            assert f"codey_server/web/{path.relative_to(REPO / 'web').as_posix()}" in web
    assert set(shipped) == {f"codey_protocol-{VERSION}-py3-none-any.whl",
                            f"codey_worker-{VERSION}-py3-none-any.whl"}
    # the same packages as their own wheels: same files, same metadata
    for name, data in shipped.items():
        inner = dist / f"inner-{name}"
        inner.write_bytes(data)
        with zipfile.ZipFile(inner) as a, zipfile.ZipFile(dist / name) as b:
            assert sorted(a.namelist()) == sorted(b.namelist())
            for member in a.namelist():
                if not member.endswith("RECORD"):
                    assert a.read(member) == b.read(member), member
