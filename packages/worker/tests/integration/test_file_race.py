"""Every file tool raced by a folder swap (the audit's finding 6).

A background process the model started with ``exec`` swaps ``d/`` with ``d -> $CODEY_HOME``
(``renameat2(RENAME_EXCHANGE)``, in a loop) while the model calls a file tool on ``d/...``.
Against a check by path followed by an open by path, the audit got ``worker.json`` back in 5
of 51 calls. Through the one confined file API (and ``rg`` in the sandbox) no call may read,
list or write what is behind the link, whichever way the file API resolves (openat2 or the
O_PATH walk). The swaps run in a thread here, as fast as the kernel allows.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from codey_protocol.worker import Edit, Glob, Grep, ListDir, ReadFile, ViewImage, WriteFile
from codey_worker.confine import ActionRefused
from codey_worker.edit import edit_file
from codey_worker.errors import WorkerError
from codey_worker.files import openat2_works
from codey_worker.fs import list_dir, read_file, write_file
from codey_worker.images import view_image
from codey_worker.patch import apply_patch
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox, SandboxSettings, detect
from codey_worker.search import find_rg, glob, grep

pytestmark = pytest.mark.integration

CREDENTIAL = "WORKER-CREDENTIAL-91c2"
#: calls per tool and way. The old check-then-open leaked worker.json through read_file and
#: list_dir in ~1 of 500 calls and through grep in ~1 of 20 (3,000 calls each, this machine)
CALLS = 1000
CALLS_SPAWNING = 120  # rg: each call starts a sandbox


def _png(rgb: tuple[int, int, int]) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    raw = b"\x00" + bytes(rgb)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


SECRET_PNG = _png((255, 0, 0))


class Swapper:
    """Exchanges two names in a loop until stopped; counts the swaps."""

    def __init__(self, a: Path, b: Path) -> None:
        self.a, self.b = os.fsencode(a), os.fsencode(b)
        self.swaps = 0
        self._stop = threading.Event()
        self._swapped = threading.Condition()
        libc = ctypes.CDLL(None, use_errno=True)
        self._renameat2 = libc.renameat2
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        at_fdcwd, exchange = -100, 2
        while not self._stop.is_set():
            if self._renameat2(at_fdcwd, self.a, at_fdcwd, self.b, exchange) == 0:
                with self._swapped:
                    self.swaps += 1
                    self._swapped.notify_all()

    def after(self, swaps: int) -> None:
        """Wait until more than ``swaps`` swaps were made. Under load the GIL can starve the
        swapping thread through a run of calls; each call then still meets a fresh swap."""
        with self._swapped:
            if not self._swapped.wait_for(lambda: self.swaps > swaps, timeout=10):
                raise AssertionError(f"the swapper made no swap in 10 s (at {swaps})")

    def __enter__(self) -> Swapper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Machine:
    ws: Path  # the session's workdir
    codey: Path  # $CODEY_HOME, hidden
    policy: LocalPolicy
    sandbox: Sandbox

    def reset(self) -> None:
        """``d`` a folder again (the swap may have left it as the link)."""
        d, x = self.ws / "d", self.ws / "x"
        if d.is_symlink():
            os.rename(d, self.ws / "tmp-link")
            os.rename(x, d)
            os.rename(self.ws / "tmp-link", x)
        (d / "worker.json").write_text("HARMLESS\n")


@pytest.fixture
def machine(outside_tmp: Path) -> Iterator[Machine]:
    codey = outside_tmp / "codey-home"
    codey.mkdir()
    (codey / "worker.json").write_text(f'{{"credential": "{CREDENTIAL}"}}\n')
    (codey / "key.pem").write_text(CREDENTIAL + "\n")
    (codey / "img.png").write_bytes(SECRET_PNG)
    ws = outside_tmp / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "worker.json").write_text("HARMLESS\n")
    (ws / "d" / "img.png").write_bytes(_png((0, 0, 255)))
    (ws / "x").symlink_to(codey)
    sandbox = Sandbox(detect(), codey, SandboxSettings(hidden_paths=()))
    yield Machine(ws, codey, LocalPolicy(allowed_roots=[outside_tmp]), sandbox)


def _untouched(machine: Machine) -> None:
    codey = machine.codey
    assert sorted(p.name for p in codey.iterdir()) == ["img.png", "key.pem", "worker.json"]
    assert CREDENTIAL in (codey / "worker.json").read_text()
    assert (codey / "img.png").read_bytes() == SECRET_PNG


def _race(machine: Machine, call: Callable[[], str | None], calls: int) -> tuple[int, int]:
    """``call`` ``calls`` times under the swap; (leaks, answers). A call returns the text it
    got back (None: it was refused or failed, which is allowed)."""
    leaks = answered = 0
    with Swapper(machine.ws / "d", machine.ws / "x") as swapper:
        for _ in range(calls):
            swapper.after(swapper.swaps)
            try:
                text = call()
            except (ActionRefused, WorkerError, OSError):
                continue
            if text is None:
                continue
            answered += 1
            if CREDENTIAL in text or "key.pem" in text or base64.b64encode(
                    SECRET_PNG).decode() in text:
                leaks += 1
    machine.reset()
    _untouched(machine)
    return leaks, answered


WAYS = [pytest.param(False, id="walk"),
        pytest.param(True, id="openat2", marks=pytest.mark.skipif(
            not openat2_works(), reason="openat2 is not available here"))]


@pytest.fixture(params=WAYS)
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    kernel = bool(request.param)
    monkeypatch.setattr("codey_worker.files.openat2_works", lambda: kernel)
    return kernel


def _tools(m: Machine) -> dict[str, Callable[[], str | None]]:
    wd, b = str(m.ws), m.sandbox.boundary
    ids = {"action_id": "a", "session_id": "s", "workdir": wd}

    def read() -> str:
        return read_file(ReadFile(**ids, path="d/worker.json"), m.policy, boundary=b).content

    def listing() -> str:
        got = list_dir(ListDir(**ids, path="d", depth=2), m.policy, boundary=b)
        return " ".join(e.path for e in got.entries)

    def image() -> str:
        return view_image(ViewImage(**ids, path="d/img.png"), m.policy, boundary=b).data

    def write() -> str | None:
        write_file(WriteFile(**ids, path="d/planted.txt", content="x"), m.policy, boundary=b)
        return None

    def edit() -> str | None:
        edit_file(Edit(**ids, path="d/worker.json", old_string="\n", new_string=" \n",
                       replace_all=True), m.policy, boundary=b)
        return None

    def patch() -> str | None:
        apply_patch("*** Begin Patch\n*** Add File: d/patched.txt\n+x\n*** End Patch", m.ws, b)
        return None

    def search(engine: object, mode: str) -> Callable[[], str]:
        def run() -> str:
            got = asyncio.run(grep(Grep(**ids, pattern="CREDENTIAL|HARMLESS", path="d",
                                        mode=mode),  # type: ignore[arg-type]
                                   m.policy, rg=engine, sandbox=m.sandbox, boundary=b))
            return " ".join(f.path + " " + " ".join(x.text for x in f.lines)
                            for f in got.files)
        return run

    def files(engine: object) -> Callable[[], str]:
        def run() -> str:
            got = asyncio.run(glob(Glob(**ids, pattern="**/*", path="d"), m.policy, rg=engine,
                                   sandbox=m.sandbox, boundary=b))
            return " ".join(got.paths)
        return run

    return {"read_file": read, "list_dir": listing, "view_image": image,
            "write_file": write, "edit": edit, "apply_patch": patch,
            "grep rg": search(find_rg(), "content"), "grep python": search(None, "content"),
            "glob rg": files(find_rg()), "glob python": files(None)}


TOOLS = ["read_file", "list_dir", "view_image", "write_file", "edit", "apply_patch",
         "grep rg", "grep python", "glob rg", "glob python"]


@pytest.mark.parametrize("tool", TOOLS)
def test_a_swapping_folder_never_lets_a_tool_through(machine: Machine, way: bool,
                                                     tool: str) -> None:
    if tool.endswith(" rg") and (find_rg() is None or machine.sandbox.support.kind != "bwrap"):
        pytest.skip(f"rg runs in the sandbox: {machine.sandbox.support.reason or 'no rg'}")
    calls = CALLS_SPAWNING if tool.endswith(" rg") else CALLS
    leaks, answered = _race(machine, _tools(machine)[tool], calls)
    assert leaks == 0, f"{tool}: {leaks} of {calls} calls got what is behind the link"
    if tool in ("read_file", "grep python", "grep rg"):
        assert answered > 0  # the tool did answer while the folder was in place
