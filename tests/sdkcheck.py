"""Strict checks of request bodies against the official SDKs' request TypedDicts.

The SDKs describe every request field as a ``TypedDict`` (``Required`` keys,
``Literal`` tags, unions of block types). Pydantic validates the value types
of such a TypedDict but ignores keys it does not know, so a misspelled field
would pass. `check` walks the annotations itself and fails on a missing
required key, an unknown key, a wrong ``Literal`` or a wrong scalar type,
naming the ``$``-path; unions pass when one member matches.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from typing import Any

import typing_extensions

__all__ = ["check", "problems"]

_TYPED_DICT_META = (
    type(typing.TypedDict("_A", {})),  # type: ignore[operator]
    type(typing_extensions.TypedDict("_B", {})),  # type: ignore[operator]
)  # type: ignore[operator]


def _is_typed_dict(tp: object) -> bool:
    return (
        isinstance(tp, type)
        and isinstance(tp, _TYPED_DICT_META)
        and hasattr(tp, "__required_keys__")
    )


def _alias(metadata: tuple[object, ...]) -> str | None:
    for item in metadata:
        alias = getattr(item, "alias", None)
        if isinstance(alias, str):
            return alias
    return None


def _strip(tp: Any) -> tuple[Any, str | None]:
    """Remove Required/NotRequired/Annotated wrappers; return (type, wire alias)."""
    alias = None
    while True:
        origin = typing_extensions.get_origin(tp)
        if origin in (
            typing_extensions.Required,
            typing_extensions.NotRequired,
            typing.Required,
            typing.NotRequired,
            typing_extensions.ReadOnly,
        ):
            tp = typing_extensions.get_args(tp)[0]
        elif origin is typing_extensions.Annotated or origin is typing.Annotated:
            alias = alias or _alias(tuple(tp.__metadata__))
            tp = tp.__origin__
        else:
            return tp, alias


def problems(value: object, tp: Any, path: str = "$") -> list[str]:
    """Why ``value`` does not fit ``tp`` (empty when it does)."""
    tp, _ = _strip(tp)
    if tp is Any or tp is object:
        return []
    if tp is None or tp is type(None):
        return [] if value is None else [f"{path}: expected null, found {value!r:.60}"]
    if _is_typed_dict(tp):
        return _typed_dict(value, tp, path)
    origin = typing_extensions.get_origin(tp)
    args = typing_extensions.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        found: list[tuple[tuple[int, int], str, list[str]]] = []
        for member in args:
            issue = problems(value, member, path)
            if not issue:
                return []
            # The closest member is the one whose tag (type/role) matched.
            shallow = sum(
                p.startswith((f"{path}:", f"{path}.type:", f"{path}.role:")) for p in issue
            )
            found.append(
                ((shallow, len(issue)), getattr(_strip(member)[0], "__name__", str(member)), issue)
            )
        _, name, issue = min(found, key=lambda f: f[0])
        return [f"{path}: matches no member of the union; closest {name}: {'; '.join(issue[:3])}"]
    if origin is typing.Literal or origin is typing_extensions.Literal:
        return (
            []
            if value in args and type(value) in {type(a) for a in args}
            else [f"{path}: expected one of {args}, found {value!r:.60}"]
        )
    if tp is str:
        return [] if isinstance(value, str) else [f"{path}: expected str, found {value!r:.60}"]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{path}: expected bool, found {value!r:.60}"]
    if tp is int:
        return (
            []
            if isinstance(value, int) and not isinstance(value, bool)
            else [f"{path}: expected int, found {value!r:.60}"]
        )
    if tp is float:
        return (
            []
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else [f"{path}: expected number, found {value!r:.60}"]
        )
    if origin in (dict, collections.abc.Mapping, typing.Dict):  # noqa: UP006
        if not isinstance(value, dict):
            return [f"{path}: expected an object, found {value!r:.60}"]
        value_type = args[1] if len(args) == 2 else Any
        out: list[str] = []
        for key, item in value.items():
            out += problems(item, value_type, f"{path}.{key}")
        return out
    if (
        origin
        in (
            list,
            collections.abc.Iterable,
            collections.abc.Sequence,
            typing.List,  # noqa: UP006
            tuple,
        )
        or getattr(tp, "__name__", "") == "SequenceNotStr"
        or getattr(origin, "__name__", "") == "SequenceNotStr"
    ):
        if not isinstance(value, list):
            return [f"{path}: expected an array, found {value!r:.60}"]
        item_type = args[0] if args else Any
        out = []
        for i, item in enumerate(value):
            out += problems(item, item_type, f"{path}[{i}]")
        return out
    if isinstance(tp, type):
        # A class that is not a TypedDict (a response model, an IO type): the SDK
        # accepts it from Python code, but a JSON body must match a param shape.
        return [f"{path}: {tp.__name__} is not a request param shape"]
    return []  # type variables and other constructs a JSON body never holds


@functools.cache
def _wire(tp: Any) -> dict[str, tuple[bool, Any]]:
    """Wire key -> (required, annotation) of a TypedDict."""
    wire: dict[str, tuple[bool, Any]] = {}
    for name, hint in typing_extensions.get_type_hints(tp, include_extras=True).items():
        _, alias = _strip(hint)
        wire[alias or name] = (_required(tp, name, hint), hint)
    return wire


def _required(tp: Any, name: str, hint: Any) -> bool:
    """Whether a key is required. The SDKs' modules use string annotations, so on
    older Pythons ``__required_keys__`` misses ``Required[...]``: read the hint."""
    while True:
        origin = typing_extensions.get_origin(hint)
        if origin in (typing_extensions.Required, typing.Required):
            return True
        if origin in (typing_extensions.NotRequired, typing.NotRequired):
            return False
        if origin in (typing_extensions.Annotated, typing.Annotated):
            hint = hint.__origin__
            continue
        if origin is typing_extensions.ReadOnly:
            hint = typing_extensions.get_args(hint)[0]
            continue
        return name in tp.__required_keys__ or (
            bool(getattr(tp, "__total__", True)) and (name not in tp.__optional_keys__)
        )


def _typed_dict(value: object, tp: Any, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({tp.__name__}), found {value!r:.60}"]
    wire = _wire(tp)
    out: list[str] = []
    for key in value:
        if key not in wire:
            out.append(f"{path}: unknown key {key!r} for {tp.__name__} (known: {sorted(wire)})")
    for key, (required, hint) in wire.items():
        if key not in value:
            if required:
                out.append(f"{path}: missing required key {key!r} of {tp.__name__}")
            continue
        out += problems(value[key], hint, f"{path}.{key}")
    return out


def check(value: object, tp: Any) -> None:
    """Raise AssertionError listing every problem of ``value`` against ``tp``."""
    found = problems(value, tp)
    assert not found, "\n".join(found[:10])
