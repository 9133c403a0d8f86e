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
descended into; the plan is then compiled into straight-line code.
"""

from __future__ import annotations

from collections.abc import Callable
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
    # One type_info per class (it translates the whole schema under the class).
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    holds = {field.name for field in info.fields if _holds_struct(field.type)}
    nested = tuple(name for name in fields if name in holds)
    return tuple(compare), nested


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
    fn = _NORMALIZERS[type(obj)]
    return fn(obj) if fn is not None else False


class _Normalizers(dict[type, "Callable[[Any], bool] | None"]):
    """Type -> the normalizer of its values (None: nothing to do), made on first use.

    A struct class gets its own (`_compile`), any other type None, except that
    in the table of field values (``with_tuples``) a tuple gets one that
    normalizes the structs among its items.
    """

    def __init__(self, *, with_tuples: bool) -> None:
        super().__init__()
        self.with_tuples = with_tuples

    def __missing__(self, cls: type) -> Callable[[Any], bool] | None:
        fn: Callable[[Any], bool] | None = None
        if issubclass(cls, msgspec.Struct):
            fn = _NORMALIZERS[cls] if self.with_tuples else _compile(cls)
        elif self.with_tuples and issubclass(cls, tuple):
            fn = _normalize_items
        self[cls] = fn
        return fn


_NORMALIZERS = _Normalizers(with_tuples=False)
_FIELD_NORMALIZERS = _Normalizers(with_tuples=True)


def _normalize_items(items: tuple[Any, ...]) -> bool:
    changed = False
    for item in items:
        fn = _NORMALIZERS[type(item)]
        if fn is not None and fn(item):
            changed = True
    return changed


def _compile(cls: type[msgspec.Struct]) -> Callable[[Any], bool] | None:
    """The normalizer of one class: its plan as straight-line code, each value
    dispatched on its exact type (every event is normalized on append and on a
    strict verify, so the loop over the plan, the isinstance checks and the call
    for a class with nothing to normalize are worth saving). None when the class
    has no field to compare and none to descend into."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan(cls)
    compare, nested = plan
    if not compare and not nested:
        return None
    scope: dict[str, Any] = {"_set": msgspec.structs.force_setattr, "_table": _FIELD_NORMALIZERS}
    lines = ["def normalize(obj):", "    changed = False"]
    for i, (name, default) in enumerate(compare):
        scope[f"_d{i}"], scope[f"_t{i}"] = default, type(default)
        lines += [
            f"    v = obj.{name}",
            f"    if v is not _d{i} and type(v) is _t{i} and v == _d{i}:",
            f"        _set(obj, {name!r}, _d{i})",
            "        changed = True",
        ]
    for name in nested:
        lines += [
            f"    v = obj.{name}",
            "    f = _table[type(v)]",
            "    if f is not None and f(v):",
            "        changed = True",
        ]
    lines.append("    return changed")
    exec("\n".join(lines), scope)  # the source is built above from field names
    fn: Callable[[Any], bool] = scope["normalize"]
    return fn
