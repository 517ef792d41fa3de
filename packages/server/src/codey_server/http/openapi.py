"""The OpenAPI document at ``/schema/openapi.json`` (also at ``/schema``).

No HTML viewer is served: Litestar's viewers (Swagger UI, ReDoc, Scalar, …) load their scripts
from CDNs — one unpinned, none with subresource integrity — on a public, unauthenticated page
of a server that holds credentials. Open the document in a viewer of your own.

It is generated from the routes' types, so it stays true as long as bodies and answers are
msgspec structs and each route lists its error statuses (:func:`~.errors.errors`).
``tests/integration/test_openapi.py`` checks it against a real server.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

# Litestar's own struct schemas, which it exports from no public module
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.router import Router

from codey_server.http.access import PUBLIC

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator
    from litestar.openapi.spec import Schema
    from litestar.typing import FieldDefinition

__all__ = ["ClosedStructs", "openapi_config"]


class ClosedStructs(StructSchemaPlugin):
    """A struct that forbids unknown fields is ``"additionalProperties": false`` in the
    document (Litestar leaves it open, yet msgspec answers an unknown field with a 400)."""

    def is_plugin_supported_field(self, field_definition: FieldDefinition) -> bool:
        return super().is_plugin_supported_field(field_definition) and bool(
            field_definition.type_.__struct_config__.forbid_unknown_fields)

    def to_openapi_schema(self, field_definition: FieldDefinition,
                          schema_creator: SchemaCreator) -> Schema:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        schema.additional_properties = False
        return schema


def _version() -> str:
    try:
        return version("codey-server")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


def openapi_config() -> OpenAPIConfig:
    """Public, like the rest of what the server publishes about itself."""
    return OpenAPIConfig(
        title="codey-server", version=_version(), use_handler_docstrings=True,
        description="The REST API of codey-server. Its sockets (`/ws/client`, `/ws/worker`) "
                    "are described in docs/protocol.md.",
        openapi_router=Router("/schema", route_handlers=[], opt=PUBLIC,
                              include_in_schema=False),
        # the document only (at /schema and /schema/openapi.json): see the module docstring
        render_plugins=[JsonRenderPlugin()])
