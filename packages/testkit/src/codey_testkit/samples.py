"""Sample values for any field of a protocol struct, for tests that must cover every field.

A test that loops over a struct's fields (every updatable item field, every item kind) needs a
value of each field's type without naming the field, so that a field added later is covered
with no edit to the test. :func:`sample` builds one from the type; the ``n`` argument varies
strings and numbers so that two samples are told apart.
"""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect as mi

from codey_testkit.errors import SampleError

__all__ = ["SampleError", "sample", "sample_struct"]


def sample(tp: Any, n: int = 1) -> Any:
    """A value of type ``tp`` (a Python annotation or a ``msgspec.inspect.Type``).

    Optional types give their non-``None`` value; literals their last value in msgspec's
    (sorted) order; booleans ``True`` (fields default to ``False``); lists one element;
    structs their required fields.
    """
    t = tp if isinstance(tp, mi.Type) else mi.type_info(tp)
    if isinstance(t, mi.UnionType):
        kinds = [x for x in t.types if not isinstance(x, mi.NoneType)]
        if not kinds:
            raise SampleError(f"no non-None type in {t}")
        return sample(kinds[0], n)
    if isinstance(t, mi.LiteralType):
        return t.values[-1]
    if isinstance(t, mi.BoolType):
        return True
    if isinstance(t, mi.IntType):
        return 40 + n
    if isinstance(t, mi.FloatType):
        return 0.5 + n
    if isinstance(t, mi.StrType):
        return f"sample {n} ✨"
    if isinstance(t, mi.ListType):
        return [sample(t.item_type, n)]
    if isinstance(t, mi.DictType):
        return {f"k{n}": sample(t.value_type, n)}
    if isinstance(t, mi.AnyType):
        return {"n": n}
    if isinstance(t, mi.StructType):
        return sample_struct(t.cls, n)
    raise SampleError(f"no sample for {t!r}; add its type to codey_testkit.samples.sample")


def sample_struct(cls: type[msgspec.Struct], n: int = 1, **given: Any) -> Any:
    """An instance of ``cls``: ``given`` fields as given, other required fields sampled."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    fields = {f.name: sample(f.type, n) for f in info.fields
              if f.required and f.name not in given}
    return cls(**fields, **given)
