"""``view_image``: an image file of the workdir, for the model to look at.

The kind is read from the file's first bytes, never from its name: PNG, JPEG, GIF and WebP
(what the model APIs take as image input); anything else is refused (``not_an_image``). The
width and height come from the header when it says them plainly (PNG's IHDR, GIF's screen
descriptor, JPEG's first SOF segment, WebP's VP8/VP8L/VP8X chunk); nothing is decoded.

The answer carries the bytes in base64 and must fit one frame of the worker's socket (1 MiB,
the cap the server enforces), so images over :data:`MAX_IMAGE_BYTES` (about 730 KiB) are
refused (``too_large``) with a message that says the limit and how to make a smaller copy.

Paths go through the one confined file API like every file tool's
(:class:`codey_worker.files.Tree`); the file is opened in its folder's handle without following
a symlink and must be a regular file.
"""

from __future__ import annotations

import base64
import os
import stat
import struct

from codey_protocol.worker import ImageContent, ViewImage
from codey_worker.confine import ActionRefused
from codey_worker.files import Boundary, Tree
from codey_worker.frames import FRAME_BUDGET
from codey_worker.policy import LocalPolicy

__all__ = ["MAX_IMAGE_BYTES", "image_size", "sniff_mime", "view_image"]

#: the largest image whose base64 still fits one frame, with room for the envelope
MAX_IMAGE_BYTES = (FRAME_BUDGET - 16 * 1024) // 4 * 3

_KIB = 1024


def sniff_mime(head: bytes) -> str | None:
    """The image type that ``head`` (a file's first bytes, 12 are enough) starts, or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes, mime: str) -> tuple[int, int] | None:
    """(width, height) as the header of ``data`` says them; None when it does not plainly."""
    try:
        if mime == "image/png":
            if data[12:16] == b"IHDR":
                width, height = struct.unpack(">II", data[16:24])
                return width, height
        elif mime == "image/gif":
            width, height = struct.unpack("<HH", data[6:10])
            return width, height
        elif mime == "image/jpeg":
            return _jpeg_size(data)
        elif mime == "image/webp":
            return _webp_size(data)
    except struct.error:
        return None
    return None


# start-of-frame markers (baseline, progressive, lossless, …): not DHT, JPG or DAC
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # no length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2:at + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            return width, height
        if marker == 0xDA:  # the scan begins: no frame header before it
            return None
        at += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8L" and data[20:21] == b"\x2f":
        (bits,) = struct.unpack("<I", data[21:25])
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _size_text(n: int) -> str:
    return f"{n / (1024 * _KIB):.1f} MiB" if n >= 1024 * _KIB else f"{n / _KIB:.0f} KiB"


def view_image(action: ViewImage, policy: LocalPolicy,
               max_bytes: int = MAX_IMAGE_BYTES, boundary: Boundary | None = None) -> ImageContent:
    """Read the image ``action.path`` (see the module docstring); synchronous, for a thread.

    Raises ``ActionRefused``: ``not_an_image``, ``too_large``, ``not_found``,
    ``is_directory``, ``not_a_regular_file``, ``io_error`` and the confinement codes.
    """
    workdir = policy.check_workdir(action.workdir)
    if not workdir.is_dir():
        raise ActionRefused("not_found", f"workdir {workdir} does not exist (attach the session)")
    with Tree.open(workdir, boundary, shown_as=action.workdir) as tree:
        shown = action.path
        try:
            spot = tree.locate(action.path)
            shown = spot.shown
            fd = tree.open_file(spot, os.O_RDONLY | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError):
            raise ActionRefused("not_found", f"{shown}: no such file") from None
        except IsADirectoryError:
            raise ActionRefused("is_directory", f"{shown} is a directory") from None
        except OSError as exc:
            raise ActionRefused("io_error",
                                f"cannot read {shown}: {exc.strerror or exc}") from None
        return _view(fd, shown, max_bytes)


def _view(fd: int, shown: str, max_bytes: int) -> ImageContent:
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ActionRefused("is_directory", f"{shown} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ActionRefused("not_a_regular_file",
                                f"{shown} is not a regular file (a FIFO, socket or device)")
        head = os.read(fd, 16)
        mime = sniff_mime(head)
        if mime is None:
            raise ActionRefused(
                "not_an_image",
                f"{shown} is not a PNG, JPEG, GIF or WebP image (its first bytes are "
                f"{head[:8].hex(' ')}); read_file reads text")
        if info.st_size > max_bytes:
            raise ActionRefused(
                "too_large",
                f"{shown} is {_size_text(info.st_size)}; view_image takes images of up to "
                f"{_size_text(max_bytes)} (what fits one message to the server): make a "
                f"smaller copy first, e.g. `convert {shown} -resize 50% smaller.png`, and "
                "view that")
        data = head + _read_rest(fd, max_bytes + 1 - len(head))
    except OSError as exc:
        raise ActionRefused("io_error", f"cannot read {shown}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while being read
        raise ActionRefused("too_large", f"{shown} is over {_size_text(max_bytes)}, the most "
                                         "view_image takes")
    size = image_size(data, mime)
    return ImageContent(path=shown, mime=mime,  # type: ignore[arg-type]
                        data=base64.b64encode(data).decode("ascii"), size=len(data),
                        width=size[0] if size else None, height=size[1] if size else None)


def _read_rest(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total < limit and (chunk := os.read(fd, min(1024 * _KIB, limit - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
