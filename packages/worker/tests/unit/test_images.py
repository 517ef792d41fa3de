"""view_image: the kind from the first bytes (not the name), the size from the header, the
bytes in base64; too large, not an image, and outside the workdir refused."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest

from codey_protocol import codec
from codey_protocol.worker import ActionResult, ViewImage
from codey_worker.confine import ActionRefused
from codey_worker.frames import FRAME_BUDGET
from codey_worker.images import MAX_IMAGE_BYTES, image_size, sniff_mime, view_image
from codey_worker.policy import LocalPolicy

OPEN = LocalPolicy(allowed_roots=[Path("/")])


def png(width: int, height: int) -> bytes:
    """A real PNG (8-bit greyscale, every pixel black)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))
    rows = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def gif(width: int, height: int) -> bytes:
    return (b"GIF89a" + struct.pack("<HH", width, height) + b"\x80\x00\x00"
            + b"\x00\x00\x00\xff\xff\xff" + b",\x00\x00\x00\x00"
            + struct.pack("<HH", width, height) + b"\x00\x02\x02D\x01\x00;")


def jpeg(width: int, height: int) -> bytes:
    """SOI, a JFIF APP0 segment, then a baseline SOF0 frame header (enough for a header)."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = (b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1)
            + b"\x01\x11\x00")
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def webp(kind: bytes, width: int, height: int) -> bytes:
    if kind == b"VP8X":
        body = (b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little")
                + (height - 1).to_bytes(3, "little"))
    elif kind == b"VP8L":
        bits = (width - 1) | ((height - 1) << 14)
        body = b"\x2f" + struct.pack("<I", bits)
    else:
        body = b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", width, height)
    chunk = kind + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workdir = tmp_path / "ws"
    workdir.mkdir()
    return workdir


def view(ws: Path, path: str, **kw: int) -> ActionResult:
    content = view_image(ViewImage(action_id="a", session_id="s", workdir=str(ws), path=path),
                         OPEN, **kw)
    return ActionResult(action_id="a", result=content)


def refused(ws: Path, path: str, **kw: int) -> ActionRefused:
    with pytest.raises(ActionRefused) as info:
        view(ws, path, **kw)
    return info.value


@pytest.mark.parametrize(("name", "data", "mime", "size"), [
    ("pic.png", png(3, 2), "image/png", (3, 2)),
    ("pic.gif", gif(5, 4), "image/gif", (5, 4)),
    ("pic.jpg", jpeg(640, 480), "image/jpeg", (640, 480)),
    ("x.webp", webp(b"VP8X", 1920, 1080), "image/webp", (1920, 1080)),
    ("l.webp", webp(b"VP8L", 300, 200), "image/webp", (300, 200)),
    ("y.webp", webp(b"VP8 ", 64, 48), "image/webp", (64, 48)),
])
def test_each_kind_is_recognised_with_its_size(ws: Path, name: str, data: bytes, mime: str,
                                               size: tuple[int, int]) -> None:
    (ws / name).write_bytes(data)
    answer = view(ws, name)
    content = answer.result
    assert (content.path, content.mime, content.size) == (name, mime, len(data))  # type: ignore[union-attr]
    assert (content.width, content.height) == size  # type: ignore[union-attr]
    assert base64.b64decode(content.data) == data  # type: ignore[union-attr]


def test_the_name_is_not_trusted(ws: Path) -> None:
    (ws / "really-a-gif.png").write_bytes(gif(2, 2))
    assert view(ws, "really-a-gif.png").result.mime == "image/gif"  # type: ignore[union-attr]
    (ws / "fake.png").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>\n")
    err = refused(ws, "fake.png")
    assert err.code == "not_an_image" and "3c 73 76 67" in err.message
    (ws / "empty.png").write_bytes(b"")
    assert refused(ws, "empty.png").code == "not_an_image"


def test_a_header_that_says_nothing_plainly_gives_no_size() -> None:
    assert sniff_mime(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert image_size(b"\xff\xd8\xff\xda\x00\x02", "image/jpeg") is None
    assert image_size(b"\x89PNG\r\n\x1a\n", "image/png") is None
    assert sniff_mime(b"RIFF\x00\x00\x00\x00WAVE") is None


def test_too_large_says_the_limit(ws: Path) -> None:
    (ws / "big.png").write_bytes(png(3, 2) + b"\x00" * 5000)
    err = refused(ws, "big.png", max_bytes=4096)
    assert err.code == "too_large" and "up to 4 KiB" in err.message
    assert "smaller copy" in err.message


def test_the_largest_image_allowed_fits_one_frame(ws: Path) -> None:
    data = png(3, 2)
    (ws / "max.png").write_bytes(data + b"\x00" * (MAX_IMAGE_BYTES - len(data)))
    frame = codec.encode(view(ws, "max.png"))
    assert len(frame) <= FRAME_BUDGET
    (ws / "over.png").write_bytes(data + b"\x00" * (MAX_IMAGE_BYTES + 1 - len(data)))
    assert refused(ws, "over.png").code == "too_large"


def test_confined_and_regular_files_only(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.png").write_bytes(png(1, 1))
    assert refused(ws, "../secret.png").code == "path_outside_workdir"
    (ws / "link.png").symlink_to(tmp_path / "secret.png")
    assert refused(ws, "link.png").code == "path_outside_workdir"
    assert refused(ws, "missing.png").code == "not_found"
    (ws / "dir").mkdir()
    assert refused(ws, "dir").code == "is_directory"
