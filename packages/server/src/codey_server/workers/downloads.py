"""``/dl/``: the protocol and worker wheels this server was built with, for the install line.

A machine gets a worker that matches its server with one line the "Link a machine" dialog
shows (docs/worker.md)::

    uvx --from http://HOST/dl/KEY/codey_worker-0.2.0-py3-none-any.whl \\
        --with http://HOST/dl/KEY/codey_protocol-0.2.0-py3-none-any.whl \\
        codey-worker --server http://HOST

Where the wheels come from, first found wins:

1. **Packaged**: a server installed from its wheel carries them in ``codey_server/dl/``
   (``packages/server/hatch_build.py`` builds them at packaging time).
2. **Built from the checkout**: a server running from the repository (an editable install)
   builds them with ``uv build`` on the first request, into ``DATA_DIR/dl/KEY/``. ``KEY`` is
   a hash of the two packages' sources, so an edited worker is built again and an unchanged
   one is not (a restart reuses the cache). Nothing is built at start-up: most servers — and
   every test's — never hand out a wheel.

``KEY`` is in the URL so a changed wheel never hides behind an installer's cache of the old
URL. The routes need no login (``access.py`` lets everything outside ``/api/`` through): the
wheels hold only the packages' own files, no secret, no setting of this server.

Routes: ``GET /dl/index.json`` → ``{"key", "version", "protocol", "worker"}`` (paths of the two
wheels; 503 with ``detail`` when they cannot be had) and ``GET /dl/{key}/{file}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from litestar import Request, Response, Router, get
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath
from litestar.response import File

from codey_server.errors import ServerError
from codey_server.http.access import PUBLIC

log = logging.getLogger("codey.downloads")

__all__ = ["WheelBundle", "WheelsUnavailable", "WorkerWheels", "downloads_router", "find_uv"]

#: the packages a worker needs, as (distribution name in wheel file names, checkout folder)
PACKAGES = (("codey_protocol", "protocol"), ("codey_worker", "worker"))
BUILD_TIMEOUT_S = 180.0
_PACKAGED = Path(__file__).resolve().parents[1] / "dl"  # codey_server/dl in a wheel
_CHECKOUT_PACKAGES = Path(__file__).resolve().parents[4]  # packages/ in a checkout


class WheelsUnavailable(ServerError):
    """No wheels to hand out: not packaged, and they could not be built here."""


@dataclass(frozen=True)
class WheelBundle:
    """The two wheels, in a folder, under a key that changes with their contents."""

    key: str
    folder: Path
    protocol: str  # file names
    worker: str

    @property
    def version(self) -> str:
        return self.worker.split("-")[1]

    def index(self) -> dict[str, str]:
        return {"key": self.key, "version": self.version,
                "protocol": f"/dl/{self.key}/{self.protocol}",
                "worker": f"/dl/{self.key}/{self.worker}"}

    def path_of(self, key: str, name: str) -> Path | None:
        if key != self.key or name not in (self.protocol, self.worker):
            return None
        return self.folder / name


def _bundle(folder: Path, key: str) -> WheelBundle | None:
    names = {}
    for dist, _ in PACKAGES:
        found = sorted(folder.glob(f"{dist}-*-py3-none-any.whl"))
        if len(found) != 1:
            return None
        names[dist] = found[0].name
    return WheelBundle(key=key, folder=folder, protocol=names["codey_protocol"],
                       worker=names["codey_worker"])


def _digest_files(paths: list[Path], base: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.relative_to(base).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def source_key(packages_dir: Path) -> str:
    """A hash of what goes into the two wheels: their sources, pyproject, README, licence."""
    files: list[Path] = []
    for _, folder in PACKAGES:
        root = packages_dir / folder
        files += [p for p in (root / "src").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts]
        files += [p for p in (root / n for n in ("pyproject.toml", "README.md", "LICENSE"))
                  if p.is_file()]
    return _digest_files(files, packages_dir)


def find_uv() -> str | None:
    """uv's absolute path on this machine: the one that runs us (``uv run`` sets ``$UV``),
    the one on our PATH, or the one ``./scripts/serve`` installs (``~/.local/bin``, which a
    server started from a new terminal may lack on its PATH); None when there is none."""
    candidates = [os.environ.get("UV"), shutil.which("uv"),
                  str(Path.home() / ".local" / "bin" / "uv")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return str(Path(path).absolute())
    return None


class WorkerWheels:
    """Finds (or builds, once) the wheels; see the module docstring for the order.

    ``packaged`` and ``packages_dir`` default to this installation's; tests point them
    elsewhere. :meth:`get` raises :class:`WheelsUnavailable` with a reason for the user.
    """

    def __init__(self, data_dir: Path, *, packaged: Path | None = None,
                 packages_dir: Path | None = None, uv: str | None = None) -> None:
        self.cache = data_dir / "dl"
        self.packaged = _PACKAGED if packaged is None else packaged
        self.packages_dir = _CHECKOUT_PACKAGES if packages_dir is None else packages_dir
        self.uv = uv or find_uv()
        self._bundle: WheelBundle | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> WheelBundle:
        if self._bundle is not None:
            return self._bundle
        async with self._lock:  # one build at a time; the waiters get its result
            if self._bundle is None:
                self._bundle = await self._find_or_build()
            return self._bundle

    async def _find_or_build(self) -> WheelBundle:
        wheels = sorted(self.packaged.glob("*.whl")) if self.packaged.is_dir() else []
        if wheels:
            key = await asyncio.to_thread(_digest_files, wheels, self.packaged)
            bundle = _bundle(self.packaged, key)
            if bundle is not None:
                return bundle
        if not all((self.packages_dir / f / "pyproject.toml").is_file() for _, f in PACKAGES):
            raise WheelsUnavailable("this server was installed without the worker's wheels "
                                    "and has no checkout to build them from")
        key = await asyncio.to_thread(source_key, self.packages_dir)
        cached = _bundle(self.cache / key, key)
        if cached is not None:
            return cached
        return await self._build(key)

    async def _build(self, key: str) -> WheelBundle:
        if not self.uv:
            raise WheelsUnavailable("uv is needed to build the worker's wheels from the "
                                    "checkout (see scripts/_setup.sh)")
        self.cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=self.cache))
        try:
            for _, folder in PACKAGES:
                await self._uv_build(self.packages_dir / folder, tmp)
            for extra in tmp.iterdir():  # uv's .gitignore and the like
                if extra.suffix != ".whl":
                    extra.unlink()
            final = self.cache / key
            if not final.exists():
                tmp.rename(final)
            bundle = _bundle(final, key)
            if bundle is None:
                raise WheelsUnavailable(f"uv build did not leave the two wheels in {final}")
            for old in self.cache.iterdir():  # earlier sources' wheels are dead weight
                if old.name != key:
                    shutil.rmtree(old, ignore_errors=True)
            log.info("built the worker's wheels into %s", final)
            return bundle
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def _uv_build(self, source: Path, out: Path) -> None:
        assert self.uv is not None
        proc = await asyncio.create_subprocess_exec(
            self.uv, "build", "--wheel", "--quiet", "--out-dir", str(out), str(source),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), BUILD_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise WheelsUnavailable(f"building {source.name} took over "
                                    f"{BUILD_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            tail = output.decode(errors="replace").strip().splitlines()[-3:]
            raise WheelsUnavailable(f"uv build {source.name} failed: {' / '.join(tail)}")


def _wheels(request: Request[Any, Any, Any]) -> WorkerWheels:
    # one per app, made on first use: the app's state is its lifetime
    state = request.app.state
    wheels: WorkerWheels | None = state.get("worker_wheels")
    if wheels is None:
        wheels = WorkerWheels(state.services.settings.data_dir)
        state.worker_wheels = wheels
    return wheels


async def _bundle_or_503(request: Request[Any, Any, Any]) -> WheelBundle:
    try:
        return await _wheels(request).get()
    except WheelsUnavailable as err:
        log.warning("worker wheels unavailable: %s", err)
        raise HTTPException(status_code=503, detail=str(err)) from None


@get("/index.json", include_in_schema=False)
async def wheel_index(request: Request[Any, Any, Any]) -> Response[dict[str, str]]:
    bundle = await _bundle_or_503(request)
    return Response(bundle.index(), headers={"cache-control": "no-store"})


@get("/{key:str}/{name:str}", include_in_schema=False)
async def wheel_file(key: FromPath[str], name: FromPath[str],
                     request: Request[Any, Any, Any]) -> File:
    path = (await _bundle_or_503(request)).path_of(key, name)
    if path is None or not path.is_file():
        raise NotFoundException(f"no {name} here (GET /dl/index.json lists what there is)")
    # the key changes with the contents, so a URL's bytes never change
    return File(path, filename=name, media_type="application/zip",
                headers={"cache-control": "public, max-age=31536000, immutable"})


#: for ``Litestar(route_handlers=[...])``
# public: a worker being installed has no login, and the wheels hold no secret
downloads_router = Router(path="/dl", route_handlers=[wheel_index, wheel_file], opt=PUBLIC)
