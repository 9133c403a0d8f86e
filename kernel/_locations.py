"""Locations: which store a location names, looked up in one table.

Theory of operation
-------------------
`turnlog.open` takes a location (a string or a path) and asks `SCHEMES`, in
order, which entry claims it: ``":memory:"`` is an in-memory store, a
``postgresql://`` (or ``postgres://``) URL a `PostgresStore`, and anything else
a directory holding an `LMDBStore` (the last entry claims every path). Each
entry opens its store from the location and the options every backend takes
(``readonly``, ``sync``, ``create``), so `open` has no branch per backend and a
new backend is one module plus one entry here.

``create=False`` opens only a store that exists: an entry raises
`StoreNotFoundError` when there is none at the location (an in-memory store
never exists before it is opened), instead of creating an empty one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import msgspec

from ._errors import InvalidArgumentError, StoreNotFoundError
from ._lmdb import LMDBStore
from ._memstore import MemoryStore
from ._postgres import PostgresStore
from ._store import Store
from ._validation import invalid

__all__: list[str] = []


class Scheme(msgspec.Struct, frozen=True):
    """One kind of location and how to open the store it names.

    Attributes:
        name: the backend's name (`Store.name`).
        claims: True for a location this entry opens.
        open: opens the store at a claimed location with ``readonly``, ``sync`` and
            ``create`` (raising `StoreNotFoundError` when ``create`` is False and
            there is no store there).
        example: a location of this kind, for messages and docs.
    """

    name: str
    claims: Callable[[str], bool]
    open: Callable[[str, bool, bool, bool], Store]
    example: str


def _open_memory(location: str, readonly: bool, sync: bool, create: bool) -> Store:
    if readonly:
        raise InvalidArgumentError("an in-memory log cannot be read-only")
    if not create:
        raise StoreNotFoundError(
            "no in-memory store to open: one exists only from the "
            "open that creates it; open ':memory:' with create=True"
        )
    return MemoryStore()


def _open_postgres(location: str, readonly: bool, sync: bool, create: bool) -> Store:
    return PostgresStore(location, readonly=readonly, create=create)


def _open_lmdb(location: str, readonly: bool, sync: bool, create: bool) -> Store:
    return LMDBStore(location, readonly=readonly, sync=sync, create=create)


#: Every kind of location `turnlog.open` knows, first match wins (the last one, a
#: directory, claims every location).
SCHEMES: tuple[Scheme, ...] = (
    Scheme("memory", lambda location: location == ":memory:", _open_memory, ":memory:"),
    Scheme(
        "postgres",
        lambda location: location.startswith(("postgresql://", "postgres://")),
        _open_postgres,
        "postgresql://user@host/dbname",
    ),
    Scheme("lmdb", lambda location: True, _open_lmdb, "path/to/store"),
)


def scheme_for(location: str | os.PathLike[str]) -> tuple[Scheme, str]:
    """The entry of `SCHEMES` that claims ``location``, and the location as a string.

    Raises:
        InvalidArgumentError: ``location`` is neither a string nor a path.
    """
    if not isinstance(location, (str, os.PathLike)):
        invalid("path", "a str or path-like", location, with_type=True)
    text = location if isinstance(location, str) else os.fspath(location)
    if not isinstance(text, str):
        invalid("path", "a str path", text, with_type=True)
    return next(scheme for scheme in SCHEMES if scheme.claims(text)), text
