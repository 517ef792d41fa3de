"""Hatchling build hook: puts the web client and the worker's wheels into codey-server.

* ``web/`` (the browser client, at the repository root) ships as ``codey_server/web`` so
  ``pip install codey-server`` serves the UI without a checkout.
* ``codey_protocol`` and ``codey_worker`` wheels, built from ``packages/`` at packaging time,
  ship as ``codey_server/dl/*.whl``: the server hands them out under ``/dl/`` so a machine
  installs the worker that matches this server in one line (docs/worker.md).

From the repository both come from ``../../``; an sdist carries its own ``web/`` and ``dl/``
(put there by this hook), so the wheel built from an sdist is the same. An editable install
gets neither: the server then finds ``web/`` in the checkout and builds the worker wheels on
first request (codey_server/downloads.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.builders.wheel import WheelBuilder

#: the packages whose wheels the server hands out, in install order
WORKER_PACKAGES = ("protocol", "worker")


class CustomBuildHook(BuildHookInterface):
    """Adds ``web/`` and ``dl/*.whl`` to the sdist (at its root) or the wheel (in the package)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "editable":
            return
        root = Path(self.root)
        checkout = root.parent.parent
        into = "" if self.target_name == "sdist" else "codey_server/"
        web = root / "web" if (root / "web").is_dir() else checkout / "web"
        if not (web / "index.html").is_file():
            raise RuntimeError(f"codey-server: no web client at {web}")
        build_data["force_include"][str(web)] = into + "web"
        for wheel in self._worker_wheels(root, checkout):
            build_data["force_include"][str(wheel)] = f"{into}dl/{wheel.name}"

    def _worker_wheels(self, root: Path, checkout: Path) -> list[Path]:
        shipped = sorted((root / "dl").glob("*.whl"))
        if shipped:  # building the wheel from an sdist
            return shipped
        self._tmp = tempfile.mkdtemp(prefix="codey-dl-")
        wheels = []
        for name in WORKER_PACKAGES:
            source = checkout / "packages" / name
            if not (source / "pyproject.toml").is_file():
                raise RuntimeError(f"codey-server: cannot find {source} to build its wheel")
            builder = WheelBuilder(str(source))
            wheels.append(Path(next(builder.build(directory=self._tmp,
                                                  versions=["standard"]))))
        return wheels

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
