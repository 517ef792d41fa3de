"""Every Codey package has one version, and it comes from one place:
``codey_protocol/version.py``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from codey_protocol import __version__
from codey_protocol.version import __version__ as from_module

ROOT = Path(__file__).resolve().parents[4]
PACKAGES = ("protocol", "server", "worker", "testkit")


def test_the_version_is_a_release_number() -> None:
    assert from_module == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


def test_every_package_reads_it_from_the_protocol_package() -> None:
    version_file = ROOT / "packages" / "protocol" / "src" / "codey_protocol" / "version.py"
    for pkg in PACKAGES:
        folder = ROOT / "packages" / pkg
        project = tomllib.loads((folder / "pyproject.toml").read_text())
        assert "version" not in project["project"], f"{pkg} states a version of its own"
        assert "version" in project["project"]["dynamic"]
        path = (folder / project["tool"]["hatch"]["version"]["path"]).resolve()
        assert path == version_file.resolve(), pkg
        keys = {k["file"] for k in project["tool"]["uv"]["cache-keys"]}
        assert project["tool"]["hatch"]["version"]["path"] in keys, (
            f"{pkg}: uv would not reinstall it when the version changes")


def test_the_workspace_states_the_same_version() -> None:
    # the workspace is no package, and uv wants a version there: it must not drift
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert workspace["project"]["version"] == __version__
