"""Where the worker's wheels come from: packaged, cached or built (downloads.py)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from codey_server.workers.downloads import WheelsUnavailable, WorkerWheels, source_key

PACKAGES = Path(__file__).resolve().parents[3].parent / "packages"


def _fake_wheels(folder: Path, version: str = "0.1.0") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for dist in ("codey_protocol", "codey_worker"):
        (folder / f"{dist}-{version}-py3-none-any.whl").write_bytes(dist.encode() + b"-zip")


def test_packaged_wheels_are_used_without_building(tmp_path: Path) -> None:
    _fake_wheels(tmp_path / "pkg")
    wheels = WorkerWheels(tmp_path / "data", packaged=tmp_path / "pkg",
                          packages_dir=tmp_path / "none", uv="/nonexistent/uv")
    bundle = asyncio.run(wheels.get())
    assert bundle.folder == tmp_path / "pkg"
    index = bundle.index()
    assert index["worker"] == f"/dl/{bundle.key}/codey_worker-0.1.0-py3-none-any.whl"
    assert index["version"] == "0.1.0"
    assert bundle.path_of(bundle.key, "codey_worker-0.1.0-py3-none-any.whl") is not None
    assert bundle.path_of(bundle.key, "other.whl") is None
    assert bundle.path_of("0" * 16, "codey_worker-0.1.0-py3-none-any.whl") is None
    # the key follows the contents
    (tmp_path / "pkg" / "codey_worker-0.1.0-py3-none-any.whl").write_bytes(b"changed")
    again = asyncio.run(WorkerWheels(tmp_path / "data", packaged=tmp_path / "pkg",
                                     packages_dir=tmp_path / "none").get())
    assert again.key != bundle.key


def test_cached_build_is_found_by_source_key(tmp_path: Path) -> None:
    key = source_key(PACKAGES)
    _fake_wheels(tmp_path / "data" / "dl" / key)
    wheels = WorkerWheels(tmp_path / "data", packaged=tmp_path / "none",
                          packages_dir=PACKAGES, uv="/nonexistent/uv")  # would fail to build
    assert asyncio.run(wheels.get()).key == key


def test_source_key_changes_with_the_worker_sources_only(tmp_path: Path) -> None:
    copy = tmp_path / "packages"
    for name in ("protocol", "worker"):
        shutil.copytree(PACKAGES / name, copy / name,
                        ignore=shutil.ignore_patterns("tests", "__pycache__"))
    before = source_key(copy)
    assert source_key(copy) == before
    (copy / "server").mkdir()
    (copy / "server" / "x.py").write_text("x = 1\n")
    assert source_key(copy) == before
    cli = copy / "worker" / "src" / "codey_worker" / "cli.py"
    cli.write_text(cli.read_text() + "\n# edited\n")
    assert source_key(copy) != before


def test_nothing_to_hand_out_is_said_plainly(tmp_path: Path) -> None:
    nowhere = WorkerWheels(tmp_path / "data", packaged=tmp_path / "none",
                           packages_dir=tmp_path / "none")
    with pytest.raises(WheelsUnavailable, match="without the worker's wheels"):
        asyncio.run(nowhere.get())
    copy = tmp_path / "packages"
    for name in ("protocol", "worker"):
        shutil.copytree(PACKAGES / name / "src", copy / name / "src")
        shutil.copy(PACKAGES / name / "pyproject.toml", copy / name)
    no_uv = WorkerWheels(tmp_path / "data", packaged=tmp_path / "none", packages_dir=copy)
    no_uv.uv = None
    with pytest.raises(WheelsUnavailable, match="uv is needed"):
        asyncio.run(no_uv.get())
