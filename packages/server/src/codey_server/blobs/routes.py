"""``/api/blobs``: files sent with prompts; ``/api/qr.svg``: the pairing link as a QR code.

``POST /api/blobs?name=…&mime=…`` (the body is the file) stores it once by content hash
(:class:`~codey_server.blobs.store.BlobStore`) and answers its
:class:`~codey_protocol.events.Attachment`; a prompt then carries that, never the bytes.
``GET /api/blobs/{hash}`` gives it back: raster images inline (the transcript's thumbnails),
anything else as a download, so a stored file can never run as a page of this origin (an SVG
or HTML file would).

The QR code is rendered here with segno, because the web client has no build step and no
third-party JS.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Annotated

from litestar import Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIFormat, OpenAPIMediaType, OpenAPIType, Operation
from litestar.openapi.spec import RequestBody as OpenAPIRequestBody
from litestar.openapi.spec import Schema as OpenAPISchema
from litestar.params import FromPath, FromQuery, Parameter

from codey_protocol.events import Attachment
from codey_server.blobs.store import IMAGE_MIMES, MAX_BLOB_BYTES, MIME, BlobStore, clean_name
from codey_server.core.rules import CommandRejected
from codey_server.http.errors import errors
from codey_server.http.resource import Resource

__all__ = ["MAX_QR_TEXT", "BlobsController", "qr_svg"]

MAX_QR_TEXT = 1024

_FILE = ResponseSpec(bytes, media_type="*/*", generate_examples=False,
                     description="The file: inline for a PNG, JPEG, GIF or WebP asked for with "
                                 "its `mime`, else as an attachment.")
_SVG = ResponseSpec(str, media_type="image/svg+xml", generate_examples=False,
                    description="The QR code as SVG.")


@dataclass
class _FileBody(Operation):
    """The upload's body in the document: Litestar documents none for a raw ``body: bytes``."""

    def __post_init__(self) -> None:
        self.request_body = OpenAPIRequestBody(
            required=True, description="The file: 1 byte to 10 MiB.",
            content={"application/octet-stream": OpenAPIMediaType(schema=OpenAPISchema(
                type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY, min_length=1,
                max_length=MAX_BLOB_BYTES))})


class BlobsController(Resource):
    path = "/api/blobs"
    tags = ["files"]

    # the documented 10 MiB, not Litestar's default limit of 10,000,000 bytes
    # in a thread: among replicas the file goes to the database too
    @post(status_code=201, sync_to_thread=True, responses=errors(400, 413),
          request_max_body_size=MAX_BLOB_BYTES + 1, operation_class=_FileBody)
    def upload(self, body: bytes, blobs: NamedDependency[BlobStore], name: FromQuery[str] = "file",
               mime: FromQuery[str] = "application/octet-stream") -> Attachment:
        """Store a file to send with a prompt (at most 10 MiB); the body is the file."""
        if not body:
            raise CommandRejected("bad_request", "the file is empty")
        if len(body) > MAX_BLOB_BYTES:
            raise CommandRejected("too_large", f"a file may have at most "
                                               f"{MAX_BLOB_BYTES // (1024 * 1024)} MiB")
        mime = mime.lower() if MIME.match(mime.lower()) else "application/octet-stream"
        digest = blobs.put(body)
        return Attachment(hash=digest, name=clean_name(name), mime=mime, size=len(body))

    @get("/{digest:str}", sync_to_thread=True, responses={200: _FILE, **errors(404)})
    def download(self, digest: FromPath[str], blobs: NamedDependency[BlobStore],
                 mime: FromQuery[str] = "application/octet-stream") -> Response[bytes]:
        """A stored file by its SHA-256."""
        data = blobs.get(digest)
        if data is None:
            raise NotFoundException(f"no file {digest!r}")
        headers = {"x-content-type-options": "nosniff",
                   "cache-control": "private, max-age=86400"}
        if mime in IMAGE_MIMES:
            return Response(content=data, media_type=mime, headers=headers)
        headers["content-disposition"] = "attachment"
        return Response(content=data, media_type="application/octet-stream", headers=headers)


@get("/api/qr.svg", sync_to_thread=False, tags=["pairing"], responses={200: _SVG, **errors(400)})
def qr_svg(text: Annotated[str, Parameter(min_length=1, max_length=MAX_QR_TEXT)]
           ) -> Response[bytes]:
    """``text`` (at most 1024 characters) as a QR code, for the pairing link."""
    import segno  # on the first QR code, not with the server

    out = io.BytesIO()
    segno.make(text, error="m").save(out, kind="svg", scale=4, border=2, dark="#111",
                                     light="#fff", xmldecl=False, svgns=True)
    return Response(content=out.getvalue(), media_type="image/svg+xml",
                    headers={"cache-control": "private, max-age=3600"})
