"""Value-canonical msgspec Structs: equal values must give equal bytes.

Theory of operation
-------------------
Canonical encodings omit fields equal to their default (``omit_defaults``),
which keeps old events' bytes stable when a field is added. But msgspec
decides "equal to the default" by *identity* for most values: a field set to
an equal copy of its default (``"text/plain; charset=utf-8"`` built at run
time, ``Usage()``, ``0.6`` parsed from TOML, ``128000`` read from a file) is
written out, while the default object itself is omitted. Two equal events
would then have different bytes and different hashes.

`normalize` fixes that before encoding: every field whose value equals its
default (same type, ``==``) is set to the default object itself, recursively
through nested structs and tuples of structs. Encoding a normalized struct
omits exactly the fields equal to their defaults, so the bytes depend only on
the value. Per class the work is planned once: only fields whose defaults are
not singletons are compared, and only fields that can hold structs are
descended into.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = []

_Plan = tuple[tuple[tuple[str, Any], ...], tuple[str, ...]]
_PLANS: dict[type, _Plan] = {}
_SINGLETONS = (type(None), bool)


def _plan(cls: type[msgspec.Struct]) -> _Plan:
    fields = cls.__struct_fields__
    defaults = cls.__struct_defaults__
    offset = len(fields) - len(defaults)
    compare: list[tuple[str, Any]] = []
    for name, default in zip(fields[offset:], defaults, strict=True):
        if default is msgspec.NODEFAULT or isinstance(default, _SINGLETONS):
            continue
        if type(default).__name__ == "Factory":
            continue  # default_factory fields are always encoded
        if isinstance(default, (str, tuple, bytes, frozenset)) and not default:
            continue  # empty immutables are singletons
        if isinstance(default, int) and -5 <= default <= 256:
            continue  # CPython caches these ints
        compare.append((name, default))
    nested = tuple(name for name in fields if _may_hold_struct(cls, name))
    return tuple(compare), nested


def _may_hold_struct(cls: type[msgspec.Struct], name: str) -> bool:
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        if field.name == name:
            return _holds_struct(field.type)
    return False


def _holds_struct(info: msgspec.inspect.Type) -> bool:
    mi = msgspec.inspect
    if isinstance(info, mi.StructType):
        return True
    if isinstance(info, mi.UnionType):
        return any(_holds_struct(t) for t in info.types)
    if isinstance(info, (mi.ListType, mi.VarTupleType)):
        return _holds_struct(info.item_type)
    if isinstance(info, mi.TupleType):
        return any(_holds_struct(t) for t in info.item_types)
    if isinstance(info, mi.Metadata):
        return _holds_struct(info.type)
    return False


def normalize(obj: msgspec.Struct) -> bool:
    """Set every field of ``obj`` equal to its default to the default object itself.

    Works in place (frozen structs included) and recursively. Returns True when
    anything changed, i.e. when encoding ``obj`` before would have written a
    field that its value says must be omitted.
    """
    cls = type(obj)
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan(cls)
    compare, nested = plan
    changed = False
    for name, default in compare:
        value = getattr(obj, name)
        if value is not default and type(value) is type(default) and value == default:
            msgspec.structs.force_setattr(obj, name, default)
            changed = True
    for name in nested:
        value = getattr(obj, name)
        if isinstance(value, msgspec.Struct):
            changed = normalize(value) or changed
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, msgspec.Struct):
                    changed = normalize(item) or changed
    return changed
