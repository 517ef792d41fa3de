"""The OpenAPI document at ``/schema/openapi.json`` (also at ``/schema``).

No HTML viewer is served: Litestar's viewers (Swagger UI, ReDoc, Scalar, …) load their scripts
from CDNs — one unpinned, none with subresource integrity — on a public, unauthenticated page
of a server that holds credentials. Open the document in a viewer of your own.

It is generated from the routes' types, so it stays true as long as bodies and answers are
msgspec structs, their rules are in their fields' types (:mod:`.fields`) and each route lists
its error statuses (:func:`~.errors.errors`). ``tests/integration/test_openapi.py`` checks
every route's answers against it, and ``test_schemathesis.py`` that the requests it allows
are taken.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import msgspec

# Litestar's own struct schemas, which it exports from no public module
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Schema
from litestar.router import Router

from codey_protocol.version import __version__
from codey_server.http.access import PUBLIC

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator
    from litestar.typing import FieldDefinition

__all__ = ["StructSchemas", "openapi_config"]


class StructSchemas(StructSchemaPlugin):
    """Litestar's struct schemas, made as strict as msgspec's decoding of the struct:

    - a struct that forbids unknown fields is ``"additionalProperties": false`` (Litestar
      leaves it open, yet msgspec answers an unknown field with a 400);
    - the items of a list keep their constraints (Litestar drops the ``Meta`` of
      ``list[Annotated[str, Meta(...)]]``; msgspec checks it);
    - so does an optional number (Litestar drops the bounds of
      ``Annotated[float, Meta(ge=0)] | None``; schemathesis then sends -1 and gets the 400);
    - a struct's ``__schema_rules__`` (JSON Schema joining its fields, see :mod:`.fields`)
      are added to its schema as they are.
    """

    def to_openapi_schema(self, field_definition: FieldDefinition,
                          schema_creator: SchemaCreator) -> Schema:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        struct = field_definition.type_
        if struct.__struct_config__.forbid_unknown_fields:
            schema.additional_properties = False
        info = msgspec.inspect.type_info(struct)
        assert isinstance(info, msgspec.inspect.StructType)
        for field in info.fields:
            prop = (schema.properties or {}).get(field.encode_name)
            items = _item_constraints(field.type)
            # an optional list is ``oneOf: [array, null]``: its items are in the array's
            for array in _arrays(prop) if items else ():
                for name, value in items.items():
                    setattr(array.items, name, value)
            bounds = _optional_number_bounds(field.type)
            for number in _numbers(prop) if bounds else ():
                for name, value in bounds.items():
                    setattr(number, name, value)
        for keyword, rule in getattr(struct, "__schema_rules__", {}).items():
            # JSON Schema as written (Litestar serialises a dict as it is)
            setattr(schema, _SCHEMA_FIELDS[keyword], rule)
        return schema


#: Litestar's name of each JSON Schema keyword (``anyOf`` is ``any_of``)
_SCHEMA_FIELDS = {f.metadata.get("alias", f.name): f.name for f in dataclasses.fields(Schema)}


def _arrays(prop: object) -> list[Schema]:
    """The array schemas of a property: itself, or the members of its ``oneOf``/``anyOf``."""
    if not isinstance(prop, Schema):
        return []
    if isinstance(prop.items, Schema):
        return [prop]
    members = [*(prop.one_of or ()), *(prop.any_of or ())]
    return [m for m in members if isinstance(m, Schema) and isinstance(m.items, Schema)]


def _numbers(prop: object) -> list[Schema]:
    """The number members of an optional property's ``oneOf``/``anyOf``."""
    if not isinstance(prop, Schema):
        return []
    members = [*(prop.one_of or ()), *(prop.any_of or ())]
    return [m for m in members if isinstance(m, Schema)
            and str(getattr(m.type, "value", m.type)) in ("number", "integer")]


def _optional_number_bounds(t: msgspec.inspect.Type) -> dict[str, Any]:
    """The bounds of an optional number (``Annotated[float, Meta(ge=…)] | None``)."""
    if not isinstance(t, msgspec.inspect.UnionType):
        return {}
    members = [u.type if isinstance(u, msgspec.inspect.Metadata) else u for u in t.types]
    number = next((u for u in members if isinstance(u, (msgspec.inspect.FloatType,
                                                         msgspec.inspect.IntType))), None)
    if number is None:
        return {}
    found = {"minimum": number.ge, "maximum": number.le, "exclusive_minimum": number.gt,
             "exclusive_maximum": number.lt, "multiple_of": number.multiple_of}
    return {name: value for name, value in found.items() if value is not None}


def _item_constraints(t: msgspec.inspect.Type) -> dict[str, Any]:
    """The string constraints of a list's items (``t`` the field's type, maybe optional)."""
    if isinstance(t, msgspec.inspect.UnionType):
        t = next((u for u in t.types if not isinstance(u, msgspec.inspect.NoneType)), t)
    if isinstance(t, msgspec.inspect.Metadata):
        t = t.type
    if not isinstance(t, msgspec.inspect.ListType):
        return {}
    item = t.item_type
    if isinstance(item, msgspec.inspect.Metadata):
        item = item.type
    if not isinstance(item, msgspec.inspect.StrType):
        return {}
    found = {"pattern": item.pattern, "min_length": item.min_length,
             "max_length": item.max_length}
    return {name: value for name, value in found.items() if value is not None}


def _version() -> str:
    return __version__


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
