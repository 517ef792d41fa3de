"""Files sent with prompts as a plugin: ``/api/blobs`` and the pairing QR code. The store
itself is the deployment's (``blobs``, a file per content hash or a row among replicas): the
engine checks a prompt's files in it before any plugin is built."""

from __future__ import annotations

from codey_server.blobs.routes import BlobsController, qr_svg
from codey_server.http.plugin import FeaturePlugin

__all__ = ["PLUGIN"]

PLUGIN = FeaturePlugin("blobs", routes=(BlobsController, qr_svg))
